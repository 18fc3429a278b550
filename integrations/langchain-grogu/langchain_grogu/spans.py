"""grogu's OpenTelemetry spans in LangChain (see :mod:`grogu.observe.tracing`): the parent span of a run, and
LangChain documents as the spans' documents.

LangChain traces through callback handlers, not through the OpenTelemetry context: OpenInference's
``LangChainInstrumentor`` adds a tracer handler to every callback manager and keeps one span per run
(``get_span(run_id)``). grogu's spans are parented to that run's span when such a handler is among
the run's callbacks, else to the current OpenTelemetry span (e.g. one the caller opened)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.documents import Document

from grogu.observe import tracing
from grogu.observe.influence_record import grogu_utility


def run_span_context(callbacks: Any, run_id: UUID | None = None) -> Any:
    """The OpenTelemetry context of the span a tracer handler in ``callbacks`` keeps for ``run_id``
    (default: the run of a run manager, the parent run of a callback manager); None when there is
    none (then the current context is used)."""
    if callbacks is None or not tracing.available():
        return None
    if run_id is None:
        run_id = (
            getattr(callbacks, "run_id", None)
            if not isinstance(callbacks, BaseCallbackManager)
            else callbacks.parent_run_id
        )
    if run_id is None:
        return None
    handlers = list(getattr(callbacks, "handlers", None) or []) + list(
        getattr(callbacks, "inheritable_handlers", None) or []
    )
    for handler in handlers:
        get_span = getattr(handler, "get_span", None)
        if callable(get_span):
            try:
                span = get_span(run_id)
            except Exception:  # noqa: BLE001 - someone else's handler: no parent from it
                span = None
            if span is not None:
                return tracing.context_of(span)
    return None


def _document(doc: Document, score: Any, relevance_key: str | None, **fields: Any) -> dict[str, Any]:
    retrieval = doc.metadata.get(relevance_key) if relevance_key else None
    return {
        "id": doc.id,
        "page_content": doc.page_content,
        "metadata": dict(doc.metadata),
        "score": score,
        "retrieval_score": retrieval,
        **fields,
    }


def mode_score(doc: Document, info: dict[str, Any]) -> float | None:
    """A returned document's score in the chosen mode: ``metadata['relevance_score']`` as the reranker
    wrote it (on ``score_scale``), else from ``metadata['grogu']``: the fused score (fusion), the
    utility (document, prune), the chosen context's utility (context); None after a failed scoring."""
    if "error" in info:
        return None
    if "relevance_score" in doc.metadata:
        return doc.metadata["relevance_score"]
    if "fused_score" in info:
        return info["fused_score"]
    if info.get("score") is not None:
        return info["score"]
    context = info.get("context")
    return context.get("score") if isinstance(context, dict) else None


def rerank_span(scoring: Any, docs: Sequence[Document], query: str, top_n: int | None, callbacks: Any) -> Any:
    """The ``grogu.rerank`` span of one rerank call of a GroguCompressor / GroguRetriever."""
    key = scoring.relevance_key
    documents = [_document(d, d.metadata.get(key) if key else None, key) for d in docs] if tracing.available() else []
    return tracing.rerank_span(
        framework="langchain",
        query=query,
        model=scoring.model_name,
        top_k=top_n if top_n is not None else len(docs),
        mode=scoring.mode,
        metric=scoring.metric,
        documents=documents,
        parent=run_span_context(callbacks),
    )


def finish(span: Any, scoring: Any, out: Sequence[Document], key: str = "grogu") -> None:
    """The returned documents (copies with ``metadata['grogu']``) as the span's output documents."""
    if not span.recording:
        return
    documents, context_score, gate = [], None, None
    for doc in out:
        info = doc.metadata.get(key) or {}
        context = info.get("context")
        if isinstance(context, dict):
            context_score, gate = context.get("score"), context.get("gate")
        documents.append(
            _document(
                doc,
                mode_score(doc, info),
                scoring.relevance_key,
                index=info.get("index"),
                utility=grogu_utility(doc.metadata),
            )
        )
    span.output(documents, context_score=context_score, gate=gate)
