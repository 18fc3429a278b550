"""Paired comparisons of two retrieval set-ups on the same queries: the mean difference of their
per-query utilities, a seeded paired-bootstrap percentile interval and a sign-flip permutation p-value.

Pure functions on lists of floats; no model is involved, so they are tested against hand-computed cases.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

#: sign-flip tests enumerate all 2**n sign patterns up to this n; above it they draw random patterns
EXACT_MAX_N = 16


@dataclass(frozen=True)
class PairedComparison:
    """Set-up ``a`` against set-up ``b`` over ``n`` queries scored under both.

    ``mean_diff``: mean of a - b (the utility's unit, e.g. nats of KeyEntropy, negated).
    ``low`` / ``high``: the paired-bootstrap percentile interval of that mean at ``level``.
    ``p_value``: two-sided sign-flip permutation p-value of mean = 0 (``exact`` when every sign pattern
    was enumerated). ``wins`` / ``losses``: queries where a is higher / lower than b. ``sd``: the standard
    deviation of the per-query differences. ``p_adjusted``: ``p_value`` after Holm's correction over the
    pairs compared together (:func:`holm`); ``differs``: the adjusted p-value is below alpha *and* the
    interval excludes 0 (both say the same). Both are set by :func:`judge`.
    """

    a: str
    b: str
    n: int
    mean_diff: float
    low: float
    high: float
    level: float
    p_value: float
    exact: bool
    wins: int
    losses: int
    sd: float = math.nan
    p_adjusted: float | None = None
    differs: bool | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def bootstrap_interval(
    diffs: Sequence[float], *, level: float = 0.95, resamples: int = 4000, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of ``diffs`` from ``resamples`` paired-bootstrap resamples
    (queries drawn with replacement; numpy's default generator seeded with ``seed``)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return math.nan, math.nan
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], method="inverted_cdf")
    return float(low), float(high)


def sign_flip_p_value(diffs: Sequence[float], *, resamples: int = 20000, seed: int = 0) -> tuple[float, bool]:
    """(two-sided p-value, exact) of the null "the mean difference is 0": the share of sign patterns
    whose |mean| is at least the observed one. Exact (all 2**n patterns) for n <= :data:`EXACT_MAX_N`;
    else ``resamples`` random patterns, the observed one counted in (p never 0)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return math.nan, True
    observed = abs(d.mean()) - 1e-12 * max(1.0, float(np.abs(d).max()))  # ties count as "at least"
    if d.size <= EXACT_MAX_N:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))  # [2**n, n]
        return float(np.mean(np.abs(signs @ d) / d.size >= observed)), True
    rng = np.random.default_rng(seed)
    signs = rng.choice((1.0, -1.0), size=(resamples, d.size))
    hits = int(np.sum(np.abs(signs @ d) / d.size >= observed))
    return (hits + 1) / (resamples + 1), False


def compare(
    a: str,
    b: str,
    values_a: Sequence[float],
    values_b: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> PairedComparison:
    """Paired comparison of two set-ups from their per-query values (same queries, same order)."""
    if len(values_a) != len(values_b):
        raise ValueError(f"paired values differ in length: {len(values_a)} and {len(values_b)}")
    d = np.asarray(values_a, dtype=np.float64) - np.asarray(values_b, dtype=np.float64)
    low, high = bootstrap_interval(d, level=level, resamples=resamples, seed=seed)
    p, exact = sign_flip_p_value(d, seed=seed)
    return PairedComparison(
        a=a,
        b=b,
        n=int(d.size),
        mean_diff=float(d.mean()) if d.size else math.nan,
        low=low,
        high=high,
        level=level,
        p_value=p,
        exact=exact,
        wins=int(np.sum(d > 0)),
        losses=int(np.sum(d < 0)),
        sd=float(d.std(ddof=1)) if d.size > 1 else math.nan,
    )


def exact_sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (McNemar's exact test on the discordant pairs): p of a split at
    least as uneven as ``wins`` : ``losses`` under Binomial(wins + losses, 1/2)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


#: below this many queries the audit names no winner (the sign-flip test cannot reach p < 0.05 before 5)
MIN_QUERIES = 10


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error over all the tests given), in input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out, running = [0.0] * m, 0.0
    for step, i in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[i]))
        out[i] = running
    return out


