"""OpenTelemetry spans of grogu's work, in OpenInference's conventions (``pip install grogu[otel]``).

The LlamaIndex and LangChain integrations call this module; it emits two spans, each a child of the
span the framework is in when grogu runs (an OpenInference instrumentor's span, or the caller's own
current span):

``grogu.rerank`` (``openinference.span.kind`` ``RERANKER``): one per rerank call.
    OpenInference's reranker attributes: ``reranker.query``, ``reranker.model_name`` (the target LLM),
    ``reranker.top_k``, ``reranker.input_documents.{i}.document.{id,content,score,metadata}`` (score: the
    retriever's) and ``reranker.output_documents.{i}.document.{id,content,score,metadata}`` (score: the
    document's score in the chosen mode, the one the framework returns; metadata: the document's
    metadata, grogu's details under ``"grogu"`` included, as JSON). grogu's own: ``grogu.framework``,
    ``grogu.mode``, ``grogu.metric``, and per output document, in output order,
    ``grogu.output.index`` (its position in the input), ``grogu.output.retrieval_score`` and
    ``grogu.output.utility`` (the GROGU utility; None in the context mode, which scores whole
    contexts: ``grogu.context_score`` is the chosen context's utility). A failed scoring sets the span's
    status to ERROR with the exception recorded and ``grogu.error`` ("Type: message"); with
    ``on_error="passthrough"`` the output documents are then the input ones.

``grogu.influence`` (``EVALUATOR``): one per influence record (:mod:`grogu.observe.influence_record`).
    ``input.value`` the query, ``output.value`` the answer scored, and every field of the record as
    ``grogu.influence.<field>``: str and numbers as they are, lists of numbers or str as arrays
    (``grogu.influence.influence``: the scores in document order), ``documents``, ``metadata`` and
    other structures as JSON (``grogu.influence.documents``: every document's id, text, metadata,
    retrieval score, utility, influence and answers); ``grogu.influence.document_ids`` lists the
    documents' ids. A failed scoring: status ERROR, ``grogu.influence.error`` set, the rest of the
    record still there. The span that was current when the query was recorded (the query's span)
    also gets an event ``grogu_influence`` with the method, model, ids and scores, when it is still
    open when the scores are ready (always in synchronous queries; not with ``background=True``).

A no-op without ``opentelemetry-api``, or when the environment variable ``GROGU_TRACING`` is ``0``,
``false``, ``no`` or ``off``; with the API but no SDK configured the spans do not record and no
attribute is built. Spans go to the global tracer provider, or the one given to
:func:`set_tracer_provider`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..core.version import __version__

try:  # the optional extra: grogu[otel]
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import Status, StatusCode
except ImportError:  # pragma: no cover - exercised where opentelemetry is not installed
    otel_context = otel_trace = Status = StatusCode = None

# OpenInference semantic conventions (openinference-semantic-conventions; the tests check these names)
SPAN_KIND = "openinference.span.kind"
INPUT_VALUE = "input.value"
OUTPUT_VALUE = "output.value"
RERANKER_QUERY = "reranker.query"
RERANKER_MODEL_NAME = "reranker.model_name"
RERANKER_TOP_K = "reranker.top_k"
RERANKER_INPUT_DOCUMENTS = "reranker.input_documents"
RERANKER_OUTPUT_DOCUMENTS = "reranker.output_documents"
DOCUMENT_ID = "document.id"
DOCUMENT_CONTENT = "document.content"
DOCUMENT_SCORE = "document.score"
DOCUMENT_METADATA = "document.metadata"
RERANKER, EVALUATOR = "RERANKER", "EVALUATOR"

RERANK_SPAN = "grogu.rerank"
INFLUENCE_SPAN = "grogu.influence"
INFLUENCE_EVENT = "grogu_influence"
INFLUENCE_PREFIX = "grogu.influence."
TRACER_NAME = "grogu"

_provider: Any = None


def available() -> bool:
    """True when opentelemetry-api is installed and ``GROGU_TRACING`` does not turn tracing off."""
    if otel_trace is None:
        return False
    return os.environ.get("GROGU_TRACING", "").strip().lower() not in ("0", "false", "no", "off")


def set_tracer_provider(provider: Any = None) -> None:
    """Send grogu's spans to ``provider`` (an OpenTelemetry ``TracerProvider``); None: the global one."""
    global _provider
    _provider = provider


