"""GROGU confidence metrics: pure functions on per-token statistics (tensors in, numbers out).

Inputs for one grounded answer y_g of n tokens (end-of-turn excluded):
- ``h_g``: entropy of each token's distribution under the grounded prompt (q, D), nats;
- ``logp_g``: each token's log-probability under the grounded prompt (NLL = -logp_g);
- ``h_u``: entropy of the same tokens teacher-forced under the ungrounded prompt (q only), nats.

Key tokens are those with |h_g - h_u| > alpha; if none, the ceil(K * n) tokens with the highest h_g
(ties: the earlier token first). The confidence gamma of each variant (lower = more confident):
Entropy = mean h_g; KeyEntropy = mean h_g over key tokens; PPL = exp(mean NLL_g);
KeyPPL = exp(mean NLL_g over key tokens). Utility = -gamma, so higher is more useful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

ALPHA = 0.05
TOP_K_FRAC = 0.1
DEFAULT_METRIC = "key_entropy"


def _vec(x) -> torch.Tensor:
    t = torch.as_tensor(x, dtype=torch.float64).flatten()
    return t


def top_k_count(n: int, top_k_frac: float) -> int:
    """ceil(K * n), at least 1 for n > 0 (rounded first so 0.1 * 30 gives 3, not 4)."""
    if not 0 < top_k_frac <= 1:
        raise ValueError(f"top_k_frac must be in (0, 1], got {top_k_frac}")
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
    mask = (g - u).abs() > alpha
    if len(g) and not bool(mask.any()):
        mask = top_k_mask(g, top_k_frac)
    return mask


def ungrounded_key_mask(h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC) -> torch.Tensor:
    """Key tokens of an ungrounded answer y_u (paper App. C): h_u > alpha, else the top-K% by h_u."""
    u = _vec(h_u)
    mask = u > alpha
    if len(u) and not bool(mask.any()):
        mask = top_k_mask(u, top_k_frac)
    return mask


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


MetricFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], MetricValue]


def _entropy_metric(h_g, logp_g, h_u, alpha, k):
    return MetricValue("entropy", entropy(h_g), len(h_g), len(h_g))


def _key_entropy_metric(h_g, logp_g, h_u, alpha, k):
    mask = key_token_mask(h_g, h_u, alpha, k)
    return MetricValue("key_entropy", key_entropy(h_g, mask), len(h_g), int(mask.sum()))


def _ppl_metric(h_g, logp_g, h_u, alpha, k):
    return MetricValue("ppl", perplexity(logp_g), len(h_g), len(h_g))


def _key_ppl_metric(h_g, logp_g, h_u, alpha, k):
    mask = key_token_mask(h_g, h_u, alpha, k)
    return MetricValue("key_ppl", key_perplexity(logp_g, mask), len(h_g), int(mask.sum()))


METRICS: dict[str, MetricFn] = {
    "key_entropy": _key_entropy_metric,
    "entropy": _entropy_metric,
    "ppl": _ppl_metric,
    "key_ppl": _key_ppl_metric,
}


def metric_name(name: str) -> str:
    """Canonical metric name: 'KeyEntropy', 'key-entropy', 'key_entropy' all give 'key_entropy'."""
    if not isinstance(name, str):
        raise TypeError(f"metric must be a string, got {type(name).__name__}")
    squashed = name.lower().replace("_", "").replace("-", "")
    for canonical in METRICS:
        if canonical.replace("_", "") == squashed:
            return canonical
    raise ValueError(f"unknown metric {name!r}; choose one of {sorted(METRICS)}")


def compute(metric: str, h_g, logp_g, h_u, alpha: float = ALPHA, top_k_frac: float = TOP_K_FRAC) -> MetricValue:
    """Confidence of ``metric`` for one answer from its token statistics."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    return METRICS[metric_name(metric)](_vec(h_g), _vec(logp_g), _vec(h_u), alpha, top_k_frac)
