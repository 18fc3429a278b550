"""Influence logging: after a query, how much each source node shaped the answer that was given.

For a response with source nodes 1..k and answer A, the Influence Score of node i (DocImpact,
``grogu.metrics.influence``) is IS_i = cos(F(G(i)), F(A)) - cos(F(G(all but i)), F(A)), with G the target
LLM's greedy answer from the given nodes and F a sentence-embedding model. Higher = more influence.

Two ways to hook it into LlamaIndex, both writing ``source_nodes[i].metadata["influence"]`` and one
record per query to every sink (the Python logger, a JSONL file, an in-memory list or a callable):

- :class:`GroguInfluenceHandler`, an instrumentation event handler (``QueryEndEvent``)::

      handler = GroguInfluenceHandler(model=llm, sinks=["influence.jsonl"])
      get_dispatcher().add_event_handler(handler)

- :class:`GroguInfluenceCallbackHandler`, for the legacy ``CallbackManager`` (``CBEventType.QUERY``).

The records, the sinks, timing, failures and where the work runs are grogu's
(:mod:`grogu.observe.influence_log`, shared with the LangChain integration; the record schema is documented
in :mod:`grogu.observe.influence_record`). In a synchronous query the scores are computed before ``query()`` returns (or on grogu's
worker thread with ``background=True``; ``flush()`` waits). Inside a running event loop (``aquery``)
they are computed in a task that does not block the loop; ``await handler.aflush()`` waits for them.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Dict, List, Optional

from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from grogu.metrics.influence import DEFAULT_MAX_NEW_TOKENS
from grogu.observe import influence_log
from grogu.observe.influence_record import AnsweredQuery, grogu_utility
from grogu.observe.sinks import CallableSink, JSONLSink, ListSink, LoggerSink
from grogu.observe.sinks import as_sink as _as_sink
from grogu.rerank.factory import build_influence_scorer
from grogu.runtime.models import DEFAULT_MODEL

from .utils import hide_from_llm, model_label, node_text, resolve_engine

logger = logging.getLogger(__name__)


def as_sink(sink: Any) -> Any:
    """None -> log on ``llama_index.postprocessor.grogu.influence``; a Logger; a JSONL path; a list; an
    object with ``write(record)``; or a callable (see :func:`grogu.observe.sinks.as_sink`)."""
    return _as_sink(sink, logger)


def response_answer(response: Any) -> Optional[str]:
    """The answer text of a LlamaIndex response, or None when a stream has not been consumed yet
    (reading it here would steal the stream from the caller)."""
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        return response.response_txt
    if not hasattr(response, "response"):
        return None
    return "" if response.response is None else str(response)


def node_fields(n: NodeWithScore) -> Dict[str, Any]:
    """The record's fields of a source node. ``retrieval_score``: what GroguRerank kept in
    ``metadata["retrieval_score"]``, else the node's score unless a grogu reranker replaced it."""
    meta = n.node.metadata
    retrieval = meta.get("retrieval_score")
    if retrieval is None and "grogu" not in meta:
        retrieval = n.score
    return {
        "id": n.node.node_id,
        "page_content": n.node.get_content(metadata_mode=MetadataMode.NONE),
        "metadata": dict(meta),
        "retrieval_score": retrieval,
        "utility": grogu_utility(meta),
    }


def write_influence(nodes: List[NodeWithScore], scores: List[float]) -> None:
    """``metadata["influence"]`` of each node, kept out of the LLM's and the embedder's text."""
    for n, score in zip(nodes, scores):
        n.node.metadata["influence"] = float(score)
        hide_from_llm(n.node, "influence")


