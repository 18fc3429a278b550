"""GROGU confidence metrics: pure functions on per-token statistics (tensors in, numbers out).

Inputs for one grounded answer y_g of n tokens (end-of-turn excluded):
- ``h_g``: entropy of each token's distribution under the grounded prompt (q, D), nats;
- ``logp_g``: each token's log-probability under the grounded prompt (NLL = -logp_g);
- ``h_u``: entropy of the same tokens teacher-forced under the ungrounded prompt (q only), nats.

Key tokens are those with |h_g - h_u| > alpha; if none, the ceil(K * n) tokens with the highest h_g
(ties: the earlier token first). The confidence gamma of each variant (lower = more confident):
Entropy = mean h_g; KeyEntropy = mean h_g over key tokens; PPL = exp(mean NLL_g);
KeyPPL = exp(mean NLL_g over key tokens). Utility = -gamma, so higher is more useful. These are the
paper's four variants (Hua et al.); KeyEntropy with alpha = 0.05, K = 0.1 is the paper's default.

Small-model variants (issue #8; measured in docs/results.md, "Small models: utility variants").
Small instruction models (~100M parameters) answer with a long sentence copied from whatever passage
they get; copying is confident whether or not the passage helps, and most tokens pass alpha = 0.05,
so KeyEntropy ends up measuring "how copyable is this passage". The variants keep the paper's idea
(confidence with against without the document, on the tokens that matter) with two extra inputs:
- ``logp_u``: each token's log-probability under the ungrounded prompt;
- ``copied``: tokens inside an answer n-gram found verbatim in the document (:func:`copied_mask`).
Variants (confidence gamma; utility = -gamma):
- ``key_entropy_adaptive``: mean h_g over *adaptive* key tokens: |h_g - h_u| at or above the
  ``ADAPTIVE_KEY_QUANTILE`` quantile of this answer's |h_g - h_u| (nats);
- ``entropy_change``: mean (h_g - h_u) over the paper's key tokens (nats; negative when the document
  makes the model surer): the *change* in confidence, not the grounded confidence alone;
- ``adaptive_entropy_change``: mean (h_g - h_u) over adaptive key tokens (``CHANGE_KEY_QUANTILE``);
- ``copy_aware_key_entropy``: ``key_entropy_adaptive`` with each copied token weighted by its
  probability without the document, p_u = exp(logp_u) (copying counts only as far as the question
  alone supports it); copied = inside a ``COPY_NGRAM``-gram found in the document;
- ``copy_aware_entropy_change``: mean (h_g - h_u) over the ``ADAPTIVE_KEY_QUANTILE`` key tokens with
  the same copy weights.
The quantiles and the n-gram size were tuned on a tuning split of SQuAD dev (a third of its articles)
with SmolLM2-135M-Instruct, both answer styles; the report is on the other articles.
The paper's App. C difference gamma(y_g | q, D) - gamma(y_u | q) subtracts a term common to every
context of one query, so it ranks contexts exactly as KeyEntropy does (see ``UtilityScorer.ungrounded``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from ..core.checks import check_alpha, check_float, check_fraction, check_positive_int, check_probability
from .defaults import (  # noqa: F401 - the names and defaults, re-exported here
    ALPHA,
    COPY_NGRAM,
    DEFAULT_METRIC,
    GROUNDED_DEFAULT_METRIC,
    GROUNDED_METRICS,
    METRIC_NAMES,
    TOP_K_FRAC,
    default_metric,
    metric_name,
)

# adaptive key tokens: |dH| at or above this quantile of the answer's |dH| (tuned on the tuning split, issue #8)
ADAPTIVE_KEY_QUANTILE = 0.9  # key_entropy_adaptive, copy_aware_key_entropy, copy_aware_entropy_change
CHANGE_KEY_QUANTILE = 0.5  # adaptive_entropy_change


def _vec(x) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float64).flatten()
    return t


def top_k_count(n: int, top_k_frac: float) -> int:
    """ceil(K * n), at least 1 for n > 0 (rounded first so 0.1 * 30 gives 3, not 4)."""
    top_k_frac = check_fraction("top_k_frac", top_k_frac)
    return max(1, math.ceil(round(top_k_frac * n, 9))) if n else 0


def top_k_mask(values, top_k_frac: float = TOP_K_FRAC) -> torch.Tensor:
    """Mask of the ceil(K * n) largest values; among equal values the earlier positions win."""
    v = _vec(values)
    mask = torch.zeros(len(v), dtype=torch.bool)
    k = top_k_count(len(v), top_k_frac)
    if k:
        mask[torch.argsort(v, descending=True, stable=True)[:k]] = True
    return mask


def key_token_mask(h_g, h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC) -> torch.Tensor:
    """Key tokens of a grounded answer: |h_g - h_u| > alpha (strict), else the top-K% by h_g."""
    g, u = _vec(h_g), _vec(h_u)
    if g.shape != u.shape:
        raise ValueError(f"h_g has {len(g)} tokens but h_u has {len(u)}")
    mask = (g - u).abs() > check_alpha(alpha)
    if len(g) and not bool(mask.any()):
        mask = top_k_mask(g, top_k_frac)
    return mask


def ungrounded_key_mask(h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC) -> torch.Tensor:
    """Key tokens of an ungrounded answer y_u (paper App. C): h_u > alpha, else the top-K% by h_u."""
    u = _vec(h_u)
    mask = u > check_alpha(alpha)
    if len(u) and not bool(mask.any()):
        mask = top_k_mask(u, top_k_frac)
    return mask


def copied_mask(answer_ids, source_ids, exclude_ids=(), n: int = 3) -> torch.Tensor:
    """Which answer tokens were copied verbatim from the document.

    A token is *copied* when it lies inside some n-gram (n consecutive answer tokens) that also occurs
    as n consecutive tokens of ``source_ids`` (the grounded prompt) but not of ``exclude_ids`` (the
    ungrounded prompt: n-grams that the question and the instruction already hold are not copied from
    the document). Answers shorter than n have no copied token. Returns a bool mask, one per answer token."""
    n = check_positive_int("n", n)
    a = [int(t) for t in answer_ids]
    mask = torch.zeros(len(a), dtype=torch.bool)
    if len(a) < n:
        return mask

    def grams(ids) -> set[tuple[int, ...]]:
        ids = [int(t) for t in ids]
        return {tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)}

    found = grams(source_ids) - grams(exclude_ids)
    for i in range(len(a) - n + 1):
        if tuple(a[i : i + n]) in found:
            mask[i : i + n] = True
    return mask


def quantile_key_mask(h_g, h_u, quantile: float) -> torch.Tensor:
    """Adaptive key tokens: |h_g - h_u| at or above the ``quantile`` quantile of |h_g - h_u| over this
    answer (torch.quantile, linear interpolation). Whatever the model's scale of entropies, this keeps
    about the top (1 - quantile) share of the tokens by |dH|, and at least one token."""
    g, u = _vec(h_g), _vec(h_u)
    if g.shape != u.shape:
        raise ValueError(f"h_g has {len(g)} tokens but h_u has {len(u)}")
    quantile = check_probability("quantile", quantile)
    if len(g) == 0:
        return torch.zeros(0, dtype=torch.bool)
    d = (g - u).abs()
    return d >= torch.quantile(d, quantile)


def relative_key_mask(h_g, h_u, rho: float, top_k_frac: float = TOP_K_FRAC) -> torch.Tensor:
    """Key tokens relative to the ungrounded entropy: |h_g - h_u| > rho * h_u, else the top-K% by h_g."""
    g, u = _vec(h_g), _vec(h_u)
    if g.shape != u.shape:
        raise ValueError(f"h_g has {len(g)} tokens but h_u has {len(u)}")
    mask = (g - u).abs() > check_float("rho", rho, minimum=0.0) * u
    if len(g) and not bool(mask.any()):
        mask = top_k_mask(g, top_k_frac)
    return mask


def copy_continuation_mask(copied) -> torch.Tensor:
    """Copied tokens that continue a copied span (the token before is copied too): once a model has
    started quoting the document, these tokens are predictable by copying alone."""
    c = torch.as_tensor(copied, dtype=torch.bool).flatten()
    out = torch.zeros_like(c)
    out[1:] = c[1:] & c[:-1]
    return out


def copy_support_weights(copied, logp_u) -> torch.Tensor:
    """Per-token weights: 1 for a token not copied from the document, and for a copied token its
    probability without the document, p_u = exp(logp_u) in [0, 1] (copying counts only as far as the
    question alone supports the same token)."""
    c = torch.as_tensor(copied, dtype=torch.bool).flatten()
    return torch.where(c, _vec(logp_u).exp(), torch.ones(len(c), dtype=torch.float64))


def weighted_mean(values, weights) -> float:
    """sum(w * v) / sum(w); ValueError when the weights add up to 0 (nothing to average)."""
    v, w = _vec(values), _vec(weights)
    total = float(w.sum())
    if len(v) == 0 or total <= 0:
        raise ValueError("no tokens to average: the answer is empty or every weight is 0")
    return float((w * v).sum()) / total


def _mean(x: torch.Tensor) -> float:
    if len(x) == 0:
        raise ValueError("no tokens to average: the answer is empty")
    return float(x.mean())


def entropy(h_g) -> float:
    """Entropy confidence: mean grounded token entropy (nats)."""
    return _mean(_vec(h_g))


def key_entropy(h_g, mask) -> float:
    """KeyEntropy confidence: mean grounded entropy (nats) over the key tokens."""
    return _mean(_vec(h_g)[torch.as_tensor(mask, dtype=torch.bool)])


def perplexity(logp_g) -> float:
    """PPL confidence: exp of the mean negative log-likelihood."""
    return math.exp(_mean(-_vec(logp_g)))


def key_perplexity(logp_g, mask) -> float:
    """KeyPPL confidence: exp of the mean negative log-likelihood over the key tokens."""
    return math.exp(_mean(-_vec(logp_g)[torch.as_tensor(mask, dtype=torch.bool)]))


def ungrounded_key_entropy(h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC) -> float:
    """KeyEntropy of the ungrounded answer y_u under the ungrounded prompt (paper App. C)."""
    return key_entropy(h_u, ungrounded_key_mask(h_u, alpha, top_k_frac))


def grogu_difference(grounded_confidence: float, ungrounded_confidence: float) -> float:
    """Absolute GROGU difference gamma(y_g | q, D) - gamma(y_u | q) (negative: D makes the LLM surer)."""
    return grounded_confidence - ungrounded_confidence


def entropy_change(h_g, h_u, mask=None, weights=None) -> float:
    """Confidence change gamma = mean of (h_g - h_u) in nats over the ``mask`` tokens (all if None),
    optionally weighted; negative when the document makes the model surer of its own answer."""
    d = _vec(h_g) - _vec(h_u)
    w = torch.ones(len(d), dtype=torch.float64) if weights is None else _vec(weights)
    if mask is not None:
        w = w * torch.as_tensor(mask, dtype=torch.bool).to(torch.float64)
    return weighted_mean(d, w)


@dataclass(frozen=True)
class MetricValue:
    """One metric on one answer: confidence gamma (nats for entropy variants, perplexity for PPL ones),
    utility = -gamma, and how many tokens it used."""

    metric: str
    confidence: float
    n_tokens: int
    n_key_tokens: int

    @property
    def utility(self) -> float:
        return -self.confidence


@dataclass(frozen=True)
class AnswerStats:
    """Per-token statistics of one grounded answer y_g (n tokens, end-of-turn excluded), float64.

    h_g / logp_g: entropy (nats) and log-probability of each token under the grounded prompt (q, D);
    h_u / logp_u: the same tokens teacher-forced under the ungrounded prompt (q only);
    copied: True where the token lies inside an answer n-gram found verbatim in the document
    (see :func:`copied_mask`). ``logp_u`` and ``copied`` are None when the caller did not compute them;
    the paper's four variants do not need them. ``h_u`` is None for a target that cannot teacher-force
    (only the :data:`GROUNDED_METRICS` are computed then)."""

    h_g: torch.Tensor
    logp_g: torch.Tensor
    h_u: torch.Tensor | None
    logp_u: torch.Tensor | None = None
    copied: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.h_g)


MetricFn = Callable[[AnswerStats, float, float], MetricValue]


def _entropy_metric(s, alpha, k):
    return MetricValue("entropy", entropy(s.h_g), len(s), len(s))


def _key_entropy_metric(s, alpha, k):
    mask = key_token_mask(s.h_g, s.h_u, alpha, k)
    return MetricValue("key_entropy", key_entropy(s.h_g, mask), len(s), int(mask.sum()))


def _ppl_metric(s, alpha, k):
    return MetricValue("ppl", perplexity(s.logp_g), len(s), len(s))


def _key_ppl_metric(s, alpha, k):
    mask = key_token_mask(s.h_g, s.h_u, alpha, k)
    return MetricValue("key_ppl", key_perplexity(s.logp_g, mask), len(s), int(mask.sum()))


def _needs(s: AnswerStats, metric: str, *fields: str) -> None:
    missing = [f for f in fields if getattr(s, f) is None]
    if missing:
        raise ValueError(
            f"metric {metric!r} needs {', '.join(missing)} (pass logp_u= / copied= to compute(); "
            f"UtilityScorer always does)"
        )


def _key_entropy_adaptive_metric(s, alpha, k):
    mask = quantile_key_mask(s.h_g, s.h_u, ADAPTIVE_KEY_QUANTILE)
    return MetricValue("key_entropy_adaptive", key_entropy(s.h_g, mask), len(s), int(mask.sum()))


def _entropy_change_metric(s, alpha, k):
    mask = key_token_mask(s.h_g, s.h_u, alpha, k)
    return MetricValue("entropy_change", entropy_change(s.h_g, s.h_u, mask), len(s), int(mask.sum()))


def _adaptive_entropy_change_metric(s, alpha, k):
    mask = quantile_key_mask(s.h_g, s.h_u, CHANGE_KEY_QUANTILE)
    return MetricValue("adaptive_entropy_change", entropy_change(s.h_g, s.h_u, mask), len(s), int(mask.sum()))


def _copy_aware_key_entropy_metric(s, alpha, k):
    _needs(s, "copy_aware_key_entropy", "logp_u", "copied")
    mask = quantile_key_mask(s.h_g, s.h_u, ADAPTIVE_KEY_QUANTILE)
    w = copy_support_weights(s.copied, s.logp_u) * mask
    if float(w.sum()) <= 0:  # every key token copied with p_u = 0: plain KeyEntropy
        w = mask.to(torch.float64)
    return MetricValue("copy_aware_key_entropy", weighted_mean(s.h_g, w), len(s), int(mask.sum()))


def _copy_aware_entropy_change_metric(s, alpha, k):
    _needs(s, "copy_aware_entropy_change", "logp_u", "copied")
    mask = quantile_key_mask(s.h_g, s.h_u, ADAPTIVE_KEY_QUANTILE)
    w = copy_support_weights(s.copied, s.logp_u) * mask
    if float(w.sum()) <= 0:
        w = mask.to(torch.float64)
    return MetricValue("copy_aware_entropy_change", entropy_change(s.h_g, s.h_u, weights=w), len(s), int(mask.sum()))


METRICS: dict[str, MetricFn] = {
    "key_entropy": _key_entropy_metric,
    "entropy": _entropy_metric,
    "ppl": _ppl_metric,
    "key_ppl": _key_ppl_metric,
    # small-model variants (issue #8; docs/results.md, "Small models: utility variants")
    "key_entropy_adaptive": _key_entropy_adaptive_metric,
    "entropy_change": _entropy_change_metric,
    "adaptive_entropy_change": _adaptive_entropy_change_metric,
    "copy_aware_key_entropy": _copy_aware_key_entropy_metric,
    "copy_aware_entropy_change": _copy_aware_entropy_change_metric,
}


assert tuple(METRICS) == METRIC_NAMES, "grogu.metrics.defaults.METRIC_NAMES must list METRICS in order"


def compute(
    metric: str, h_g, logp_g, h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC, *, logp_u=None, copied=None
) -> MetricValue:
    """Confidence of ``metric`` for one answer from its token statistics (see :class:`AnswerStats`).
    ``logp_u`` (ungrounded log-probabilities) and ``copied`` (copy mask) are needed only by the
    small-model variants; they raise a ValueError naming what is missing. ``h_u`` may be None for the
    :data:`GROUNDED_METRICS` only."""
    alpha, top_k_frac = check_alpha(alpha), check_fraction("top_k_frac", top_k_frac)
    canonical = metric_name(metric)
    if h_u is None and canonical not in GROUNDED_METRICS:
        raise ValueError(
            f"metric {canonical!r} needs h_u, the ungrounded entropies; without them only "
            f"{' and '.join(map(repr, GROUNDED_METRICS))} can be computed"
        )
    stats = AnswerStats(
        _vec(h_g),
        _vec(logp_g),
        None if h_u is None else _vec(h_u),
        None if logp_u is None else _vec(logp_u),
        None if copied is None else torch.as_tensor(copied, dtype=torch.bool).flatten(),
    )
    n = len(stats.h_g)
    for name, t in (("h_u", stats.h_u), ("logp_g", stats.logp_g), ("logp_u", stats.logp_u), ("copied", stats.copied)):
        if t is not None and len(t) != n:
            raise ValueError(f"h_g has {n} tokens but {name} has {len(t)}")
    return METRICS[canonical](stats, alpha, top_k_frac)
