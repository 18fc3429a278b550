"""Scores on a bounded scale: GROGU's utility as a number in [0, 1], for thresholds and for tools that
expect a reranker's score to be a probability-like value.

A utility is minus a confidence gamma (:mod:`grogu.metrics`), in nats for the entropy variants, a
perplexity for the PPL ones, a change of entropy for the ``*_change`` ones: unbounded, and its useful
range depends on the model. :func:`probability` maps it to [0, 1] per metric family, strictly
increasing in the utility, so rankings and every mode's choice are unchanged:

- entropy variants (``key_entropy``, ``entropy``, ``key_entropy_adaptive``, ``copy_aware_key_entropy``):
  ``exp(-gamma)``, the geometric mean over the (key) answer tokens of ``exp(-H_t)``. 1 when the LLM is
  certain of every key token of its grounded answer; 1/k when it hesitates evenly among k tokens.
- PPL variants (``ppl``, ``key_ppl``): ``1 / gamma``, the geometric-mean probability the LLM gives
  the tokens of its own grounded answer.
- change variants (``entropy_change``, ``adaptive_entropy_change``, ``copy_aware_entropy_change``):
  the logistic ``1 / (1 + exp(gamma))`` of the entropy change: 0.5 when the document leaves the LLM as
  sure as without it, above 0.5 when it makes the LLM surer, below when it confuses it.

It is a confidence, not a calibrated probability that the answer is right. A threshold on this scale
is a number in [0, 1] (:func:`utility_threshold` turns it into the utility threshold the scorer takes).
"""

from __future__ import annotations

import math
import sys
from typing import Any

from ..core.checks import check_choice, check_probability
from .defaults import metric_name

#: ``score_scale`` values of the integrations: grogu's utility as is, or :func:`probability`
SCORE_SCALES = ("utility", "probability")

_ROUNDING = 1e-4  # how far past its bound (0 nats, perplexity 1) a float32 statistic may land
_ENTROPY = frozenset({"key_entropy", "entropy", "key_entropy_adaptive", "copy_aware_key_entropy"})
_PPL = frozenset({"ppl", "key_ppl"})
_CHANGE = frozenset({"entropy_change", "adaptive_entropy_change", "copy_aware_entropy_change"})


def check_score_scale(value: Any) -> str:
    """'utility' or 'probability'."""
    return check_choice("score_scale", value, SCORE_SCALES)


def _family(metric: str) -> str:
    metric = metric_name(metric)
    for family, names in (("entropy", _ENTROPY), ("ppl", _PPL), ("change", _CHANGE)):
        if metric in names:
            return family
    raise ValueError(f"metric {metric!r} has no bounded scale yet (grogu.metrics.scales)")


def probability(metric: str, utility: float) -> float:
    """``utility`` of ``metric`` on the bounded scale (see the module docstring): a float in [0, 1],
    strictly increasing in the utility."""
    if isinstance(utility, bool) or not isinstance(utility, (int, float)) or math.isnan(utility):
        raise ValueError(f"utility must be a number, got {utility!r}")
    gamma = -float(utility)
    family = _family(metric)
    # entropies and log-likelihoods computed in float32 can miss their bound by a rounding error
    if family == "entropy":
        if gamma < -_ROUNDING:
            raise ValueError(f"a {metric} utility is minus an entropy, so at most 0; got {utility!r}")
        return math.exp(-max(gamma, 0.0))
    if family == "ppl":
        if gamma < 1.0 - _ROUNDING:
            raise ValueError(f"a {metric} utility is minus a perplexity, so at most -1; got {utility!r}")
        return 1.0 / max(gamma, 1.0)
    if gamma >= 0:  # logistic, written so that neither branch overflows
        z = math.exp(-gamma)
        return z / (1.0 + z)
    return 1.0 / (1.0 + math.exp(gamma))


def utility_threshold(metric: str, threshold: float | None) -> float | None:
    """The utility threshold of ``metric`` that keeps exactly the documents whose :func:`probability`
    is >= ``threshold`` (a number in [0, 1]; None: no threshold). 0 keeps every document (None)."""
    if threshold is None:
        return None
    p = check_probability("threshold (score_scale='probability')", threshold)
    if p == 0.0:
        return None
    family = _family(metric)
    if family == "entropy":
        u = math.log(p)
    elif family == "ppl":
        u = -1.0 / p
    elif p == 1.0:  # the logistic reaches 1 only at an infinite entropy drop: nothing passes
        return sys.float_info.max
    else:
        u = math.log(p / (1.0 - p))
    # the inverse computed in floating point can land one rounding step above the utility whose
    # probability is exactly p; a relative slack far below any real difference keeps that document
    return u - 1e-12 * max(1.0, abs(u))


__all__ = ["SCORE_SCALES", "check_score_scale", "probability", "utility_threshold"]
