"""What the metrics return, as plain dataclasses: no tensor code, so the service's client and the wire
encoding (:mod:`grogu.rerank.remote.wire`) import them without torch. Each metric's module re-exports its
own result (``grogu.metrics.acu.ACUResult`` is this module's class)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class ACUResult:
    acu: float
    delta_p: dict[str, float]
    p_with: dict[str, float]
    p_without: dict[str, float]
    raised: str


@dataclass(kw_only=True)
class SePerResult:
    """ΔSePer of one context; ``p_*`` are beliefs P(a*) in [0, 1] averaged over the references."""

    delta_soft: float
    delta_hard: float
    p_soft_with: float
    p_soft_without: float
    p_hard_with: float
    p_hard_without: float
    samples_with: list[str]
    samples_without: list[str]


@dataclass(kw_only=True)
class ForwardData:
    """What a forward-only attribution read. ``masks[j][i]``: document i was in the j-th scored context
    (leave_one_out_logprob: row 0 is the full context, row i + 1 drops document i); ``logprobs[j]`` =
    log P(target | context j) in nats; ``targets[j]``: the regression target of contextcite (the
    logit-probability), else equal to ``logprobs``; ``target_token_ids``: the answer's tokens plus
    the end-of-turn token when it has one; ``intercept``: the LASSO's bias (contextcite), else None."""

    masks: list[list[bool]]
    logprobs: list[float]
    targets: list[float]
    target_token_ids: list[int]
    intercept: float | None = None


@dataclass(kw_only=True)
class Ablations:
    """Raw data of the ablation estimate: masks[j][i] is True when document i was kept in ablation j;
    similarities[j] = cos(F(G(mask_j)), F(G(1..k))); intercept is the surrogate's w_0."""

    masks: list[list[bool]]
    similarities: list[float]
    answers: list[str]
    intercept: float


@dataclass(kw_only=True)
class InfluenceResult:
    """Per-document Influence Scores (input order) and the answers they come from.

    ``method`` is "exact" (the 2k + 1 formula; leave-one-out and single-document answers filled),
    "ablation" (LASSO estimate; those two lists empty, ``ablations`` filled when asked for), or a
    forward-only method, "leave_one_out_logprob" (scores in nats) or "contextcite" (LASSO weights on
    the logit-probability), with ``forward`` holding the masks and log-probabilities read and
    ``embedder`` None."""

    scores: list[float]
    answer: str
    leave_one_out_answers: list[str]
    single_answers: list[str]
    model: str
    embedder: str | None
    method: str = "exact"
    ablations: Ablations | None = None
    forward: ForwardData | None = None
