"""Influence records: one record schema and one recorder for every framework integration.

After a RAG query has answered, :class:`InfluenceRecorder` computes each document's Influence Score
on that answer (:class:`grogu.metrics.influence.InfluenceScorer`, or the service's
:class:`grogu.RemoteInfluenceScorer`), times it, builds one record and writes it to every sink
(:mod:`grogu.observe.sinks`). The LlamaIndex and LangChain integrations only read their framework's query,
answer and documents into an :class:`AnsweredQuery`; so one log pipeline reads the records of both.
The record's schema (every field) is documented in :mod:`grogu.observe.influence_record`; its names are
importable from here too.

Where the work runs (:meth:`InfluenceRecorder.record`): inside a running event loop, as a task that
does not block the loop (``await aflush()`` waits); else with ``background=True`` on grogu's worker
thread (:mod:`grogu.runtime.coalescer`; ``flush()`` waits); else before ``record`` returns. Under
``on_error="raise"`` the work never becomes a loop task, so that a failure reaches the caller.
A failure is always logged (warning) and written as a record with ``error`` set; under
``on_error="raise"`` it is then raised (from ``flush()`` for background work).

With OpenTelemetry installed (``grogu[otel]``), each scoring is also a ``grogu.metrics.influence`` span carrying
the whole record, a child of the span current when the query was recorded, which gets a
``grogu_influence`` event (:mod:`grogu.observe.tracing`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

from ..runtime import coalescer
from . import tracing
from .influence_record import (
    CONTEXT_FIELDS,
    DOCUMENT_FIELDS,
    EVENT,
    AnsweredQuery,
    check_on_error,
)
from .sinks import Record, as_sinks, to_json


class InfluenceRecorder:
    """Scores :class:`AnsweredQuery` s, builds their records and writes them to the sinks.

    Args:
        scorer: an ``InfluenceScorer`` or ``RemoteInfluenceScorer`` (see
            :func:`grogu.rerank.factory.build_influence_scorer`).
        model: the target LLM's name for the records.
        sinks: sink specs (:func:`grogu.observe.sinks.as_sinks`); None logs each record on ``logger``.
        framework: the ``framework`` field of the records.
        on_error: "raise" or "record" (see the module docstring; "passthrough" means "record").
        background: score synchronous calls on grogu's worker thread.
        logger: where failures (and, with ``sinks=None``, records) are logged.
    """

    def __init__(
        self,
        scorer: Any,
        model: str,
        sinks: Any = None,
        *,
        framework: str,
        on_error: str = "record",
        background: bool = False,
        logger: logging.Logger | str | None = None,
    ) -> None:
        self.scorer, self.model, self.framework = scorer, model, framework
        self.logger = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger or __name__)
        self.sinks = as_sinks(sinks, self.logger)
        self.on_error = check_on_error(on_error)
        self.background = bool(background)
        self._lock = threading.Lock()
        self._pending: set[Any] = set()
        self._failed: list[BaseException] = []

    @property
    def raise_errors(self) -> bool:
        return self.on_error == "raise"

    def __repr__(self) -> str:
        return f"InfluenceRecorder(model={self.model!r}, sinks={self.sinks!r}, on_error={self.on_error!r})"

    # ------------------------------------------------------------------ entry points
    def record(self, job: AnsweredQuery) -> None:
        """Score ``job`` and write its record: as an event-loop task, on the worker thread or now
        (see the module docstring)."""
        if job.trace_context is None:  # the query's span stays the parent on another thread or later
            job.trace_context = tracing.current_context()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None and not self.raise_errors:
            self._track(loop.create_task(self._kept(self.arun(job))))
        elif self.background:
            self._track(coalescer.submit(self._kept_sync, job))
        else:
            self.run(job)

    def _kept_sync(self, job: AnsweredQuery) -> Record:
        try:
            return self.run(job)
        except Exception as exc:  # kept for flush() before the future is done
            with self._lock:
                self._failed.append(exc)
            raise

    async def _kept(self, work: Any) -> Record:
        try:
            return await work
        except Exception as exc:  # kept for aflush()
            with self._lock:
                self._failed.append(exc)
            raise

    def run(self, job: AnsweredQuery) -> Record:
        """Score ``job`` here and now; its record (written to the sinks)."""
        with tracing.influence_span(job.trace_context) as span:
            start = time.perf_counter()
            try:
                result = self._score(job)
            except Exception as exc:  # noqa: BLE001 - on_error decides
                return self._fail(job, exc, time.perf_counter() - start, span)
            return self._deliver(job, result, time.perf_counter() - start, span)

    async def arun(self, job: AnsweredQuery) -> Record:
        """Async :meth:`run`: the scoring runs off the event loop (``scorer.ascore``)."""
        with tracing.influence_span(job.trace_context) as span:
            start = time.perf_counter()
            try:
                result = None
                if job.documents or job.answer is None:
                    result = await self.scorer.ascore(job.query, job.documents, answer=job.answer)
            except asyncio.CancelledError:
                self.logger.warning(
                    "grogu influence for query %r was cancelled (the event loop closed first?): "
                    "await aflush() before leaving the loop",
                    job.query,
                )
                raise
            except Exception as exc:  # noqa: BLE001 - on_error decides
                return self._fail(job, exc, time.perf_counter() - start, span)
            return self._deliver(job, result, time.perf_counter() - start, span)

    def _score(self, job: AnsweredQuery) -> Any:
        if not job.documents and job.answer is not None:  # nothing to score
            return None
        return self.scorer.score(job.query, job.documents, answer=job.answer)

    # ------------------------------------------------------------------ records
    def build_record(self, job: AnsweredQuery, result: Any, elapsed: float, error: str | None = None) -> Record:
        """The record of ``job`` from its InfluenceResult (None: failed, or no documents)."""
        failed = error is not None
        record: Record = {
            "event": EVENT,
            "framework": self.framework,
            "created_at": datetime.now(timezone.utc).isoformat(),
            "elapsed_s": round(elapsed, 4),
        }
        record.update({k: job.context.get(k) for k in CONTEXT_FIELDS})
        record.update(
            {
                "query": job.query,
                "answer": result.answer if result is not None else job.answer,
                "answer_source": job.answer_source,
                "model": self.model,
                "embedder": result.embedder if result is not None else None,
                "method": result.method if result is not None else self.scorer.method,
                "influence": None if failed else [float(s) for s in result.scores] if result is not None else [],
                "logprobs": result.forward.logprobs if result is not None and result.forward is not None else None,
                "documents": _documents(job, result),
                "error": error,
            }
        )
        return record

    def _deliver(self, job: AnsweredQuery, result: Any, elapsed: float, span: Any = None) -> Record:
        if result is not None and job.on_result is not None:
            job.on_result(result)
        record = self.build_record(job, result, elapsed)
        if span is not None:
            span.finish(record)
        self.write(record, job)
        return record

    def _fail(self, job: AnsweredQuery, exc: Exception, elapsed: float, span: Any = None) -> Record:
        error = f"{type(exc).__name__}: {exc}"
        self.logger.warning("grogu influence failed for query %r: %s", job.query, error, exc_info=exc)
        record = self.build_record(job, None, elapsed, error)
        if span is not None:
            span.finish(record)
        self.write(record, job)
        if self.raise_errors:
            raise exc
        return record

    def write(self, record: Record, job: AnsweredQuery | None = None) -> None:
        """Write ``record`` to every sink, then ``job.on_record``. A failing sink raises under
        on_error="raise", else it is logged (with the record) and the other sinks still get it."""
        for sink in self.sinks:
            try:
                sink.write(record)
            except Exception as exc:  # noqa: BLE001 - on_error decides
                if self.raise_errors:
                    raise
                self.logger.error(
                    "grogu influence: sink %r failed (%s: %s); record: %s",
                    sink,
                    type(exc).__name__,
                    exc,
                    to_json(record),
                )
        if job is not None and job.on_record is not None:
            job.on_record(record)

    # ------------------------------------------------------------------ waiting
    def _track(self, pending: Any) -> None:
        with self._lock:
            self._pending.add(pending)
        pending.add_done_callback(self._settle)

    def _settle(self, pending: Any) -> None:
        if not pending.cancelled():
            pending.exception()  # seen: the failure is raised by flush() / aflush()
        with self._lock:
            self._pending.discard(pending)

    def _snapshot(self) -> list[Any]:
        with self._lock:
            return list(self._pending)

    def _raise_failed(self) -> None:
        with self._lock:
            failed, self._failed = self._failed, []
        if failed:
            raise failed[0]

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the records computed on the worker thread; raise the first failure of that work
        not raised yet (on_error="raise"), or TimeoutError after ``timeout`` seconds. Work started
        inside an event loop needs :meth:`aflush`."""
        pending = self._snapshot()
        if any(isinstance(p, asyncio.Future) for p in pending):
            raise RuntimeError("influence scores are still being computed in an event loop: await aflush()")
        _, not_done = concurrent.futures.wait(pending, timeout=timeout)
        if not_done:
            raise TimeoutError(f"{len(not_done)} influence records still pending after {timeout} s")
        self._raise_failed()

    async def aflush(self) -> None:
        """Wait for every pending record (event-loop tasks and worker-thread work); raise the first
        failure not raised yet."""
        while True:
            pending = self._snapshot()
            if not pending:
                break
            await asyncio.gather(
                *(p if isinstance(p, asyncio.Future) else asyncio.wrap_future(p) for p in pending),
                return_exceptions=True,
            )
        self._raise_failed()


def _documents(job: AnsweredQuery, result: Any) -> list[dict[str, Any]]:
    """The record's documents: the framework's fields plus each document's scores and answers."""
    scores = result.scores if result is not None else None
    singles = result.single_answers if result is not None and result.single_answers else None
    loos = result.leave_one_out_answers if result is not None and result.leave_one_out_answers else None
    docs = []
    for i, row in enumerate(job.fields):
        doc = dict.fromkeys(DOCUMENT_FIELDS)
        doc.update(row)
        doc.update(
            index=i,
            influence=float(scores[i]) if scores else None,
            single_answer=singles[i] if singles else None,
            leave_one_out_answer=loos[i] if loos else None,
        )
        docs.append(doc)
    return docs


__all__ = ["InfluenceRecorder"]
