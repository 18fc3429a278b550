"""Drafts for greedy decoding: tokens proposed to be verified by the model in one forward pass.

A drafter has ``propose(history, budget=None) -> draft``: the tokens it guesses follow ``history``
(the prompt plus the answer so far). The decode loop (:mod:`grogu.engine.decode`) feeds them after
the pending token and keeps those the model itself chooses, so drafts change how many steps an answer
takes, never the answer. :class:`PromptLookup` copies from the history itself: grounded answers copy
from their documents, so several tokens are often accepted per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_int


@dataclass(frozen=True)
class PromptLookup:
    """Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the history's
    last n-gram, for n from ``max_ngram`` down to ``min_ngram`` (the longest match wins).

    Args:
        max_draft: most tokens proposed (0: never any).
        max_ngram: longest n-gram matched.
        min_ngram: shortest n-gram matched (1-gram matches draft mostly noise).
    """

    max_draft: int
    max_ngram: int = 3
    min_ngram: int = 2

    def __post_init__(self) -> None:
        check_int("max_draft", self.max_draft, minimum=0)
        check_int("min_ngram", self.min_ngram, minimum=1)
        check_int("max_ngram", self.max_ngram, minimum=self.min_ngram)

    def propose(self, history: list[int], budget: int | None = None) -> list[int]:
        """At most ``budget`` (and ``max_draft``) tokens that followed the latest earlier copy of the
        history's last n-gram, in the prompt or the answer so far; [] when nothing matches."""
        budget = self.max_draft if budget is None else min(budget, self.max_draft)
        end = len(history)
        if budget < 1:
            return []
        for n in range(min(self.max_ngram, end - 1), self.min_ngram - 1, -1):
            pattern, last = history[end - n :], history[-1]
            for s in range(end - 2, n - 2, -1):  # s: the last token of an earlier copy of the pattern
                if history[s] == last and history[s - n + 1 : s + 1] == pattern:
                    return history[s + 1 : s + 1 + budget]
        return []