def tracer() -> Any:
    """grogu's tracer, or None when tracing is not available."""
    if not available():
        return None
    provider = _provider if _provider is not None else otel_trace.get_tracer_provider()
    return provider.get_tracer(TRACER_NAME, __version__)


def current_context() -> Any:
    """The current OpenTelemetry context (None without opentelemetry): pass it on to work that runs
    later or on another thread, so that its spans keep their parent."""
    return otel_context.get_current() if otel_trace is not None else None


def context_of(span: Any) -> Any:
    """A context whose current span is ``span`` (a framework's span to parent grogu's), else None."""
    if otel_trace is None or span is None:
        return None
    return otel_trace.set_span_in_context(span)


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def document_attributes(prefix: str, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OpenInference document attributes ``{prefix}.{i}.document.{id,content,score,metadata}`` of
    documents given as dicts with ``id``, ``page_content``, ``score`` and ``metadata``."""
    out: dict[str, Any] = {}
    for i, doc in enumerate(documents):
        key = f"{prefix}.{i}."
        if doc.get("id") is not None:
            out[key + DOCUMENT_ID] = str(doc["id"])
        out[key + DOCUMENT_CONTENT] = str(doc.get("page_content") or "")
        score = _number(doc.get("score"))
        if score is not None and math.isfinite(score):
            out[key + DOCUMENT_SCORE] = score
        if doc.get("metadata"):
            out[key + DOCUMENT_METADATA] = to_json(doc["metadata"])
    return out


def _fail(span: Any, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
    span.set_attribute("grogu.error", f"{type(exc).__name__}: {exc}")


class RerankSpan:
    """The handle of a ``grogu.rerank`` span (does nothing when the span does not record)."""

    def __init__(self, span: Any = None) -> None:
        self.span = span
        self.failed = False

    @property
    def recording(self) -> bool:
        return self.span is not None and self.span.is_recording()

    def output(
        self,
        documents: Sequence[Mapping[str, Any]],
        *,
        context_score: float | None = None,
        gate: Mapping[str, Any] | None = None,
    ) -> None:
        """The documents returned, in order: dicts with ``id``, ``page_content``, ``metadata``,
        ``score`` (in the chosen mode), ``index`` (position in the input), ``retrieval_score`` and
        ``utility``; ``context_score``: the chosen context's utility (context mode); ``gate``: the verdict
        on the retriever's context (``grogu.GateVerdict.as_dict()``), as ``grogu.gate.<field>``."""
        if not self.recording:
            return
        attributes = document_attributes(RERANKER_OUTPUT_DOCUMENTS, documents)
        attributes["grogu.output.index"] = [-1 if d.get("index") is None else int(d["index"]) for d in documents]
        attributes["grogu.output.retrieval_score"] = [_number(d.get("retrieval_score")) for d in documents]
        attributes["grogu.output.utility"] = [_number(d.get("utility")) for d in documents]
        if _number(context_score) is not None:
            attributes["grogu.context_score"] = float(context_score)
        for name, value in (gate or {}).items():
            attributes[f"grogu.gate.{name}"] = list(value) if isinstance(value, (list, tuple)) else value
        self.span.set_attributes(attributes)

    def fail(self, exc: BaseException) -> None:
        """A failed scoring: the exception recorded, status ERROR, ``grogu.error`` set."""
        if self.recording and not self.failed:
            _fail(self.span, exc)
        self.failed = True


@contextmanager
def rerank_span(
    *,
    framework: str,
    query: str,
    model: str,
    top_k: int | None,
    documents: Sequence[Mapping[str, Any]],
    mode: str | None = None,
    metric: str | None = None,
    parent: Any = None,
) -> Iterator[RerankSpan]:
    """A ``grogu.rerank`` span around one rerank call, current inside the block; ``documents`` are the
    input documents (dicts with ``id``, ``page_content``, ``metadata`` and ``score``, the retriever's).
    ``parent``: the context to start it in (None: the current one). An exception leaving the block is
    recorded on the span (status ERROR) and raised again."""
    t = tracer()
    if t is None:
        yield RerankSpan()
        return
    with t.start_as_current_span(
        RERANK_SPAN, context=parent, record_exception=False, set_status_on_exception=False
    ) as span:
        handle = RerankSpan(span)
        if span.is_recording():
            attributes = {
                SPAN_KIND: RERANKER,
                RERANKER_QUERY: query,
                RERANKER_MODEL_NAME: model,
                INPUT_VALUE: query,
                "grogu.framework": framework,
            }
            if top_k is not None:
                attributes[RERANKER_TOP_K] = int(top_k)
            if mode is not None:
                attributes["grogu.mode"] = mode
            if metric is not None:
                attributes["grogu.metric"] = metric
            attributes.update(document_attributes(RERANKER_INPUT_DOCUMENTS, documents))
            span.set_attributes(attributes)
        try:
            yield handle
        except BaseException as exc:
            handle.fail(exc)
            raise


# ---------------------------------------------------------------------- influence records
def _attribute(value: Any) -> Any:
    """A record field as an OpenTelemetry attribute value (None: left out)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, str) for v in value):
            return list(value)
        if all(v is None or _number(v) is not None for v in value):
            return [_number(v) for v in value]
    return to_json(value)


def record_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    """Every field of an influence record as ``grogu.metrics.influence.<field>`` attributes (see the module
    docstring), plus OpenInference's span kind, ``input.value`` and ``output.value``."""
    attributes: dict[str, Any] = {SPAN_KIND: EVALUATOR, INPUT_VALUE: str(record.get("query") or "")}
    if record.get("answer") is not None:
        attributes[OUTPUT_VALUE] = str(record["answer"])
    for key, value in record.items():
        value = _attribute(value)
        if value is not None:
            attributes[INFLUENCE_PREFIX + key] = value
    attributes[INFLUENCE_PREFIX + "document_ids"] = [
        "" if d.get("id") is None else str(d["id"]) for d in record.get("documents") or []
    ]
    return attributes


def event_attributes(record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``grogu_influence`` event's attributes: method, model, embedder, document ids, scores, error."""
    attributes = {
        INFLUENCE_PREFIX + k: _attribute(record.get(k))
        for k in ("method", "model", "embedder", "influence", "error", "elapsed_s")
    }
    attributes[INFLUENCE_PREFIX + "document_ids"] = [
        "" if d.get("id") is None else str(d["id"]) for d in record.get("documents") or []
    ]
    return {k: v for k, v in attributes.items() if v is not None}


class InfluenceSpan:
    """The handle of a ``grogu.metrics.influence`` span (does nothing when the span does not record)."""

    def __init__(self, span: Any = None, parent: Any = None) -> None:
        self.span, self.parent = span, parent

    def finish(self, record: Mapping[str, Any]) -> None:
        """Write the record to the span (status ERROR when it failed) and the event on the query's span."""
        if self.span is None:
            return
        if self.span.is_recording():
            self.span.set_attributes(record_attributes(record))
            if record.get("error"):
                self.span.set_status(Status(StatusCode.ERROR, str(record["error"])))
        query_span = otel_trace.get_current_span(self.parent)
        if query_span.is_recording():
            query_span.add_event(INFLUENCE_EVENT, event_attributes(record))


@contextmanager
def influence_span(parent: Any = None) -> Iterator[InfluenceSpan]:
    """A ``grogu.metrics.influence`` span around one influence scoring, started in ``parent`` (a context from
    :func:`current_context`; None: the current one). An exception leaving the block is recorded."""
    t = tracer()
    if t is None:
        yield InfluenceSpan()
        return
    if parent is None:
        parent = otel_context.get_current()
    with t.start_as_current_span(
        INFLUENCE_SPAN, context=parent, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield InfluenceSpan(span, parent)
        except BaseException as exc:
            if span.is_recording():
                _fail(span, exc)
            raise


__all__ = [
    "available",
    "set_tracer_provider",
    "tracer",
    "current_context",
    "context_of",
    "rerank_span",
    "influence_span",
    "RerankSpan",
    "InfluenceSpan",
    "record_attributes",
    "event_attributes",
    "document_attributes",
    "RERANK_SPAN",
    "INFLUENCE_SPAN",
    "INFLUENCE_EVENT",
]
