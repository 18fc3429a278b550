"""Influence logging: after a query, how much each source node shaped the answer that was given.

For a response with source nodes 1..k and answer A, the Influence Score of node i (DocImpact,
``grogu.influence``) is IS_i = cos(F(G(i)), F(A)) - cos(F(G(all but i)), F(A)), with G the target
LLM's greedy answer from the given nodes and F a sentence-embedding model. Higher = more influence.

Two ways to hook it into LlamaIndex, both writing ``source_nodes[i].metadata["influence"]`` and one
record per query to a sink (the Python logger, a JSONL file, an in-memory list or a callable):

- :class:`GroguInfluenceHandler`, an instrumentation event handler (``QueryEndEvent``)::

      handler = GroguInfluenceHandler(model=llm, sink="influence.jsonl")
      get_dispatcher().add_event_handler(handler)

- :class:`GroguInfluenceCallbackHandler`, for the legacy ``CallbackManager`` (``CBEventType.QUERY``).

In a synchronous query the scores are computed before ``query()`` returns (or on grogu's worker thread
with ``background=True``; ``flush()`` waits). Inside a running event loop (``aquery``) they are
computed in a task that does not block the loop; ``await handler.aflush()`` waits for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import json
import logging
import threading
import time
import weakref
from typing import Any, Dict, List, Optional

from grogu import batching
from grogu.influence import InfluenceResult, InfluenceScorer
from grogu.serve import RemoteInfluenceScorer
from grogu.models import DEFAULT_MODEL
from grogu.sinks import CallableSink, JSONLSink, ListSink, LoggerSink
from grogu.sinks import as_sink as _as_sink
from llama_index.core.base.response.schema import AsyncStreamingResponse, StreamingResponse
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent
from llama_index.core.schema import MetadataMode, QueryBundle

from .utils import hide_from_llm, model_label, node_text, remote_target, resolve_engine

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- sinks
# grogu's shared sinks; the names this package has always exported stay as aliases
JsonlSink = JSONLSink
MemorySink = ListSink


def as_sink(sink: Any) -> Any:
    """None -> log on ``llama_index.postprocessor.grogu.influence``; a Logger; a JSONL path; a list; an
    object with ``write(record)``; or a callable (see :func:`grogu.sinks.as_sink`)."""
    return _as_sink(sink, logger)


# ---------------------------------------------------------------------------------------------- recorder
def response_answer(response: Any) -> Optional[str]:
    """The answer text of a LlamaIndex response, or None when a stream has not been consumed yet
    (reading it here would steal the stream from the caller)."""
    if isinstance(response, (StreamingResponse, AsyncStreamingResponse)):
        return response.response_txt
    if not hasattr(response, "response"):
        return None
    return "" if response.response is None else str(response)


class InfluenceRecorder:
    """Computes Influence Scores of a response's source nodes and writes them (metadata + sink).

    Shared by the instrumentation and the callback handler; see the module docstring for when the
    work happens. Failures are logged and recorded (``"error"`` in the record) unless
    ``raise_errors=True``: a logging handler should not break the query it observes.
    """

    def __init__(self, scorer: InfluenceScorer, model: str, sink: Any, metadata_mode: MetadataMode,
                 background: bool, raise_errors: bool) -> None:
        self.scorer = scorer
        self.model = model
        self.sink = as_sink(sink)
        self.metadata_mode = metadata_mode
        self.raise_errors = raise_errors
        self.background = background  # sync queries: score on grogu's worker thread (grogu.batching)
        self._pending: set = set()
        self._lock = threading.Lock()
        # nested query engines (routers) end with the same response object: score it once
        self._seen: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()

    # -- entry point
    def record(self, query: Any, response: Any) -> None:
        """Score ``response.source_nodes`` for the answer in ``response``; see the class docstring."""
        if self._seen.get(id(response)) is response:
            return
        job = self._job(query, response)
        if job is None:
            return
        try:
            self._seen[id(response)] = response
        except TypeError:  # not weak-referenceable: no de-duplication
            pass
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            self._track(loop.create_task(self._arun(job)))
        elif self.background:
            self._track(batching.submit(self._run, job))
        else:
            self._run(job)

    def _track(self, pending: Any) -> None:
        with self._lock:
            self._pending.add(pending)
        pending.add_done_callback(self._untrack)

    def _untrack(self, pending: Any) -> None:
        with self._lock:
            self._pending.discard(pending)

    def _job(self, query: Any, response: Any) -> Optional[Dict[str, Any]]:
        query_str = query.query_str if isinstance(query, QueryBundle) else query
        nodes = getattr(response, "source_nodes", None)
        if not isinstance(query_str, str) or nodes is None:
            logger.debug("grogu influence: skipping a response without query or source nodes")
            return None
        answer = response_answer(response)
        if answer is None:
            logger.warning("grogu influence: the response is a stream that was not consumed yet; call "
                           "handler.score_response(query, response) after reading it")
            return None
        nodes = list(nodes)
        return {"query": query_str, "answer": answer, "nodes": nodes,
                "docs": [node_text(n.node, self.metadata_mode) for n in nodes]}

    # -- work
    def _run(self, job: Dict[str, Any]) -> Optional[InfluenceResult]:
        start = time.perf_counter()
        try:
            result = self.scorer.score(job["query"], job["docs"], answer=job["answer"]) if job["nodes"] else None
        except Exception as exc:
            self._fail(job, exc, time.perf_counter() - start)
            return None
        self._write(job, result, time.perf_counter() - start)
        return result

    async def _arun(self, job: Dict[str, Any]) -> Optional[InfluenceResult]:
        start = time.perf_counter()
        try:
            result = await self.scorer.ascore(job["query"], job["docs"], answer=job["answer"]) if job["nodes"] else None
        except asyncio.CancelledError:
            logger.warning("grogu influence for query %r was cancelled (the event loop closed first?): "
                           "await handler.aflush() before leaving the loop", job["query"])
            raise
        except Exception as exc:
            self._fail(job, exc, time.perf_counter() - start)
            return None
        self._write(job, result, time.perf_counter() - start)
        return result

    def _base_record(self, job: Dict[str, Any], seconds: float) -> Dict[str, Any]:
        return {
            "event": "grogu_influence",
            "time": _dt.datetime.now(_dt.timezone.utc).isoformat(),
            "query": job["query"],
            "answer": job["answer"],
            "model": self.model,
            "embedder": None if self.scorer.forward_only else str(self.scorer.embedder_name),
            "latency_s": round(seconds, 4),
        }

    def _write(self, job: Dict[str, Any], result: Optional[InfluenceResult], seconds: float) -> None:
        scores = result.scores if result is not None else []
        rows = []
        for rank, (n, score) in enumerate(zip(job["nodes"], scores)):
            n.node.metadata["influence"] = float(score)
            hide_from_llm(n.node, "influence")
            grogu_meta = n.node.metadata.get("grogu")
            rows.append({
                "node_id": n.node.node_id, "rank": rank, "influence": float(score), "score": n.score,
                "retrieval_score": n.node.metadata.get("retrieval_score"),
                "utility": grogu_meta.get("score") if isinstance(grogu_meta, dict) else None,
            })
        record = self._base_record(job, seconds)
        record["nodes"] = rows
        record["method"] = result.method if result is not None else self.scorer.method
        record["leave_one_out_answers"] = result.leave_one_out_answers if result is not None else []
        record["single_answers"] = result.single_answers if result is not None else []
        if result is not None and result.forward is not None:
            record["logprobs"] = result.forward.logprobs
        self._emit(record)

    def _fail(self, job: Dict[str, Any], exc: Exception, seconds: float) -> None:
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("grogu influence failed for query %r: %s", job["query"], error, exc_info=exc)
        record = self._base_record(job, seconds)
        record["error"] = error
        record["nodes"] = [{"node_id": n.node.node_id, "rank": i} for i, n in enumerate(job["nodes"])]
        self._emit(record)
        if self.raise_errors:
            raise exc

    def _emit(self, record: Dict[str, Any]) -> None:
        try:
            self.sink.write(record)
        except Exception as exc:  # a broken sink must not break the query
            if self.raise_errors:
                raise
            logger.error("grogu influence: the sink failed (%s: %s); record: %s", type(exc).__name__, exc,
                         json.dumps(record, ensure_ascii=False, default=str))

    # -- waiting
    def _snapshot(self) -> List[Any]:
        with self._lock:
            return list(self._pending)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Wait for background (thread) work. Tasks started inside an event loop need ``aflush()``."""
        pending = self._snapshot()
        tasks = [p for p in pending if isinstance(p, asyncio.Future)]
        if tasks:
            raise RuntimeError("influence scores are still being computed in an event loop: await aflush()")
        concurrent.futures.wait(pending, timeout=timeout)
        for f in pending:
            if f.done() and f.exception() is not None:
                raise f.exception()

    async def aflush(self) -> None:
        """Wait for every pending influence computation (event-loop tasks and background threads)."""
        while True:
            pending = self._snapshot()
            if not pending:
                return
            await asyncio.gather(*(p if isinstance(p, asyncio.Future) else asyncio.wrap_future(p) for p in pending))


