"""How ``grogu tune`` judges an answer: whole words, as the benchmarks judge them.

An answer is right when a gold answer's words appear, in order, among the answer's words, after SQuAD's
normalisation (lower case, no punctuation, no articles). "1" is not found in "1908", nor "no" in "not".
Token F1 and the answer's length are reported beside it, so a longer answer cannot buy accuracy unseen.
A question whose gold answers are all "yes" or "no" cannot be judged by words (an answer may say "no"
and mean something else): the default judge leaves it out, and the report counts it.
"""

from __future__ import annotations

import re
import string
from typing import Sequence

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


def judgeable(golds: Sequence[str]) -> bool:
    """Whether words can judge the question: not when every gold answer is yes or no."""
    return any(normalize(g) not in ("", "yes", "no") for g in golds)


def answer_words(output: str) -> int:
    """The answer's length in words (after normalisation)."""
    return len(normalize(output).split())


__all__ = ["normalize", "answered_words", "answer_f1", "judgeable", "answer_words"]
