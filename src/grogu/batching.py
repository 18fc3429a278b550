"""Coalescing of concurrent requests into one engine batch, for async callers.

Each request is a list of jobs; a single worker thread takes every request waiting at that moment,
runs all their jobs in one call of ``run_jobs`` and hands each request its slice of the results.
While a batch runs, new requests queue up and form the next batch, so N concurrent queries cost about
one batched engine pass instead of N. The event loop is never blocked: callers await a future.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from typing import Any, Callable, Sequence


class Coalescer:
    """Runs ``run_jobs(all_jobs) -> results`` (one result per job) for batches of requests.

    ``wait_s`` is how long the worker waits after the first request for others to join it.
    If a combined batch fails, each request is retried alone so one bad request cannot fail others.
    """

    def __init__(self, run_jobs: Callable[[list[Any]], list[Any]], wait_s: float = 0.005) -> None:
        self._run_jobs = run_jobs
        self._wait_s = wait_s
        self._pending: list[tuple[list[Any], Future]] = []
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self.batches_run = 0

    def submit(self, jobs: Sequence[Any]) -> Future:
        future: Future = Future()
        with self._lock:
            self._pending.append((list(jobs), future))
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name="grogu-coalescer", daemon=True)
                self._worker.start()
        return future

    async def run(self, jobs: Sequence[Any]) -> list[Any]:
        """Await the results of ``jobs`` (batched with whatever else is waiting)."""
        return await asyncio.wrap_future(self.submit(jobs))

    def _drain(self) -> None:
        while True:
            time.sleep(self._wait_s)
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:
                    self._worker = None
                    return
            self._execute(batch)

    def _execute(self, batch: list[tuple[list[Any], Future]]) -> None:
        self.batches_run += 1
        try:
            results = self._run_jobs([job for jobs, _ in batch for job in jobs])
        except BaseException as exc:  # noqa: BLE001 - isolate the failing request
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            for item in batch:
                self._execute([item])
            return
        start = 0
        for jobs, future in batch:
            future.set_result(results[start:start + len(jobs)])
            start += len(jobs)