class InfluenceRecorder(influence_log.InfluenceRecorder):
    """grogu's influence recorder reading LlamaIndex queries and responses: the source nodes' text as
    the LLM read it (``metadata_mode``), the answer, and ``metadata["influence"]`` written back.
    Nested query engines (routers) end with the same response object: it is scored once."""

    def __init__(self, scorer: Any, model: str, sinks: Any, metadata_mode: MetadataMode, **kwargs: Any) -> None:
        super().__init__(scorer, model, sinks, framework="llama_index", logger=logger, **kwargs)
        self.metadata_mode = metadata_mode
        self._seen: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()

    def record_response(self, query: Any, response: Any, context: Optional[Dict[str, Any]] = None) -> None:
        """Score ``response.source_nodes`` for the answer in ``response`` (see the module docstring)."""
        if self._seen.get(id(response)) is response:
            return
        job = self.job(query, response, context)
        if job is None:
            return
        try:
            self._seen[id(response)] = response
        except TypeError:  # not weak-referenceable: no de-duplication
            pass
        self.record(job)

    def job(self, query: Any, response: Any, context: Optional[Dict[str, Any]] = None) -> Optional[AnsweredQuery]:
        """The job of one query and its response; None when there is nothing to score yet."""
        query_str = query.query_str if isinstance(query, QueryBundle) else query
        nodes = getattr(response, "source_nodes", None)
        if not isinstance(query_str, str) or nodes is None:
            logger.debug("grogu influence: skipping a response without query or source nodes")
            return None
        answer = response_answer(response)
        if answer is None:
            logger.warning(
                "grogu influence: the response is a stream that was not consumed yet; call "
                "handler.score_response(query, response) after reading it"
            )
            return None
        nodes = list(nodes)
        return AnsweredQuery(
            query=query_str,
            answer=answer,
            documents=[node_text(n.node, self.metadata_mode) for n in nodes],
            fields=[node_fields(n) for n in nodes],
            context=context or {},
            on_result=lambda result: write_influence(nodes, result.scores),
        )


def _build_recorder(
    model: Any,
    *,
    embedder: Any = "all-minilm-l6-v2",
    sinks: Any = None,
    on_error: str = "record",
    background: bool = False,
    metadata_mode: MetadataMode = MetadataMode.LLM,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    template: Any = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    method: str = "exact",
    n_ablations: Optional[int] = None,
    seed: Optional[int] = 0,
) -> InfluenceRecorder:
    scorer, label = build_influence_scorer(
        model,
        resolve_engine=resolve_engine,
        model_label=model_label,
        embedder=_embedder(embedder),
        max_new_tokens=max_new_tokens,
        template=template,
        device=device,
        dtype=dtype,
        method=method,
        n_ablations=n_ablations,
        seed=seed,
    )
    return InfluenceRecorder(scorer, label, sinks, metadata_mode, on_error=on_error, background=background)


def _embedder(embedder: Any) -> Any:
    """A LlamaIndex HuggingFaceEmbedding is unwrapped to its SentenceTransformer (reused, not reloaded)."""
    from sentence_transformers import SentenceTransformer

    inner = getattr(embedder, "_model", None)
    return inner if isinstance(inner, SentenceTransformer) else embedder


