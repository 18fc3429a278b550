"""The replica's engine queue: every route's engine work goes through one fair scheduler, in slices.

A request becomes one or more :class:`Work` jobs. A job is a list of units (a context, a slice of
ΔSePer samples, an ACU item, an influence item...), each with a generation budget (its cost, counted in
answer tokens). One engine call takes units of the jobs that share the head job's settings, up to
``max_tokens`` of budget; a job with units left goes to the back of the queue. A cancelled request
(its awaiting task cancelled, e.g. the client went away) leaves the queue: its remaining slices are
never run. A job without units is answered at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Callable, Optional

from ...runtime import coalescer


@dataclasses.dataclass(eq=False)
class Work:
    """One request's engine work under one scorer's settings, as units (each scored in one engine
    call, with the generation budget ``costs[i]``); ``results`` holds one entry per unit done."""

    key: str
    scorer: Any
    units: list
    costs: list
    want: bool  # return_details / return_ablations
    run: Callable[[Any, list, bool], list]  # (scorer, units, want) -> one result per unit
    results: list = dataclasses.field(default_factory=list)
    future: Any = None


def split_parts(values: list, sizes: list[int]) -> list[list]:
    """``values`` cut into consecutive parts of ``sizes``."""
    out, start = [], 0
    for size in sizes:
        out.append(values[start : start + size])
        start += size
    return out


def run_call(picked: list[tuple[Work, list]]) -> list[Any]:
    """One engine call (on the worker thread): the units of jobs with the same settings together,
    results split back per job. When it fails, each job is retried alone, so only the failing request
    gets the error (returned in its slot)."""
    try:
        first = picked[0][0]
        want = any(job.want for job, _ in picked)
        flat = list(first.run(first.scorer, [u for _, units in picked for u in units], want))
        if len(flat) != sum(len(units) for _, units in picked):
            raise RuntimeError(
                f"an engine call returned {len(flat)} results for {sum(len(units) for _, units in picked)} units"
            )
        flat_iter = iter(flat)
        return [[next(flat_iter) for _ in units] for _, units in picked]
    except Exception as exc:  # noqa: BLE001 - isolate the failing request
        if len(picked) <= 1:
            return [exc] * len(picked)
    out: list[Any] = []
    for job, units in picked:
        try:
            out.append(list(job.run(job.scorer, units, job.want)))
        except Exception as single:  # noqa: BLE001
            out.append(single)
    return out


class Scheduler:
    """The replica's engine queue. Requests (jobs) wait in arrival order; each engine call takes the
    settings of the job at the head and gathers, from it and the jobs behind it with the same
    settings, units whose generation budget fits ``max_tokens`` (the head's first unit always), at
    most ``max_requests`` jobs. A job with units left goes to the back of the queue: a heavy request
    is scored a slice per turn, and the requests that arrived meanwhile get theirs in between. An idle
    replica waits ``wait_s`` for a call to fill."""

    def __init__(self, max_requests: int, max_tokens: int, wait_s: float, on_call: Callable[[int, int], None]) -> None:
        self.max_requests, self.max_tokens, self.wait_s, self.on_call = max_requests, max_tokens, wait_s, on_call
        self.queue: list[Work] = []
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None

    async def submit(self, job: Work) -> list[Any]:
        """The job's results, one per unit (an empty list at once for a job without units)."""
        if len(job.units) != len(job.costs):
            raise RuntimeError(f"{len(job.units)} units but {len(job.costs)} costs")
        if not job.units:
            return []
        loop = asyncio.get_running_loop()
        job.future = loop.create_future()
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop())
        self.queue.append(job)
        self._wake.set()
        return await job.future

    def _take(self) -> list[tuple[Work, list]]:
        head, budget, picked = self.queue[0], self.max_tokens, []
        for job in self.queue:
            if len(picked) >= self.max_requests or budget <= 0:
                break
            if job.key != head.key:
                continue
            start = n = len(job.results)
            while n < len(job.units) and (job.costs[n] <= budget or not picked and n == start):
                budget -= job.costs[n]
                n += 1
            if n > start:
                picked.append((job, job.units[start:n]))
        return picked

    async def _idle(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake.clear()
        await self._wake.wait()
        deadline = loop.time() + self.wait_s
        while len(self.queue) < self.max_requests and deadline > loop.time():
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break

    async def _loop(self) -> None:
        while True:
            self.queue = [job for job in self.queue if not job.future.done()]  # cancelled requests leave
            if not self.queue:
                await self._idle()
                continue
            picked = self._take()
            if not picked:  # cannot happen with units left; never spin on it
                head = self.queue.pop(0)
                head.future.set_exception(RuntimeError("the scheduler found no unit to run for a request"))
                continue
            self.on_call(
                len(picked), sum(job.costs[len(job.results) + i] for job, units in picked for i in range(len(units)))
            )
            try:
                outs = await asyncio.wrap_future(coalescer.submit(run_call, picked))
            except BaseException as exc:  # noqa: BLE001 - the loop must go on
                if isinstance(exc, asyncio.CancelledError):
                    raise
                outs = [exc] * len(picked)
            for (job, _), out in zip(picked, outs):
                if job in self.queue:
                    self.queue.remove(job)
                if job.future.done():
                    continue
                if isinstance(out, BaseException):
                    job.future.set_exception(out)
                    continue
                job.results.extend(out)
                if len(job.results) == len(job.units):
                    job.future.set_result(job.results)
                else:
                    self.queue.append(job)  # its next slice after the requests waiting now
