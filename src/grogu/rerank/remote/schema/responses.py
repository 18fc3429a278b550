"""The answers of the scoring service (see :mod:`grogu.rerank.remote.schema`)."""

from __future__ import annotations

from typing import Any, Literal, Optional, get_type_hints

from pydantic import BaseModel, ConfigDict, create_model

from ....core.results import GateVerdict, ScoreResult, UngroundedScore
from ....metrics.results import ACUResult, InfluenceResult, SePerResult
from .. import wire


class _Response(BaseModel):
    # a field a newer service adds is ignored: an older client still reads the answer
    model_config = ConfigDict(extra="ignore")


#: :class:`grogu.core.results.TokenDetail` on the wire: the answer's tokens and, per token, the numbers behind the
#: score, each tensor a list (its fields from :data:`.wire.DETAIL_DTYPES`)
TokenDetailsOut = create_model(
    "TokenDetailsOut",
    __base__=_Response,
    tokens=(list[str], ...),
    token_ids=(list[int], ...),
    **{
        name: (Optional[list[bool]] if dtype == "bool" else Optional[list[float]], None)
        for name, dtype in wire.DETAIL_DTYPES.items()
    },
)

#: one scored context: the fields of :class:`grogu.core.results.ScoreResult` (taken from it), ``details`` when asked for
ScoreOut = create_model(
    "ScoreOut",
    __base__=_Response,
    **{name: (hint, ...) for name, hint in get_type_hints(ScoreResult).items() if name in wire.SCORE_FIELDS},
    details=(Optional[TokenDetailsOut], None),
)


class ScoresResponse(_Response):
    """``/score`` (one result per document) and ``/score_contexts`` (one per context), in input order."""

    results: list[ScoreOut]


class ScoresBatchResponse(_Response):
    """``/score_batch`` and ``/score_contexts_batch``: one list of results per item."""

    results: list[list[ScoreOut]]


class LayoutResponse(_Response):
    """``/best_layout``: the index of the most useful layout, and each layout's score."""

    best: int
    scores: list[ScoreOut]


class RankedOut(ScoreOut):
    """A kept document: its input position, its fields, and its fused score (the fusion mode)."""

    index: int
    rank_score: Optional[float] = None


class RerankResponse(_Response):
    """``/rerank``: the kept documents in order; the context mode's chosen context once, and its gate."""

    results: list[RankedOut]
    context: Optional[ScoreOut] = None
    gate: Optional[GateVerdict] = None


class InfluenceResponse(_Response):
    """``/influence``: one :class:`grogu.metrics.influence.InfluenceResult` per item."""

    results: list[InfluenceResult]


class SePerResponse(_Response):
    """``/seper``: one :class:`grogu.metrics.seper.SePerResult` per document (one for the context)."""

    results: list[SePerResult]


class ACUResponse(_Response):
    """``/acu``: one :class:`grogu.metrics.acu.ACUResult` per item."""

    results: list[ACUResult]


#: ``/ungrounded``'s answer is :class:`grogu.core.results.UngroundedScore`'s fields
UngroundedResponse = UngroundedScore


class HealthResponse(_Response):
    status: Literal["ok"]


class InfoResponse(_Response):
    """``/info``: the served model (its name, no path), its device, limits and batching."""

    model: Optional[str]
    device: str
    dtype: str
    max_context_tokens: Optional[int]
    grogu_version: str
    limits: dict[str, Any]
    batching: dict[str, Any]
    metrics: list[str]
    rerank_modes: list[str]
    embedder: Optional[str]
    nli: Optional[str]


class StatsResponse(_Response):
    """``/stats``: engine calls this replica ran, by number of requests gathered."""

    replica: str
    batches: int
    max_call_tokens: int
    batch_sizes: dict[str, int]
    pid: Optional[int] = None


class CompatResult(_Response):
    index: int
    relevance_score: float
    document: Optional[dict[str, Any]] = None


class CompatTuned(_Response):
    """The service's ``grogu tune`` file (``grogu serve --settings``): its decision, and what differs from
    the set-up it was fitted to."""

    decision: str
    mismatches: list[str]


class CompatGrogu(_Response):
    """What grogu adds to a compatible answer (clients ignore it). ``tuned``: only from a service
    started with a tuned file."""

    mode: str
    metric: Optional[str]
    utility: list[float]
    gate: Optional[GateVerdict]
    answer: Optional[str]
    ignored: list[str]
    tuned: Optional[CompatTuned] = None


class CompatRerankResponse(_Response):
    """A Cohere (v1, v2) or Jina rerank answer, with grogu's own key."""

    id: str
    model: str
    results: list[CompatResult]
    usage: dict[str, int]
    meta: dict[str, Any]
    grogu: CompatGrogu
