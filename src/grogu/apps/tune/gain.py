"""The gain of a setting over another, with its interval, and the questions that would settle it.

Every figure here is paired: the same questions under two settings, one difference per question.

- **Interval** (:func:`paired`): the mean difference with a 90 % paired-bootstrap percentile interval.
  Questions are drawn with replacement, :data:`RESAMPLES` times, by numpy's default generator seeded with
  :data:`SEED`, so a rerun gives the same interval. The 5th and 95th percentiles of the resampled means
  are the bounds (``inverted_cdf``: each bound is a resampled mean). This is
  :func:`grogu.apps.audit.stats.bootstrap_interval`'s method.
- **One-sided p** (same resamples): the share of resampled means at most 0. Tune's dense guard reads it.
- **Questions needed** (:func:`questions_needed`): the normal approximation
  ``n = ((z(1 - alpha) + z(power)) * sd / gain) ** 2``, one-sided ``alpha`` 0.1 and power 0.8. ``sd`` is
  the observed standard deviation of the per-question differences (0 or 1 per question for accuracy).
  It assumes the spread stays what it was on these questions.
- **Agreement** (:func:`agreement`): how far the dense judge and whole words agree.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from .replay import Outcomes, setting_name

#: resamples of the paired bootstrap, and its seed (fixed: the same records give the same interval)
RESAMPLES = 10_000
SEED = 0
#: the interval's level
LEVEL = 0.9
#: the one-sided level and the power of :func:`questions_needed`
ALPHA, POWER = 0.1, 0.8
#: the accuracy gains (fractions) whose sample sizes are stated
GAINS = (0.03, 0.05, 0.10)
#: how the figures are computed, as the evidence states it
METHOD = (
    f"paired differences per question; {LEVEL:.0%} paired-bootstrap percentile interval ({RESAMPLES} resamples, "
    f"seed {SEED}); questions needed: normal approximation ((z(1-alpha) + z(power)) * sd / gain)^2, one-sided "
    f"alpha {ALPHA}, power {POWER}, sd of the observed paired differences"
)


def bootstrap_means(diffs: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """The means of ``resamples`` paired-bootstrap resamples of ``diffs`` (questions drawn with replacement)."""
    d = np.asarray(diffs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    return d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)


def paired(diffs: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """The mean of the paired ``diffs``, its percentile interval at ``level``, the one-sided p (the share of
    resampled means at most 0), the standard deviation and the count. None where a figure is undefined (no
    question; the spread of one), so the settings file stays strict JSON."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return {"n": 0, "mean": None, "low": None, "high": None, "level": level, "p_one_sided": None, "sd": None}
    means = bootstrap_means(d, resamples, seed)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail], method="inverted_cdf")
    return {
        "n": int(d.size),
        "mean": float(d.mean()),
        "low": float(low),
        "high": float(high),
        "level": level,
        "p_one_sided": float(np.mean(means <= 0.0)),
        "sd": float(d.std(ddof=1)) if d.size > 1 else None,
    }


