"""Forward-only attribution of a given answer to the documents of its context: no generation.

The answer y (the pipeline's answer, or the greedy full-context answer generated once when none is
given) is teacher-forced under ablated contexts; only its log-probability log P(y | context) in nats
is read. The target sequence is the answer's tokens followed by the end-of-turn token (a generated
answer that hit the token limit has none), as ContextCite scores its response. A context with no
document left is the ungrounded prompt (the query alone), as in the exact Influence Score.

- ``leave_one_out_logprob``: score_i = log P(y | all k documents) - log P(y | all but document i),
  in nats; k + 1 forward passes. Positive: the document made the answer more likely.
- ``contextcite``: ContextCite (Cohen-Wang et al., NeurIPS 2024) with documents as the sources, as
  its reference implementation (PyPI ``context-cite`` 0.0.4) computes it: m ablation masks (mask j
  drawn by ``numpy.random.RandomState(seed + j).choice([False, True], size=k, p=[1/2, 1/2])``, so
  seed 0 gives exactly ``ContextCiter``'s masks); target t_j = the logit of the whole response's
  probability, log P - log(1 - P) with P = P(y | mask_j); a LASSO (alpha 0.01, scikit-learn, masks
  standardised, target divided by the number of answer tokens) fitted on (masks, targets); the
  weights mapped back to mask units and multiplied by the number of answer tokens. w_i: how much
  keeping document i raises the answer's logit-probability. m forward passes, default 64.

All contexts of all queries go to the engine in one ``token_stats`` call, so prompts that share a
prefix (the chat header; documents 1..i-1 of the i-th leave-one-out context; the documents before a
mask's first dropped one) encode it once, and logits are taken only at the answer's positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..core.checks import check_masks, check_positive_float, check_positive_int
from ..core.prompts import Document
from .defaults import FORWARD_METHODS  # noqa: F401 - this module's methods, named in the defaults
from .results import ForwardData  # noqa: F401 - what a forward-only attribution read, defined without tensor code

#: ContextCite's defaults (``ContextCiter(num_ablations=64, ablation_keep_prob=0.5)``, ``LassoRegression(0.01)``).
CONTEXTCITE_ABLATIONS = 64
CONTEXTCITE_KEEP_PROB = 0.5
CONTEXTCITE_LASSO_ALPHA = 0.01


# ---------------------------------------------------------------------------------------- pure parts
def contextcite_masks(
    k: int, m: int = CONTEXTCITE_ABLATIONS, seed: int = 0, keep_prob: float = CONTEXTCITE_KEEP_PROB
) -> np.ndarray:
    """[m, k] bool masks drawn as ContextCite draws them: row j from ``RandomState(seed + j)``, each
    document kept with probability ``keep_prob``."""
    k, m = int(k), check_positive_int("n_ablations", m)
    if not 0 <= seed <= 2**32 - 1 - m:
        raise ValueError(f"seed must be in [0, 2**32 - 1 - m] for ContextCite's masks, got {seed}")
    out = np.zeros((m, k), dtype=bool)
    for j in range(m):
        out[j] = np.random.RandomState(seed + j).choice([False, True], size=k, p=[1 - keep_prob, keep_prob])
    return out


def logit_probability(logprob: float) -> float:
    """log P - log(1 - P) for log P in nats (<= 0): ContextCite's target for a whole response. P = 1
    (log P = 0 in float64) would be +inf: 1 - P is floored at the smallest positive float64."""
    logprob = float(logprob)
    if math.isnan(logprob) or logprob > 0:
        raise ValueError(f"a log-probability must be a number <= 0, got {logprob}")
    return logprob - math.log(max(-math.expm1(logprob), np.finfo(np.float64).tiny))


def fit_contextcite(
    masks: Any, targets: Any, num_output_tokens: int, alpha: float = CONTEXTCITE_LASSO_ALPHA
) -> tuple[list[float], float]:
    """ContextCite's LASSO surrogate (their ``LassoRegression.fit``): standardise the [m, k] masks,
    fit ``Lasso(alpha, random_state=0)`` to targets / num_output_tokens, map the weights back to mask
    units and multiply by num_output_tokens. Returns (weights w_1..w_k, bias)."""
    from sklearn.linear_model import Lasso
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(targets, dtype=np.float64)
    x = check_masks(masks, _columns(masks)).astype(np.float32)
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise ValueError(f"targets must be [m] with m = {x.shape[0]} (one per mask), got shape {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("targets must be finite numbers (no NaN or infinity)")
    n = check_positive_int("num_output_tokens", num_output_tokens)
    alpha = check_positive_float("alpha", alpha)
    if x.shape[1] == 0:
        return [], float(y.mean())
    scaler = StandardScaler()
    lasso = Lasso(alpha=alpha, random_state=0, fit_intercept=True)
    lasso.fit(scaler.fit_transform(x), y / n)
    weight = lasso.coef_ / scaler.scale_
    bias = lasso.intercept_ - (scaler.mean_ / scaler.scale_) @ lasso.coef_
    return (weight * n).tolist(), float(bias * n)


def _columns(masks: Any) -> int:
    """The number of columns of a 2-D mask array (0 otherwise: check_masks then names the shape)."""
    try:
        shape = np.shape(masks)
    except ValueError:  # ragged
        return 0
    return shape[1] if len(shape) == 2 else 0


def leave_one_out_drops(full: float, leave_one_out: Sequence[float]) -> list[float]:
    """score_i = log P(y | all) - log P(y | all but i), nats."""
    return [float(full) - float(x) for x in leave_one_out]


# ---------------------------------------------------------------------------------------- on the engine
@dataclass
class AttributionRequest:
    """One query to attribute: the answer as target token ids; masks for contextcite (None: drawn)."""

    query: str
    docs: list[Document]
    target: list[int]
    masks: np.ndarray | None = None


def context_masks(method: str, k: int, given: np.ndarray | None, n_ablations: int, seed: int) -> np.ndarray:
    """The [n, k] masks of the contexts a method scores (leave_one_out_logprob: full, then each drop)."""
    if method == "leave_one_out_logprob":
        return np.vstack([np.ones((1, k), dtype=bool), ~np.eye(k, dtype=bool)])
    return given if given is not None else contextcite_masks(k, n_ablations, seed)


def attribute(
    engine: Any,
    prompt: Callable[[str, list[Document]], list[int]],
    requests: Sequence[AttributionRequest],
    method: str,
    *,
    n_ablations: int,
    seed: int,
    alpha: float,
) -> list[tuple[list[float], ForwardData]]:
    """Scores and data of many requests, every context of every request teacher-forced in one engine call."""
    prompts, targets, plans = [], [], []
    for req in requests:
        masks = context_masks(method, len(req.docs), req.masks, n_ablations, seed)
        for row in masks:
            p = prompt(req.query, [d for d, keep in zip(req.docs, row) if keep])
            if len(p) + len(req.target) > engine.max_context_tokens:
                raise ValueError(
                    f"a prompt of {len(p)} tokens plus the {len(req.target)}-token answer does not "
                    f"fit the {engine.max_context_tokens}-token context window: give a shorter answer"
                )
            prompts.append(p)
            targets.append(req.target)
        plans.append(masks)
    stats = iter(engine.token_stats(prompts, targets)) if prompts else iter(())
    out = []
    for req, masks in zip(requests, plans):
        logps = [float(next(stats).logprob.double().sum()) for _ in range(len(masks))]
        if method == "leave_one_out_logprob":
            scores, ys, bias = leave_one_out_drops(logps[0], logps[1:]), logps, None
        else:
            ys = [logit_probability(lp) for lp in logps]
            scores, bias = fit_contextcite(masks, ys, len(req.target), alpha)
        out.append(
            (
                scores,
                ForwardData(
                    masks=masks.tolist(), logprobs=logps, targets=ys, target_token_ids=list(req.target), intercept=bias
                ),
            )
        )
    return out
