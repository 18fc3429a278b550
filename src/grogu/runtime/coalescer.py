"""Coalescing of concurrent requests into one engine batch, and the thread that runs engine work off
the caller's thread.

Each request is a list of jobs; the worker takes every request of a :class:`Coalescer` waiting at that
moment, runs all their jobs in one call of ``run_jobs`` and hands each request its slice of the
results. While a batch runs, new requests queue up and form the next batch, so N concurrent queries
cost about one batched engine pass instead of N. The event loop is never blocked: callers await a
future.

The worker. All engine work that grogu runs off the caller's thread (the async API of every scorer,
the integrations' background influence records) runs on one process-wide thread, ``grogu-worker``,
started on first use and then kept (it waits on a condition when idle). It is not a daemon: when
the interpreter exits, a hook that runs before finalisation (threading's exit hooks, where
``concurrent.futures`` stops its workers too) lets it finish the work already submitted, refuses new
work, joins it, and waits until its native thread is gone, i.e. until the C++ thread-local state
that torch and oneDNN keep for it has been destroyed. Before, each burst of requests started a
daemon thread that ran torch work; one still alive at exit was stopped by the interpreter in the
middle of its teardown (Python <= 3.13 ends such a thread with ``pthread_exit`` when it next takes
the GIL) while the main thread was destroying the same libraries' static state, and the process
sometimes aborted with "terminate called without an active exception" (SIGABRT, exit status 134)
after its work was done. One long-lived thread also keeps one set of torch's per-thread resources
(its OpenMP team, oneDNN caches) instead of a new set per burst. In a process forked from one that
used the worker, the worker starts afresh on first use.

Work running on the worker must not wait for other work on the worker (it runs one task at a time).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, Sequence

#: how long the exit hook waits for the worker's native thread to finish after it was joined
NATIVE_EXIT_TIMEOUT_S = 5.0


class _Worker:
    """One long-lived, non-daemon thread that runs submitted tasks one at a time, in order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tasks: deque[tuple[Callable[[], Any], Future]] = deque()
        self._thread: threading.Thread | None = None
        self._native_id: int | None = None
        self._closed = False
        self.busy_since: float | None = None  # monotonic time the running task started (None: idle)

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot run grogu engine work after interpreter shutdown has begun")
            self._tasks.append((lambda: fn(*args, **kwargs), future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="grogu-worker", daemon=False)
                self._thread.start()
            self._cond.notify()
        return future

    def _loop(self) -> None:
        self._native_id = threading.get_native_id()
        while True:
            with self._cond:
                while not self._tasks and not self._closed:
                    self._cond.wait()
                if not self._tasks:  # closed and drained
                    return
                task, future = self._tasks.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            self.busy_since = time.monotonic()  # the heartbeat: set and cleared by this thread only
            try:
                result = task()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self.busy_since = None
            del task, future

    def shutdown(self, timeout: float | None = NATIVE_EXIT_TIMEOUT_S) -> None:
        """Refuse new work, let the submitted work finish, join the thread and wait (up to ``timeout``
        seconds) until its native thread has exited."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is None or thread is threading.current_thread():
            return
        thread.join()
        if self._native_id is not None:
            _wait_native_exit(self._native_id, timeout)


def _wait_native_exit(native_id: int, timeout: float | None) -> None:
    """Wait until the native thread ``native_id`` of this process is gone. ``Thread.join`` returns
    when the Python side of a thread is done; the native thread still runs its C++ thread-local
    destructors afterwards. On Linux it is gone when /proc/self/task/<id> is; elsewhere: no wait."""
    path = f"/proc/self/task/{native_id}"
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/task"):
        return
    deadline = None if timeout is None else time.monotonic() + timeout
    while os.path.exists(path):
        if deadline is not None and time.monotonic() > deadline:
            return
        time.sleep(0.001)


_WORKER = _Worker()
_WORKER_LOCK = threading.Lock()


def submit(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """Run ``fn(*args, **kwargs)`` on the grogu worker thread; a :class:`concurrent.futures.Future`
    of its result. After interpreter shutdown has begun this raises a RuntimeError."""
    with _WORKER_LOCK:
        worker = _WORKER
    return worker.submit(fn, *args, **kwargs)


def busy_for() -> float:
    """Seconds the worker has spent on the task it runs now (0.0 when idle): the worker thread's own
    heartbeat, read by a service's health check. Engine work is submitted in bounded slices, so a
    task that runs far longer than one slice means the worker is stuck."""
    with _WORKER_LOCK:
        started = _WORKER.busy_since
    return 0.0 if started is None else max(0.0, time.monotonic() - started)


def shutdown() -> None:
    """Stop the worker as at interpreter exit: submitted work finishes, new work is refused (a
    RuntimeError). Called automatically at exit; call it yourself only when tearing grogu down."""
    with _WORKER_LOCK:
        worker = _WORKER
    worker.shutdown()


def _after_fork_in_child() -> None:
    # the worker thread does not exist in a forked child: start a new one on first use
    global _WORKER, _WORKER_LOCK
    _WORKER_LOCK = threading.Lock()
    _WORKER = _Worker()


threading._register_atexit(shutdown)  # runs before the interpreter finalises (as concurrent.futures does)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Coalescer:
    """Runs ``run_jobs(all_jobs) -> results`` (one result per job) for batches of requests, on the
    grogu worker thread.

    ``wait_s`` is how long the worker waits after the first request for others to join it.
    If a combined batch fails, each request is retried alone so one bad request cannot fail others.
    A request cancelled before its batch starts (e.g. its awaiting task was cancelled) is skipped.
    """

    def __init__(self, run_jobs: Callable[[list[Any]], list[Any]], wait_s: float = 0.005) -> None:
        self._run_jobs = run_jobs
        self._wait_s = wait_s
        self._pending: list[tuple[list[Any], Future]] = []
        self._lock = threading.Lock()
        self._scheduled = False
        self._first_at = 0.0
        self.batches_run = 0

    def submit(self, jobs: Sequence[Any]) -> Future:
        future: Future = Future()
        with self._lock:
            self._pending.append((list(jobs), future))
            schedule, self._scheduled = not self._scheduled, True
            if schedule:
                self._first_at = time.monotonic()
        if schedule:
            try:
                submit(self._drain)
            except RuntimeError as exc:  # interpreter shutdown: fail what is waiting, do not hang
                with self._lock:
                    batch, self._pending, self._scheduled = self._pending, [], False
                for _, f in batch:
                    if f.set_running_or_notify_cancel():
                        f.set_exception(exc)
        return future

    async def run(self, jobs: Sequence[Any]) -> list[Any]:
        """Await the results of ``jobs`` (batched with whatever else is waiting)."""
        return await asyncio.wrap_future(self.submit(jobs))

    def _drain(self) -> None:
        """One batch: every request waiting once ``wait_s`` has passed since the first of them."""
        delay = self._first_at + self._wait_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        with self._lock:
            batch, self._pending, self._scheduled = self._pending, [], False
        batch = [(jobs, f) for jobs, f in batch if f.set_running_or_notify_cancel()]
        if batch:
            self._execute(batch)

    def _execute(self, batch: list[tuple[list[Any], Future]]) -> None:
        self.batches_run += 1
        try:
            results = self._run_jobs([job for jobs, _ in batch for job in jobs])
            if len(results) != sum(len(jobs) for jobs, _ in batch):
                raise RuntimeError(
                    f"run_jobs returned {len(results)} results for {sum(len(jobs) for jobs, _ in batch)} jobs"
                )
        except BaseException as exc:  # noqa: BLE001 - isolate the failing request
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            for item in batch:
                self._execute([item])
            return
        start = 0
        for jobs, future in batch:
            future.set_result(results[start : start + len(jobs)])
            start += len(jobs)