def _build_recorder(model: Any, embedder: Any, sink: Any, metadata_mode: MetadataMode, background: bool,
                    raise_errors: bool, max_new_tokens: int, template: Any, device: Optional[str],
                    dtype: Optional[str], method: str = "exact", n_ablations: Optional[int] = None,
                    seed: Optional[int] = 0) -> InfluenceRecorder:
    remote = remote_target(model)
    if isinstance(remote, RemoteInfluenceScorer):
        return InfluenceRecorder(remote, remote.model_name, sink, metadata_mode, background, raise_errors)
    if remote is not None:  # a service URL or a RemoteScorer: the service's influence route
        scorer = RemoteInfluenceScorer(remote if isinstance(remote, str) else remote.transport,
                                       max_new_tokens=max_new_tokens, template=template, method=method,
                                       n_ablations=n_ablations, seed=seed)
        return InfluenceRecorder(scorer, scorer.model_name, sink, metadata_mode, background, raise_errors)
    if isinstance(model, InfluenceScorer):
        scorer, engine = model, model.engine
    else:
        engine = resolve_engine(model, device=device, dtype=dtype)
        embedder = _embedder(embedder)
        scorer = InfluenceScorer(engine, embedder=embedder, max_new_tokens=max_new_tokens, template=template,
                                 method=method, n_ablations=n_ablations, seed=seed)
    return InfluenceRecorder(scorer, model_label(model, engine), sink, metadata_mode, background, raise_errors)


