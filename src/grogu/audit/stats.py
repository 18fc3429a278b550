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
    was enumerated). ``wins`` / ``losses``: queries where a is higher / lower than b.
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
