"""Drafts for greedy decoding: tokens proposed to be verified by the model in one forward pass.

A drafter has ``propose(history, budget=None) -> draft``: the tokens it guesses follow ``history``
(the prompt plus the answer so far). The decode loop (:mod:`grogu.runtime.engine.decode`) feeds them after
the pending token and keeps those the model itself chooses, so drafts change how many steps an answer
takes, never the answer. :class:`PromptLookup` copies from the history itself: grounded answers copy
from their documents, so several tokens are often accepted per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.checks import check_int


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
        return self.index(history).propose(budget)

    def index(self, history: list[int]) -> "LookupIndex":
        """An index of ``history`` that proposes drafts as :meth:`propose` does, and grows with the
        answer (:meth:`LookupIndex.append`) at a constant cost per token: the decode loop's form."""
        return LookupIndex(self, history)


class LookupIndex:
    """One row's history (prompt, then answer) with, per n-gram length, the latest end of each n-gram
    but the history's last: a draft is one dictionary lookup per length, not a scan of the history."""

    def __init__(self, lookup: PromptLookup, history: list[int]) -> None:
        self.lookup = lookup
        self.history: list[int] = []
        self._sizes = range(lookup.max_ngram, lookup.min_ngram - 1, -1) if lookup.max_draft else range(0)
        self._ends: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self._sizes}
        self.append(history)

    def append(self, tokens: list[int]) -> None:
        """The history grows by ``tokens``."""
        h = self.history
        for t in tokens:
            s = len(h) - 1  # the n-grams ending at the old last token become earlier copies
            for n in self._sizes:
                if s >= n - 1:
                    self._ends[n][tuple(h[s - n + 1 : s + 1])] = s
            h.append(t)

    def propose(self, budget: int | None = None) -> list[int]:
        """At most ``budget`` (and ``max_draft``) tokens that followed the latest earlier copy of the
        history's last n-gram, the longest n first; [] when nothing matches."""
        budget = self.lookup.max_draft if budget is None else min(budget, self.lookup.max_draft)
        h, end = self.history, len(self.history)
        if budget < 1:
            return []
        for n in self._sizes:
            if n <= end - 1:
                s = self._ends[n].get(tuple(h[end - n :]))
                if s is not None:
                    return h[s + 1 : s + 1 + budget]
        return []