def questions_needed(sd: float | None, gain: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """About how many questions find a mean paired difference of ``gain`` (one-sided ``alpha``, ``power``)
    when the differences spread by ``sd``. None when the spread is 0 or unknown."""
    if sd is None or not (math.isfinite(sd) and sd > 0 and gain > 0):
        return None
    z = NormalDist().inv_cdf(1.0 - alpha) + NormalDist().inv_cdf(power)
    return math.ceil((z * sd / gain) ** 2)


def gain(accuracy: Sequence[float], dense: Sequence[float] | None) -> dict[str, Any]:
    """One setting against another: the accuracy differences (-1, 0 or 1 per question) and the dense
    judge's (nats per token), each with :func:`paired`; the questions needed for each of :data:`GAINS`."""
    acc = paired(accuracy)
    return {
        "accuracy": acc,
        "dense": paired(dense) if dense is not None else None,
        "questions_needed": {f"{round(100 * g)}": questions_needed(acc["sd"], g) for g in GAINS},
    }


def _pts(x: float) -> str:
    return f"{100 * x:+.0f}"


def gain_line(subject: str, g: dict[str, Any], where: str) -> str:
    """The gain in one plain sentence, e.g. "the shipped default: +4 pts of accuracy over the retriever's
    order (90 %: -1 to +9) on 50 held-out questions; ..."."""
    a, d = g["accuracy"], g["dense"]
    if a["n"] == 0:
        return f"{subject}: no question to judge"
    line = (
        f"{subject}: {_pts(a['mean'])} pts of accuracy over the retriever's order "
        f"({a['level']:.0%}: {_pts(a['low'])} to {_pts(a['high'])}) on {a['n']} {where}"
    )
    if d is not None:
        line += f"; dense judge {d['mean']:+.3f} nats/token ({d['level']:.0%}: {d['low']:+.3f} to {d['high']:+.3f})"
    else:
        line += "; dense judge: not in these records"
    need = g["questions_needed"]
    if all(v is None for v in need.values()):
        line += "; no question's answer differs, so the spread (and the questions needed) is unknown"
    else:
        sizes = " / ".join("?" if v is None else str(v) for v in need.values())
        line += f"; to detect a gain of {' / '.join(need)} pts: {sizes} questions"
    return line + "."


def held_out_gains(
    out: Outcomes, rows: Sequence[int], tuned_at: dict[int, int], adopted: bool, decision: str, shipped: int | None
) -> dict[str, Any]:
    """The tuned setting (``tuned_at[r]``: the setting that answers question r) and the shipped default,
    each against keep (setting 0) on ``rows``, with :func:`gain`; and the line that states it. Where a
    challenger was adopted, ``tuned_at`` holds each question's held-out pick. Else it holds the incumbent,
    fixed without labels, so every question is held out for it (and for the shipped default)."""

    def against_keep(at: dict[int, int]) -> dict[str, Any]:
        return gain(
            [int(out.correct[at[r]][r]) - int(out.correct[0][r]) for r in rows],
            [out.loglik[at[r]][r] - out.loglik[0][r] for r in rows] if out.loglik is not None else None,
        )

    chosen = next(iter(tuned_at.values()), 0)
    gains: dict[str, Any] = {"method": METHOD, "tuned": against_keep(tuned_at)}
    gains["tuned"]["setting"] = "cross-validated picks" if adopted else setting_name(out.settings[chosen])
    if shipped is not None:
        gains["shipped"] = against_keep({r: shipped for r in rows})
        gains["shipped"]["setting"] = setting_name(out.settings[shipped])
    fixed = "questions (none fitted on them)"
    if decision == "keep" and shipped is not None:
        subject, g, where = "tune keeps the retriever's order; the shipped default", gains["shipped"], fixed
    elif adopted:
        subject, g, where = "the tuned setting (cross-validated)", gains["tuned"], "held-out questions"
    else:
        subject = "the shipped default" if decision == "default" else "the chosen setting"
        g, where = gains["tuned"], fixed
    gains["line"] = gain_line(subject, g, where)
    return gains


def agreement(out: Outcomes, rows: Sequence[int], held: dict[int, int], base: int) -> dict[str, Any] | None:
    """How far the judges agree (None without the dense judge). ``candidates``: over each question's
    candidate pairs that whole words tell apart (one right, one wrong), the share where the dense judge
    scores the right one higher. ``held_out``: over the questions where the held-out pick and the incumbent
    differ in words, how often the dense difference has the same sign."""
    if out.candidate_loglik is None or out.loglik is None:
        return None
    agree = pairs = 0
    for r in rows:
        right, ll = out.candidate_correct[r], out.candidate_loglik[r]
        for i in range(len(ll)):
            for j in range(i + 1, len(ll)):
                if right[i] != right[j]:
                    pairs += 1
                    agree += ll[i] != ll[j] and (ll[i] > ll[j]) == right[i]
    h_agree = h_pairs = 0
    for r in rows:
        s = held[r]
        word = int(out.correct[s][r]) - int(out.correct[base][r])
        if word:
            h_pairs += 1
            h_agree += (out.loglik[s][r] - out.loglik[base][r]) * word > 0
    return {
        "candidates": {"pairs": pairs, "agree": agree, "share": agree / pairs if pairs else None},
        "held_out": {"pairs": h_pairs, "agree": h_agree, "share": h_agree / h_pairs if h_pairs else None},
    }


__all__ = [
    "paired",
    "bootstrap_means",
    "questions_needed",
    "gain",
    "gain_line",
    "held_out_gains",
    "agreement",
    "METHOD",
    "GAINS",
    "LEVEL",
]