def _embedder(embedder: Any) -> Any:
    """A LlamaIndex HuggingFaceEmbedding is unwrapped to its SentenceTransformer (reused, not reloaded)."""
    from sentence_transformers import SentenceTransformer

    inner = getattr(embedder, "_model", None)
    return inner if isinstance(inner, SentenceTransformer) else embedder


# ---------------------------------------------------------------------------------------------- handlers
class GroguInfluenceHandler(BaseEventHandler):
    """Instrumentation handler: on every ``QueryEndEvent``, Influence Scores of the response's source
    nodes for the answer actually given, into ``metadata["influence"]`` and one record to ``sink``.

    Args:
        model: the target LLM (as for :class:`GroguRerank`: name/path, grogu Engine, (model, tokenizer)
            pair or HuggingFaceLLM), a ready ``grogu.influence.InfluenceScorer``, or the shared scoring
            service: its URL (``grogu serve``; its ``--embedder`` is used) or a ``grogu.RemoteInfluenceScorer``.
        embedder: sentence-embedding model F: 'all-minilm-l6-v2' (packaged, default), a path/hub id, a
            SentenceTransformer or a LlamaIndex HuggingFaceEmbedding (its model is reused).
        sink: None (Python logger), a logging.Logger, a JSONL file path, a list, an object with
            ``write(record)``, or a callable.
        background: in synchronous queries, compute in a worker thread instead of before ``query()``
            returns (``flush()`` waits).
        method: "exact" (2k + 1 generations; default), "ablation" (ContextCite-style estimate from
            ``n_ablations`` random ablations; no per-document answers in the record) or "auto"
            (ablation above 12 nodes when it is cheaper); forward-only, generating nothing since the
            answer is given: "leave_one_out_logprob" (drop of the answer's log-probability without each
            node, nats; k + 1 forward passes) or "contextcite" (ContextCite's LASSO weights from
            ``n_ablations`` masks, default 64). The record's ``method`` says which made it; forward-only
            records add ``logprobs`` (log P(answer | each scored context)) and have ``embedder`` None.
            See ``grogu.influence.InfluenceScorer`` and the README's "which method when".
        n_ablations, seed: the number of random ablations (default: 32 for "ablation"/"auto", 64 for
            "contextcite") and the seed of their masks.

    A failure is logged (warning) and recorded with an ``"error"`` field; it never breaks the query
    (LlamaIndex's dispatcher discards exceptions raised by event handlers anyway). To have failures
    raised, use :class:`GroguInfluenceCallbackHandler` with ``raise_errors=True``.
    """

    model: str = Field(description="Target LLM whose answers are compared.")
    _recorder: InfluenceRecorder = PrivateAttr()

    def __init__(self, model: Any = DEFAULT_MODEL, *, embedder: Any = "all-minilm-l6-v2",
                 sink: Any = None, metadata_mode: MetadataMode = MetadataMode.LLM, background: bool = False,
                 max_new_tokens: int = 64, template: Any = None, device: Optional[str] = None,
                 dtype: Optional[str] = None, method: str = "exact", n_ablations: Optional[int] = None,
                 seed: Optional[int] = 0) -> None:
        recorder = _build_recorder(model, embedder, sink, metadata_mode, background, False,
                                   max_new_tokens, template, device, dtype, method, n_ablations, seed)
        super().__init__(model=recorder.model)
        self._recorder = recorder

    @classmethod
    def class_name(cls) -> str:
        return "GroguInfluenceHandler"

    @property
    def recorder(self) -> InfluenceRecorder:
        return self._recorder

    @property
    def sink(self) -> Any:
        return self._recorder.sink

    @property
    def records(self) -> List[Dict[str, Any]]:
        """The records of an in-memory sink (AttributeError for other sinks)."""
        return self._recorder.sink.records

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, QueryEndEvent):
            self._recorder.record(event.query, event.response)

    def score_response(self, query: Any, response: Any) -> None:
        """Score a response by hand (e.g. a stream once it has been read)."""
        self._recorder.record(query, response)

    def flush(self, timeout: Optional[float] = None) -> None:
        self._recorder.flush(timeout)

    async def aflush(self) -> None:
        await self._recorder.aflush()


