"""The graph cache: the arenas a decoder keeps, the CUDA graphs captured over them, their memory
pools, what happens when a capture fails, and the counts of all of it (:class:`GraphStats`).

Pool lifetime, by construction: **each arena owns its pool, and the pool dies with it.** An arena
draws a fresh pool id when it is made; every graph captured over the arena goes into that pool and is
kept by the arena, never dropped alone; when the arena goes (evicted, replaced by a bigger one, its
capture failed, :meth:`KeptGraphs.release`), its graphs and its pool id go with it, and no capture
ever names that id again. So a capture names a pool that is either new or held by a live graph of
the same arena, never one whose last graph is gone (PyTorch frees a pool with its last graph, and a
capture into it then trips the caching allocator's ``use_count > 0`` assert).

A capture that fails is counted, its cause logged the first time it is seen, and its arena let go
after the batch (its steps run eagerly, counted); the next batch makes a new arena with a new pool
and tries again. After :data:`MAX_FAILURES` failures, decoding on the graphed path stays eager (each
step counted) until :meth:`KeptGraphs.release`, which starts afresh.

Arena memory is bounded by the engine's planner budget: the arenas kept besides the one in use hold
at most ``max_batch_tokens`` slots together (a batch's own arena holds bucket(rows) x span class
slots, which replace its prefill cache), and at most :data:`KEPT_ARENAS` are kept.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections import OrderedDict
from typing import Any, Callable

import torch

from ..prefill import PrefilledBatch
from .arena import StepArena, arena_key, bucket

logger = logging.getLogger(__name__)

#: arenas kept at once at most (each holds its KV buffers, its graphs and its pool), the least recently used let go first
KEPT_ARENAS = 4
#: failed captures after which the graphed path stays eager until ``release()``
MAX_FAILURES = 3


class CudaGraphs:
    """torch.cuda's graphs, in the interface the cache uses (the CPU stand-in overrides where its
    graphs and pools come from: :class:`~.standin.StandInGraphs`)."""

    def new_pool(self) -> Any:
        return torch.cuda.graph_pool_handle()

    def graph(self) -> Any:
        return torch.cuda.CUDAGraph()

    def capture(self, pool: Any, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """``fn`` captured into a graph in ``pool`` (on the current stream, which must not be the default one)."""
        graph = self.graph()
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            out = fn()
        except BaseException:
            with contextlib.suppress(Exception):
                graph.capture_end()
            raise
        graph.capture_end()
        return graph, out

    def synchronize(self, device: Any) -> None:
        torch.cuda.current_stream(device).synchronize()


@dataclasses.dataclass
class GraphStats:
    """What the graph cache did (counts since it was made or :meth:`reset`).

    Attributes:
        captured: graphs captured.
        replayed: steps run as a graph replay.
        failed: captures that failed.
        warmup_steps: eager steps run once per (arena, bucket, mode) before its capture.
        eager_steps: steps of the graphed path run eagerly because no graph could be had (a failed
            capture's batch, or captures off after too many failures, or no device to capture on).
        arenas_made, arenas_dropped: arenas made, and let go (evicted, replaced, failed, released).
        moves: batches moved down to a smaller bucket.
        last_error: the latest failure's cause (None: none).
    """

    captured: int = 0
    replayed: int = 0
    failed: int = 0
    warmup_steps: int = 0
    eager_steps: int = 0
    arenas_made: int = 0
    arenas_dropped: int = 0
    moves: int = 0
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, f.default)


class KeptGraphs:
    """The arenas of a decoder and the graphs captured over them (see the module docstring).

    Args:
        backend: what captures: :class:`CudaGraphs` (the default), or the CPU stand-in
            (:class:`~.standin.StandInGraphs`); None captures nothing (every step eager, counted).

    Attributes:
        arenas: the kept arenas by :func:`~.arena.arena_key`, the most recently used last.
        stats: the counts (:class:`GraphStats`).
        failures: failed captures since the last :meth:`release`.
    """

    def __init__(self, backend: Any = "cuda") -> None:
        self.backend = CudaGraphs() if backend == "cuda" else backend
        self.arenas: OrderedDict[tuple, StepArena] = OrderedDict()
        self.stats = GraphStats()
        self.failures = 0
        self._seen_errors: set[str] = set()

    @property
    def capturing(self) -> bool:
        """Whether a step without a graph may be captured now (a backend, and failures under the cap)."""
        return self.backend is not None and self.failures < MAX_FAILURES

    def arena(
        self, start: PrefilledBatch, width: int, pad_token_id: int, stop_token_ids: list[int], budget_slots: int
    ) -> StepArena:
        """An arena for this batch: the kept one of its key with rows enough, else a new one with a new
        pool. Arenas beyond :data:`KEPT_ARENAS` or ``budget_slots`` (the others' slots together) are let
        go, the least recently used first; so is the old arena of the key when a bigger one replaces it."""
        key = arena_key(start.cache, width, stop_token_ids)
        rows = bucket(start.attention.shape[0])
        arena = self.arenas.pop(key, None)
        if arena is None or arena.rows < rows or arena.broken:
            if arena is not None:
                self._drop(arena)
            while self.arenas and (
                len(self.arenas) >= KEPT_ARENAS or sum(a.slots_held for a in self.arenas.values()) > budget_slots
            ):
                self._drop(self.arenas.popitem(last=False)[1])
            arena = StepArena(start.cache, rows, key[0], width, pad_token_id, stop_token_ids)
            if self.backend is not None:
                arena.pool = self.backend.new_pool()
            self.stats.arenas_made += 1
        self.arenas[key] = arena
        return arena

    def _drop(self, arena: StepArena) -> None:
        arena.graphs.clear()  # its graphs, then its pool id: never named again
        arena.pool = None
        self.stats.arenas_dropped += 1

    def release(self) -> None:
        """Let every arena, graph and pool go (their memory returns to the allocator), and start afresh:
        the failures counted so far no longer keep captures off."""
        for arena in self.arenas.values():
            self._drop(arena)
        self.arenas.clear()
        self.failures = 0

    def step(self, arena: StepArena, key: tuple, compute: Callable[[], Any]) -> Any:
        """One decode step over ``arena`` for ``key`` (bucket, mode): its graph replayed; or, the first
        time, ``compute`` run eagerly (warm-up), then captured and replayed; or ``compute`` run eagerly
        where no graph can be had (counted)."""
        graph_out = arena.graphs.get(key)
        if graph_out is not None:
            graph, out = graph_out
            graph.replay()
            self.stats.replayed += 1
            return out
        if arena.broken or not self.capturing:
            self.stats.eager_steps += 1
            return compute()
        if key not in arena.warm:
            arena.warm.add(key)
            self.stats.warmup_steps += 1
            return compute()
        try:
            graph, out = self.backend.capture(arena.pool, compute)
        except Exception as exc:  # noqa: BLE001 - any capture error: this batch eager, a later one retries
            self._failed(arena, exc)
            self.stats.eager_steps += 1
            return compute()
        arena.graphs[key] = (graph, out)
        self.stats.captured += 1
        graph.replay()
        self.stats.replayed += 1
        return out

    def _failed(self, arena: StepArena, exc: Exception) -> None:
        cause = f"{type(exc).__name__}: {exc}"
        self.failures += 1
        self.stats.failed += 1
        self.stats.last_error = cause
        arena.broken = True  # this batch decodes on eagerly; the arena and its pool go before the next
        self.backend.synchronize(arena.fill.device)
        if cause not in self._seen_errors:
            self._seen_errors.add(cause)
            logger.warning("grogu engine: CUDA graph capture failed (%s); this batch decodes without graphs", cause)
        if self.failures >= MAX_FAILURES:
            logger.warning(
                "grogu engine: %d CUDA graph captures failed; decoding without graphs until release_graphs()",
                self.failures,
            )
