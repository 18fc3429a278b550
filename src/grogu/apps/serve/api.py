"""What the service reads from a request body before any work: every document list, query, prompt and
character it holds (for the limits, :mod:`.admission`), and its documents as grogu takes them.

The request models themselves are the wire schema's (:mod:`grogu.rerank.remote.schema`), which the
clients share. A wrong type or a missing field is a 422 that names the field;
a bad setting is a 422 with the message it has in Python."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ...rerank.remote import wire
from ...rerank.remote.schema import (
    ContextsBatchRequest,
    ContextsRequest,
    Doc,
    InfluenceRequest,
    LayoutRequest,
    RerankRequest,
    ScoreBatchRequest,
    ScoreRequest,
    SePerRequest,
)


def docs_of(body: Any) -> list[list[Any]]:
    """Every document list a request carries (for the per-request limits)."""
    if isinstance(body, (ScoreRequest, RerankRequest, SePerRequest)):
        return [body.documents]
    if isinstance(body, ScoreBatchRequest):
        return [it.documents for it in body.items]
    if isinstance(body, ContextsRequest):
        return list(body.contexts)
    if isinstance(body, ContextsBatchRequest):
        return [c for it in body.items for c in it.contexts]
    if isinstance(body, LayoutRequest):
        return list(body.layouts)
    if isinstance(body, InfluenceRequest):
        return [it.documents for it in body.items]
    return []


def text_chars(value: Any) -> int:
    """Characters of every string a request holds (queries, documents, titles, templates, answers ...)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, BaseModel):
        return sum(text_chars(getattr(value, name)) for name in type(value).model_fields)
    if isinstance(value, (list, tuple)):
        return sum(text_chars(v) for v in value)
    return 0


def queries_of(body: Any) -> list[str]:
    """Every query a request carries (for the query limit)."""
    if isinstance(body, (ScoreBatchRequest, ContextsBatchRequest, InfluenceRequest)):
        return [it.query for it in body.items]
    query = getattr(body, "query", None)
    return [query] if isinstance(query, str) else []


def templates_of(body: Any) -> list[tuple[str, int]]:
    """(name, characters) of each prompt a request brings (for the template limit)."""
    out = []
    template = getattr(body, "template", None)
    if template is not None:
        out.append(("template", wire.template_chars(template.model_dump())))
    for name in ("prompt_with", "prompt_without"):
        if getattr(body, name, None) is not None:
            out.append((name, len(getattr(body, name))))
    return out


def plain_docs(docs: list[Doc]) -> list[Any]:
    """Documents as grogu takes them: a str or a {"text", "title"} dict."""
    return [d if isinstance(d, str) else d.model_dump(exclude_none=True) for d in docs]


__all__ = ["docs_of", "text_chars", "queries_of", "templates_of", "plain_docs"]