def queries_needed(mean_diff: float, sd: float, *, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """About how many queries a paired difference of ``mean_diff`` with per-query spread ``sd`` needs to be
    found at two-sided ``alpha`` with ``power`` (normal approximation: ((z_a + z_b) * sd / mean_diff)^2),
    at least :data:`MIN_QUERIES`. None when the difference is 0 or the spread unknown."""
    from statistics import NormalDist

    if not (math.isfinite(mean_diff) and math.isfinite(sd)) or mean_diff == 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return max(MIN_QUERIES, math.ceil((z * sd / abs(mean_diff)) ** 2))


def judge(comparisons: Sequence[PairedComparison], *, alpha: float = 0.05) -> list[PairedComparison]:
    """The comparisons with Holm-adjusted p-values over all of them (``p_adjusted``) and ``differs``: the
    adjusted p is below ``alpha`` and the interval excludes 0. Fewer than :data:`MIN_QUERIES` queries:
    no pair differs."""
    from dataclasses import replace

    adjusted = holm([c.p_value for c in comparisons])
    return [
        replace(
            c,
            p_adjusted=p,
            differs=bool(c.n >= MIN_QUERIES and p < alpha and (c.low > 0 or c.high < 0)),
        )
        for c, p in zip(comparisons, adjusted)
    ]


def verdict(
    names: Sequence[str], means: dict[str, float], judged: Sequence[PairedComparison], *, alpha: float = 0.05
) -> dict:
    """What the statistics support, as plain data and one ``headline`` sentence.

    ``top``: the set-ups no other one beats (a tie group when more than one); ``best``: the one set-up
    that beats every other, else None; ``beats``: (winner, loser) pairs that differ; ``needed``: for the
    pair with the largest observed difference among those that do not differ, about how many queries
    that difference would need (:func:`queries_needed`, at alpha / the number of pairs)."""
    order = sorted(names, key=lambda s: -means[s])
    beats = []
    for c in judged:
        if c.differs:
            beats.append((c.a, c.b) if c.mean_diff > 0 else (c.b, c.a))
    beaten = {loser for _, loser in beats}
    top = [s for s in order if s not in beaten]
    best = top[0] if len(top) == 1 and sum(w == top[0] for w, _ in beats) == len(names) - 1 else None
    open_pairs = [c for c in judged if not c.differs and math.isfinite(c.mean_diff) and c.mean_diff != 0]
    largest = max(open_pairs, key=lambda c: abs(c.mean_diff) / c.sd if c.sd and c.sd > 0 else 0.0, default=None)
    needed = None
    if largest is not None:
        needed = {
            "a": largest.a,
            "b": largest.b,
            "mean_diff": largest.mean_diff,
            "n": largest.n,
            "queries": queries_needed(largest.mean_diff, largest.sd, alpha=alpha / max(1, len(judged))),
        }
    n = min((c.n for c in judged), default=0)
    return {
        "top": top,
        "best": best,
        "beats": beats,
        "needed": needed,
        "alpha": alpha,
        "correction": f"Holm over {len(judged)} pairs",
        "headline": _headline(names, top, best, beats, judged, needed, n),
    }


def _headline(names, top, best, beats, judged, needed, n) -> str:
    if len(names) < 2:
        return "One set-up: nothing to compare it with."
    more = ""
    if needed and needed["queries"]:
        more = (
            f" A difference the size of {needed['a']} against {needed['b']} ({needed['mean_diff']:+.3g}) "
            f"would need about {needed['queries']} queries."
        )
    if n < MIN_QUERIES:
        return f"Too few queries to tell set-ups apart ({n}; at least {MIN_QUERIES})." + more
    if not beats:
        return f"No set-up differs from another on these {n} queries (Holm-corrected)." + more
    by_pair = {frozenset((c.a, c.b)): c for c in judged}
    if best:
        worst = max((by_pair[frozenset((best, s))] for s in names if s != best), key=lambda c: c.p_adjusted or 0.0)
        return f"{best} beats every other set-up (Holm-corrected p ≤ {worst.p_adjusted:.2g}, {n} queries)."
    lead = " and ".join(top) + (" tie" if len(top) > 1 else " leads")
    parts = []
    for w, loser in beats:
        if w in top:
            c = by_pair[frozenset((w, loser))]
            d, lo, hi = (c.mean_diff, c.low, c.high) if c.a == w else (-c.mean_diff, -c.high, -c.low)
            wins = c.wins if c.a == w else c.losses
            parts.append(
                f"{w} beats {loser}: {d:+.3g} [{lo:+.3g}, {hi:+.3g}], {wins} of {c.n} queries, p = {c.p_adjusted:.2g}"
            )
    return f"{lead}; " + "; ".join(parts) + " (Holm-corrected)."