class GroguInfluenceCallbackHandler(BaseCallbackHandler):
    """The same influence logging for the legacy ``CallbackManager`` (on the end of each
    ``CBEventType.QUERY``). Takes the arguments of :class:`GroguInfluenceHandler`, plus
    ``raise_errors=True`` to re-raise a scoring or sink failure into the query (default: log and
    record it)."""

    def __init__(self, model: Any = DEFAULT_MODEL, **kwargs: Any) -> None:
        super().__init__(event_starts_to_ignore=[], event_ends_to_ignore=[])
        args = dict(embedder="all-minilm-l6-v2", sink=None, metadata_mode=MetadataMode.LLM, background=False,
                    raise_errors=False, max_new_tokens=64, template=None, device=None, dtype=None,
                    method="exact", n_ablations=None, seed=0)
        unknown = set(kwargs) - set(args)
        if unknown:
            raise TypeError(f"unexpected arguments: {sorted(unknown)}")
        args.update(kwargs)
        self.recorder = _build_recorder(model, **args)
        self._queries: Dict[str, str] = {}

    @property
    def sink(self) -> Any:
        return self.recorder.sink

    @property
    def records(self) -> List[Dict[str, Any]]:
        return self.recorder.sink.records

    def on_event_start(self, event_type: CBEventType, payload: Optional[Dict[str, Any]] = None,
                       event_id: str = "", parent_id: str = "", **kwargs: Any) -> str:
        if event_type == CBEventType.QUERY and payload and EventPayload.QUERY_STR in payload:
            self._queries[event_id] = payload[EventPayload.QUERY_STR]
        return event_id

    def on_event_end(self, event_type: CBEventType, payload: Optional[Dict[str, Any]] = None,
                     event_id: str = "", **kwargs: Any) -> None:
        if event_type != CBEventType.QUERY:
            return
        query = self._queries.pop(event_id, None)
        response = (payload or {}).get(EventPayload.RESPONSE)
        if query is not None and response is not None:
            self.recorder.record(query, response)

    def start_trace(self, trace_id: Optional[str] = None) -> None:
        pass

    def end_trace(self, trace_id: Optional[str] = None, trace_map: Optional[Dict[str, List[str]]] = None) -> None:
        pass

    def flush(self, timeout: Optional[float] = None) -> None:
        self.recorder.flush(timeout)

    async def aflush(self) -> None:
        await self.recorder.aflush()


__all__ = [
    "GroguInfluenceHandler", "GroguInfluenceCallbackHandler", "InfluenceRecorder",
    "LoggerSink", "JsonlSink", "MemorySink", "CallableSink", "as_sink",
]