class _RecorderAccess:
    """What both handlers expose of their recorder (``self.recorder``)."""

    @property
    def sinks(self) -> List[Any]:
        return self.recorder.sinks

    @property
    def records(self) -> List[Dict[str, Any]]:
        """The records of the first in-memory sink (AttributeError when there is none)."""
        for s in self.recorder.sinks:
            if isinstance(s, ListSink):
                return s.records
        raise AttributeError("no in-memory sink: pass a list in sinks=[...] to keep records")

    def score_response(self, query: Any, response: Any) -> None:
        """Score a response by hand (e.g. a stream once it has been read)."""
        self.recorder.record_response(query, response)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Wait for background records (see :meth:`grogu.observe.influence_log.InfluenceRecorder.flush`)."""
        self.recorder.flush(timeout)

    async def aflush(self) -> None:
        """Wait for every pending record, event-loop tasks included."""
        await self.recorder.aflush()


class GroguInfluenceHandler(_RecorderAccess, BaseEventHandler):
    """Instrumentation handler: on every ``QueryEndEvent``, Influence Scores of the response's source
    nodes for the answer actually given, into ``metadata["influence"]`` and one record to every sink.

    Args (keyword-only but ``model``; the same names as LangChain's ``InfluenceCallbackHandler``):
        model: the target LLM (as for :class:`GroguRerank`: name/path, grogu Engine, (model, tokenizer)
            pair or HuggingFaceLLM), a ready ``grogu.metrics.influence.InfluenceScorer``, or the shared scoring
            service: its URL (``grogu serve``; its ``--embedder`` is used) or a ``grogu.RemoteInfluenceScorer``.
        embedder: sentence-embedding model F: 'all-minilm-l6-v2' (packaged, default), a path/hub id, a
            SentenceTransformer or a LlamaIndex HuggingFaceEmbedding (its model is reused).
        sinks: a list of sinks, each a logging.Logger, a JSONL file path, a list (records appended;
            also ``handler.records``), an object with ``write(record)`` (grogu's ``JSONLSink``,
            ``ListSink``, ``LoggerSink``, ``CallableSink``, exported here), or a callable. None (default):
            log each record on ``llama_index.postprocessor.grogu.influence``; ``[]``: none.
        on_error: "record" (default): a failure is logged (warning) and recorded with ``error`` set,
            and never breaks the query; "raise": it is also raised, from ``score_response`` and
            ``flush()`` (LlamaIndex's dispatcher discards what an event handler raises; use
            :class:`GroguInfluenceCallbackHandler` to fail the query). "passthrough" means "record".
        background: in synchronous queries, compute on grogu's worker thread instead of before
            ``query()`` returns (``flush()`` waits).
        metadata_mode: which metadata the LLM reads with each node's text (default ``MetadataMode.LLM``).
        max_new_tokens, template, device, dtype: as for ``grogu.metrics.influence.InfluenceScorer``.
        method: "exact" (2k + 1 generations; default), "ablation" (ContextCite-style estimate from
            ``n_ablations`` random ablations; no per-document answers in the record) or "auto"
            (ablation above 12 nodes when it is cheaper); forward-only, generating nothing since the
            answer is given: "leave_one_out_logprob" (drop of the answer's log-probability without each
            node, nats; k + 1 forward passes) or "contextcite" (ContextCite's LASSO weights from
            ``n_ablations`` masks, default 64). The record's ``method`` says which made it; forward-only
            records have ``logprobs`` (log P(answer | each scored context)) and ``embedder`` None.
            See ``grogu.metrics.influence.InfluenceScorer`` and the README's "which method when".
        n_ablations, seed: the number of random ablations (default: 32 for "ablation"/"auto", 64 for
            "contextcite") and the seed of their masks.

    The record schema is :mod:`grogu.observe.influence_record`'s (``framework`` "llama_index"; ``run_id`` the
    query's span id, ``metadata`` its instrument tags).
    """

    model: str = Field(description="Target LLM whose answers are compared.")
    _recorder: InfluenceRecorder = PrivateAttr()

    def __init__(self, model: Any = DEFAULT_MODEL, **options: Any) -> None:
        recorder = _build_recorder(model, **options)
        super().__init__(model=recorder.model)
        self._recorder = recorder

    @classmethod
    def class_name(cls) -> str:
        return "GroguInfluenceHandler"

    @property
    def recorder(self) -> InfluenceRecorder:
        return self._recorder

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, QueryEndEvent):
            context = {"run_id": event.span_id, "metadata": dict(event.tags)}
            self._recorder.record_response(event.query, event.response, context)


class GroguInfluenceCallbackHandler(_RecorderAccess, BaseCallbackHandler):
    """The same influence logging for the legacy ``CallbackManager`` (on the end of each
    ``CBEventType.QUERY``). Takes the arguments of :class:`GroguInfluenceHandler`; here
    ``on_error="raise"`` fails the query with the scoring or sink failure (default "record": log and
    record it). The record's ``run_id`` is the query's event id."""

    def __init__(self, model: Any = DEFAULT_MODEL, **options: Any) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        self.recorder = _build_recorder(model, **options)
        self._queries: Dict[str, str] = {}

    def on_event_start(
        self,
        event_type: CBEventType,
        payload: Optional[Dict[str, Any]] = None,
        event_id: str = "",
        parent_id: str = "",
        **kwargs: Any,
    ) -> str:
        if event_type == CBEventType.QUERY and payload and EventPayload.QUERY_STR in payload:
            self._queries[event_id] = payload[EventPayload.QUERY_STR]
        return event_id

    def on_event_end(
        self, event_type: CBEventType, payload: Optional[Dict[str, Any]] = None, event_id: str = "", **kwargs: Any
    ) -> None:
        if event_type != CBEventType.QUERY:
            return
        query = self._queries.pop(event_id, None)
        response = (payload or {}).get(EventPayload.RESPONSE)
        if query is not None and response is not None:
            self.recorder.record_response(query, response, {"run_id": event_id or None})

    def start_trace(self, trace_id: Optional[str] = None) -> None:
        pass

    def end_trace(self, trace_id: Optional[str] = None, trace_map: Optional[Dict[str, List[str]]] = None) -> None:
        pass


__all__ = [
    "GroguInfluenceHandler",
    "GroguInfluenceCallbackHandler",
    "InfluenceRecorder",
    "CallableSink",
    "JSONLSink",
    "ListSink",
    "LoggerSink",
    "as_sink",
]
