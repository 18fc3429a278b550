"""How the pipeline benchmarks judge an answer: SQuAD's normalisation, a gold answer's words among the
answer's words, token F1, which questions words can judge, and the exact sign test on discordant pairs.

``pipeline_accuracy.py`` (which collects records) and ``pipeline_modes.py`` (which replays the modes on
them) both import from here, so neither imports the other's judging.
"""

from __future__ import annotations

import math
import re
import string


def normalize(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answered(output: str, golds: list[str]) -> bool:
    """The former check: a gold string inside the answer, characters not words ("no" is in "not")."""
    out = normalize(output)
    return any(normalize(g) and normalize(g) in out for g in golds)


def answered_words(output: str, golds: list[str]) -> bool:
    """A gold answer's words, in order, among the answer's words (SQuAD normalisation): "1" is not
    found in "1908", nor "no" in "not"."""
    out = normalize(output).split()
    for g in golds:
        words = normalize(g).split()
        if words and any(out[i : i + len(words)] == words for i in range(len(out) - len(words) + 1)):
            return True
    return False


def answer_f1(output: str, golds: list[str]) -> float:
    """SQuAD's token F1 of the answer against the best-matching gold answer."""
    from grogu.rerank.selection import token_f1

    out = normalize(output).split()
    return max((token_f1(out, normalize(g).split()) for g in golds), default=0.0)


def judgeable(golds: list[str]) -> bool:
    """Whether words can judge the question: not when every gold answer is yes or no (an answer can
    say "no" while meaning something else); such questions are left out of every table."""
    return any(normalize(g) not in ("", "yes", "no") for g in golds)


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test (binomial, p = 1/2) on the discordant pairs."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(0, min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)
