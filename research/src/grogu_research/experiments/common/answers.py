"""Answer checks of the harness (SQuAD's normalisation): correctness, "holds an answer", EM, token F1,
ROUGE-L."""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Callable, Iterable, Sequence


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, drop punctuation and articles, squash spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def normalize_spaced(text: str) -> str:
    """:func:`normalize_answer` with punctuation turned into spaces ('Six-time' -> 'six time')."""
    text = "".join(" " if ch in string.punctuation else ch for ch in text.lower())
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def is_correct(answer: str, golds: Iterable[str]) -> bool:
    """True when the normalised answer contains a normalised gold answer as whole words (with
    punctuation dropped as in SQuAD, or turned into spaces, so 'Six-time winner' holds 'Six')."""
    golds = list(golds)
    for norm in (normalize_answer, normalize_spaced):
        out = f" {norm(answer)} "
        if any(g and f" {g} " in out for g in (norm(x) for x in golds)):
            return True
    return False


def holds_answer(text: str, golds: Iterable[str]) -> bool:
    """True when a gold answer string occurs in ``text`` (normalised or raw, case-insensitive,
    substrings of words included): the strict test for "contains no answer string"."""
    norm, low = normalize_answer(text), text.lower()
    for g in golds:
        ng = normalize_answer(g)
        if (ng and ng in norm) or (g.strip() and g.strip().lower() in low):
            return True
    return False


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def exact_match(answer: str, golds: Iterable[str]) -> float:
    """1.0 when the normalised answer equals a normalised gold answer."""
    a = normalize_answer(answer)
    return float(any(a == normalize_answer(g) for g in golds))


def token_f1(answer: str, gold: str) -> float:
    """SQuAD token-F1 of two strings (normalised tokens; 1.0 when both are empty)."""
    a, g = answer_tokens(answer), answer_tokens(gold)
    if not a or not g:
        return float(a == g)
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    p, r = common / len(a), common / len(g)
    return 2 * p * r / (p + r)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(answer: str, gold: str) -> float:
    """ROUGE-L F-measure (beta = 1) of two strings on normalised tokens (1.0 when both are empty)."""
    a, g = answer_tokens(answer), answer_tokens(gold)
    if not a or not g:
        return float(a == g)
    lcs = _lcs(a, g)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(g)
    return 2 * p * r / (p + r)


def best_over(fn: Callable[[str, str], float], answer: str, golds: Sequence[str]) -> float:
    """The best value of ``fn(answer, gold)`` over the gold answers."""
    return max((fn(answer, g) for g in golds), default=0.0)


__all__ = [
    "normalize_answer",
    "normalize_spaced",
    "is_correct",
    "holds_answer",
    "answer_tokens",
    "exact_match",
    "token_f1",
    "rouge_l",
    "best_over",
]
