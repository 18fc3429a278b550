"""The scoring service's wire schema: every request and response body, as pydantic models, in one place
(:mod:`.requests`, :mod:`.responses`; import them from here).

The service's routes (:mod:`grogu.apps.serve.service`) parse requests with these models and answer with
them (they are its OpenAPI schema); the clients (:mod:`grogu.rerank.remote.client`) build their requests
with them and validate each answer with them. :mod:`.wire` turns grogu's own objects into these bodies and
back.

Requests are strict: a wrong type or a field not declared is an error that names the field, and each
setting is checked by the check the Python classes use (:mod:`grogu.core.checks`), with the same message.
Responses are read leniently: a field a newer service adds is ignored. Documents travel as ``{"text",
"title"}`` (or a string); their metadata stay with the caller. A NaN or an infinity (a perplexity can
overflow) is written as JSON's non-standard ``NaN`` / ``Infinity``, which Python's ``json`` reads back.

This package imports pydantic and grogu's light modules only: no torch, no httpx.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from .requests import (
    ACUItem,
    ACURequest,
    CompatRerankRequest,
    ContextsBatchItem,
    ContextsBatchRequest,
    ContextsRequest,
    Doc,
    DocumentIn,
    InfluenceItem,
    InfluenceRequest,
    InfluenceSettings,
    LayoutRequest,
    Query,
    RerankRequest,
    ScoreBatchItem,
    ScoreBatchRequest,
    ScoreRequest,
    ScorerSettings,
    SePerRequest,
    TemplateIn,
    UngroundedRequest,
)
from .responses import (
    ACUResponse,
    CompatGrogu,
    CompatRerankResponse,
    CompatResult,
    CompatTuned,
    HealthResponse,
    InfluenceResponse,
    InfoResponse,
    LayoutResponse,
    RankedOut,
    RerankResponse,
    ScoreOut,
    ScoresBatchResponse,
    ScoresResponse,
    SePerResponse,
    StatsResponse,
    TokenDetailsOut,
    UngroundedResponse,
)


def validation_message(errors: list[dict]) -> tuple[str, str]:
    """(message, kind) of pydantic's errors: grogu's own checks with their own messages (kind
    ValueError), others with the field and pydantic's message (kind ValidationError)."""
    parts, grogu_checks = [], True
    for e in errors[:10]:
        field = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        if e.get("type") == "value_error" and "error" in e.get("ctx", {}):
            message = str(e["ctx"]["error"])  # grogu's own check, its own message
            parts.append(message if field == "body" or message.startswith(field) else f"{field}: {message}")
        else:
            grogu_checks = False
            parts.append(f"{field}: {e.get('msg')}")
    if grogu_checks:
        return "; ".join(parts), "ValueError"
    return "invalid request: " + "; ".join(parts), "ValidationError"


def build(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """The request ``model`` holding ``data``, as the service will parse it: a ValueError with the
    message the service would answer (its 422) when a field does not fit."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValueError(validation_message(exc.errors())[0]) from None


def validate(model: Any, data: Any) -> Any:
    """``data`` (a decoded JSON answer) read into ``model``: a pydantic model or a result dataclass.
    A ``pydantic.ValidationError`` (a ValueError) names what does not fit."""
    return _adapter(model).validate_python(data)


@functools.lru_cache(maxsize=None)
def _adapter(model: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(model)


__all__ = [
    "ACUItem",
    "ACURequest",
    "CompatRerankRequest",
    "ContextsBatchItem",
    "ContextsBatchRequest",
    "ContextsRequest",
    "Doc",
    "DocumentIn",
    "InfluenceItem",
    "InfluenceRequest",
    "InfluenceSettings",
    "LayoutRequest",
    "Query",
    "RerankRequest",
    "ScoreBatchItem",
    "ScoreBatchRequest",
    "ScoreRequest",
    "ScorerSettings",
    "SePerRequest",
    "TemplateIn",
    "UngroundedRequest",
    "ACUResponse",
    "CompatGrogu",
    "CompatRerankResponse",
    "CompatResult",
    "CompatTuned",
    "HealthResponse",
    "InfluenceResponse",
    "InfoResponse",
    "LayoutResponse",
    "RankedOut",
    "RerankResponse",
    "ScoreOut",
    "ScoresBatchResponse",
    "ScoresResponse",
    "SePerResponse",
    "StatsResponse",
    "TokenDetailsOut",
    "UngroundedResponse",
    "validation_message",
    "build",
    "validate",
]
