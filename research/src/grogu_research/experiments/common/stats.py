"""Statistics of the harness: win counts, exact confidence intervals and sign tests, Kendall's tau,
binary-classifier scores, Pearson's r. scipy (the ``eval`` extra) is imported on first use."""

from __future__ import annotations

from typing import Sequence

from grogu.core.extras import require


def _scipy_stats():
    return require("scipy.stats", "the evaluation harness's statistics")


def win_counts(a: Sequence[float], b: Sequence[float]) -> dict:
    """How often a[i] > b[i] (wins), == (ties), < (losses); rate = (wins + ties / 2) / n."""
    wins = sum(x > y for x, y in zip(a, b))
    ties = sum(x == y for x, y in zip(a, b))
    n = len(a)
    return {
        "wins": wins,
        "ties": ties,
        "losses": n - wins - ties,
        "n": n,
        "rate": (wins + 0.5 * ties) / n if n else float("nan"),
    }


def proportion_ci(rate: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) confidence interval of a proportion ``rate`` of ``n`` (rate * n is
    rounded to whole successes; a tie counted as half a win rounds to even)."""
    binomtest = _scipy_stats().binomtest

    if not n:
        return float("nan"), float("nan")
    ci = binomtest(int(round(rate * n)), n).proportion_ci(confidence_level=level)
    return float(ci.low), float(ci.high)


def sign_test(x: Sequence[bool], y: Sequence[bool]) -> dict:
    """Exact two-sided sign test of paired successes: n10 = x only, n01 = y only;
    p = binomtest(n10, n10 + n01, 0.5); 1.0 when the two never disagree."""
    binomtest = _scipy_stats().binomtest

    n10 = sum(bool(a) and not bool(b) for a, b in zip(x, y))
    n01 = sum(bool(b) and not bool(a) for a, b in zip(x, y))
    p = binomtest(n10, n10 + n01, 0.5).pvalue if n10 + n01 else 1.0
    return {"n10": n10, "n01": n01, "p": float(p)}


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def kendall_tau(preference: Sequence[float], outcome: Sequence[float]) -> dict:
    """tau = (C - D) / (C + D) over pairs: C when sign(preference) == sign(outcome) != 0, D when they
    are opposite and both non-zero; pairs with a zero on either side count in neither. NaN when C + D = 0."""
    c = d = 0
    for p, o in zip(preference, outcome):
        s = _sign(p) * _sign(o)
        c += s > 0
        d += s < 0
    return {"C": c, "D": d, "tau": (c - d) / (c + d) if c + d else float("nan")}


def binary_scores(predicted: Sequence[bool], actual: Sequence[bool]) -> dict:
    """Accuracy and F1 (positive class = True) of binary predictions."""
    tp = sum(p and a for p, a in zip(predicted, actual))
    fp = sum(p and not a for p, a in zip(predicted, actual))
    fn = sum(a and not p for p, a in zip(predicted, actual))
    n = len(actual)
    acc = sum(bool(p) == bool(a) for p, a in zip(predicted, actual)) / n if n else float("nan")
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
    return {"accuracy": acc, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "n": n}


def pearson(x: Sequence[float], y: Sequence[float]) -> dict:
    """Pearson r with its two-sided p-value; NaN when either side is constant."""
    pearsonr = _scipy_stats().pearsonr

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"r": float("nan"), "p": float("nan"), "n": len(x)}
    res = pearsonr(x, y)
    return {"r": float(res.statistic), "p": float(res.pvalue), "n": len(x)}


__all__ = ["win_counts", "proportion_ci", "sign_test", "kendall_tau", "binary_scores", "pearson"]
