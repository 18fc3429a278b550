"""How ``grogu tune`` judges an answer: whole words, as the benchmarks judge them.

An answer is right when a gold answer's words appear, in order, among the answer's words, after SQuAD's
normalisation (lower case, no punctuation, no articles). "1" is not found in "1908", nor "no" in "not".
Token F1 and the answer's length are reported beside it, so a longer answer cannot buy accuracy unseen.
A question whose gold answers are all "yes" or "no" cannot be judged by words (an answer may say "no"
and mean something else): the default judge leaves it out, and the report counts it.

**The dense judge** (:func:`gold_logliks`) reads the target LLM itself. For a context, it is the mean
log-probability per token of the best gold answer, teacher-forced after the grounded prompt (the prompt,
the context and the question, as the pipeline renders them). Nothing is decoded. "Best" is the highest
mean over the gold answers: any of them is right, and the mean makes answers of different lengths
comparable. It is graded where words are not: a context that makes the gold answer likelier scores
higher even when the greedy answer stays wrong (or right).
"""

from __future__ import annotations

import re
import string
from typing import Any, Sequence

_PUNCT = set(string.punctuation)


def normalize(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answered_words(output: str, golds: Sequence[str]) -> bool:
    """A gold answer's words, in order, among the answer's words (SQuAD normalisation)."""
    out = normalize(output).split()
    for g in golds:
        words = normalize(g).split()
        if words and any(out[i : i + len(words)] == words for i in range(len(out) - len(words) + 1)):
            return True
    return False


def answer_f1(output: str, golds: Sequence[str]) -> float:
    """SQuAD's token F1 of the answer against the best-matching gold answer."""
    from ...rerank.selection import token_f1

    out = normalize(output).split()
    return max((token_f1(out, normalize(g).split()) for g in golds), default=0.0)


def gold_logliks(scorer: Any, prompts: Sequence[Sequence[int]], answers: Sequence[Sequence[str]]) -> list[float | None]:
    """The dense judge of each context (module docstring): ``prompts[i]`` is its grounded prompt (token
    ids, as ``UtilityScorer.answer_contexts`` returns it), ``answers[i]`` its question's gold answers.

    Each gold answer is stripped, encoded without special tokens and cut to the scorer's answer budget.
    All of them are teacher-forced in one call of the target's ``token_stats``, the call behind
    ``UtilityScorer.force_answers``. The value is the highest mean token log-probability (nats per
    token) over the gold answers. None where no gold answer has a token, and for every context on a
    target that cannot teacher-force (``scorer.grounded_only``)."""
    out: list[float | None] = [None] * len(prompts)
    if scorer.grounded_only or not prompts:
        return out
    target, budget = scorer.target, scorer.max_new_tokens
    rows = []  # (context, gold answer tokens)
    for i, golds in enumerate(answers):
        for gold in dict.fromkeys(g.strip() for g in golds):
            ids = list(target.encode(gold))[:budget] if gold else []
            if ids:
                rows.append((i, ids))
    stats = target.token_stats([list(prompts[i]) for i, _ in rows], [ids for _, ids in rows]) if rows else []
    for (i, _), s in zip(rows, stats):
        value = float(s.logprob.double().mean())
        out[i] = value if out[i] is None else max(out[i], value)
    return out


def judgeable(golds: Sequence[str]) -> bool:
    """Whether words can judge the question: not when every gold answer is yes or no."""
    return any(normalize(g) not in ("", "yes", "no") for g in golds)


def answer_words(output: str) -> int:
    """The answer's length in words (after normalisation)."""
    return len(normalize(output).split())


__all__ = ["normalize", "answered_words", "answer_f1", "judgeable", "answer_words", "gold_logliks"]
