"""Decode steps kept as CUDA graphs from one batch to the next.

A CUDA graph replays the kernels of one decode step on the memory they used when it was captured. A
slot step (:class:`~.feeds.SlotFeed`) reads nothing back to the host, so it can be captured. For a graph
to serve later batches too, every tensor the step reads must outlive the batch. A :class:`StepArena`
holds them: each layer's keys and values, and the step's state (which slots each row sees, where it
ends, its position, its inputs), for ``rows`` rows of ``capacity`` slots.

- A batch of n rows is copied into the arena's first rows after its prefill. It decodes in the first b
  rows, b = :func:`bucket` (n), the next power of two. Rows n..b-1 are idle: fed as finished.
- Each bucket's step is captured once, after one eager step, and kept. A later batch of the same bucket
  and span replays it at once. All graphs share one memory pool (they never run at once).
- When the live rows fit a smaller bucket, they move to the first rows and that bucket's graph runs.
- Steps without drafts, greedy or sampled, keep the answers on the device too
  (:meth:`ArenaFeed.decode_on_device`): a step draws or chooses each row's token, records it with its
  entropy and log-probability, checks the stop tokens and feeds the token to the next step. The host
  reads back only which rows are alive, a step late, so the device always has the next step queued, and
  the answers once at the end. A sampled step's random numbers are counter-based
  (:mod:`.sampling`), so the graph holds the draw too.
- Arenas are kept per (span, step width, layer shapes, stop tokens). :func:`span_class` rounds the slots a batch
  needs (prompt plus answer) up by less than 256 slots or a quarter, so prompts of similar lengths share
  graphs, and attention reads that many masked slots more. The :data:`KEPT_ARENAS` most recently
  used arenas are kept; :meth:`KeptGraphs.release` lets all of them go (the engine calls it on
  out-of-memory).

On a CPU nothing is captured. ``Decoder.emulate_graphs`` runs this path there with eager steps over
the same buffers and spans, which is how the tests check its answers.
"""

from __future__ import annotations

import copy
import logging
from collections import OrderedDict
from typing import Any

import torch

from .feeds import SlotFeed
from .kvcache import ReservedLayer, attention_kind, slot_layers
from .prefill import PrefilledBatch
from .sampling import Sampling, sample_rows

logger = logging.getLogger(__name__)

#: arenas kept at once (each holds its KV buffers and its graphs), the least recently used dropped first
KEPT_ARENAS = 3


def bucket(n: int) -> int:
    """The rows a batch of ``n`` rows decodes in: the next power of two (1, 2, 4, 8, ...)."""
    if n < 1:
        raise ValueError(f"a batch has at least one row, got {n}")
    return 1 << (n - 1).bit_length()


def span_class(slots: int) -> int:
    """The slots an arena gives a batch that needs ``slots``: rounded up to a multiple of 256, or of
    an eighth of the power of two below it when that is more (over by less than 256 or a quarter)."""
    step = max(256, 1 << max(0, slots.bit_length() - 3))
    return -(-slots // step) * step


class StepArena:
    """The buffers of decode steps that outlive a batch (see the module docstring), shaped after
    ``layers`` (a prefilled batch's :class:`~.kvcache.ReservedLayer` s), and the graphs kept over them."""

    def __init__(
        self, cache: Any, rows: int, capacity: int, width: int, pad_token_id: int, stop_token_ids: list[int]
    ) -> None:
        layers = slot_layers(cache)
        dev = layers[0].device
        self.rows, self.capacity, self.width, self.pad_token_id = rows, capacity, width, pad_token_id
        bufs = [lay.buffers for lay in layers]
        self.keys = [k.new_zeros(rows, k.shape[1], capacity, k.shape[3]) for k, _ in bufs]
        self.values = [v.new_zeros(rows, v.shape[1], capacity, v.shape[3]) for _, v in bufs]
        self.seen = torch.ones(rows, capacity, dtype=torch.bool, device=dev)  # [rows, capacity]
        self.fill = torch.zeros(rows, dtype=torch.long, device=dev)  # [rows]: the first free slot
        self.last_pos = torch.zeros(rows, dtype=torch.long, device=dev)  # [rows]: the last cached position
        self.inputs = torch.full((rows, width + 2), pad_token_id, dtype=torch.long, device=dev)
        self.index = torch.zeros(rows, width, dtype=torch.long, device=dev)  # [rows, W]: slots written
        self.staging = torch.empty(rows, width + 2, dtype=torch.long, pin_memory=dev.type == "cuda")
        self.slots = torch.arange(capacity, device=dev)
        self.offsets = torch.arange(width, device=dev)
        # answers kept on the device (greedy steps without drafts): per row its tokens, entropies and
        # log-probabilities so far (the stop token last, if any), how many, and when it must stop
        self.tokens = torch.zeros(rows, capacity, dtype=torch.long, device=dev)
        self.ents = torch.zeros(rows, capacity, dtype=torch.float32, device=dev)
        self.lps = torch.zeros(rows, capacity, dtype=torch.float32, device=dev)
        self.count = torch.zeros(rows, dtype=torch.long, device=dev)
        self.max_new = torch.zeros((), dtype=torch.long, device=dev)
        self.stop_ids = torch.tensor(sorted(stop_token_ids), dtype=torch.long, device=dev)
        self.rng_keys = torch.zeros(rows, dtype=torch.long, device=dev)  # sampled: each row's key
        self.temperature = torch.ones((), dtype=torch.float32, device=dev)
        self.flags = torch.zeros(2, rows, dtype=torch.bool, pin_memory=dev.type == "cuda")  # alive, read back
        self.template = cache  # the cache object each bucket's copy is made from (its layers replaced)
        self.caches: dict[int, Any] = {}
        self.graphs: dict[tuple, tuple[Any, torch.Tensor]] = {}  # per (bucket, mode): graph, output
        self.warm: set[tuple] = set()  # (bucket, mode) that ran their eager step

    @staticmethod
    def key(cache: Any, width: int) -> tuple:
        """What an arena must match to take a batch: the span class, the step width, the layers' shapes."""
        layers = slot_layers(cache)
        shapes = tuple((*k.shape[1::2], *v.shape[1::2], k.dtype) for k, v in (lay.buffers for lay in layers))
        return span_class(min(lay.capacity for lay in layers)), width, shapes

    def cache(self, b: int) -> Any:
        """A cache whose layers are the arena's first ``b`` rows (made once per bucket)."""
        if b not in self.caches:
            cache = copy.copy(self.template)
            cache.layers = [
                ReservedLayer.of_buffers(k[:b], v[:b], self.capacity) for k, v in zip(self.keys, self.values)
            ]
            self.caches[b] = cache
        return self.caches[b]

    def idle(self, lo: int, hi: int) -> None:
        """Rows lo..hi-1 hold no answer: they see their own first slots, fed padding, marked finished."""
        self.seen[lo:hi] = True
        self.fill[lo:hi] = 0
        self.last_pos[lo:hi] = 0
        self.inputs[lo:hi] = self.pad_token_id
        self.inputs[lo:hi, -2:] = 0  # no drafts, not alive
        self.count[lo:hi] = 0

    def load(self, start: PrefilledBatch) -> int:
        """Copy a prefilled batch into the first rows; returns its bucket."""
        n, prompt = start.attention.shape
        for k, v, lay in zip(self.keys, self.values, slot_layers(start.cache)):
            k[:n, :, :prompt] = lay.buffers[0][:, :, :prompt]
            v[:n, :, :prompt] = lay.buffers[1][:, :, :prompt]
        self.seen[:n] = True
        self.seen[:n, :prompt] = start.attention.bool()  # a prompt's padding is never seen
        self.fill[:n] = prompt
        self.last_pos[:n] = start.last_pos
        self.count[:n] = 0
        b = bucket(n)
        self.idle(n, b)
        return b

    def move(self, keep: list[int], b: int) -> int:
        """Rows ``keep`` (of the first ``b``) become the first rows; returns their bucket."""
        m, idx = len(keep), torch.tensor(keep, device=self.fill.device)
        state = (self.seen, self.fill, self.last_pos, self.inputs, self.index, self.count, self.rng_keys)
        for t in (*self.keys, *self.values, *state, self.tokens, self.ents, self.lps):
            t[:m] = t[:b][idx]
        nb = bucket(m)
        self.idle(m, nb)
        return nb


class KeptGraphs:
    """The arenas of a decoder and the graphs captured over them (see the module docstring).

    Attributes:
        captured: graphs captured so far (diagnostics; may be reset).
        failed: the error of a capture that failed (None: none failed); later batches decode eagerly.
        moves: batches moved down to a smaller bucket (diagnostics).
    """

    def __init__(self) -> None:
        self.arenas: OrderedDict[tuple, StepArena] = OrderedDict()
        self.pool: Any = None
        self.captured = self.moves = 0
        self.failed: str | None = None

    def arena(self, start: PrefilledBatch, width: int, pad_token_id: int, stop_token_ids: list[int]) -> StepArena:
        """An arena for this batch: the kept one of its key with rows enough, else a new one (the old one
        of that key, and the least recently used beyond :data:`KEPT_ARENAS`, let go first)."""
        key = (*StepArena.key(start.cache, width), tuple(stop_token_ids))
        rows = bucket(start.attention.shape[0])
        arena = self.arenas.pop(key, None)
        if arena is None or arena.rows < rows:
            arena = None
            while len(self.arenas) >= KEPT_ARENAS:
                self.arenas.popitem(last=False)
            arena = StepArena(start.cache, rows, key[0], width, pad_token_id, stop_token_ids)
        self.arenas[key] = arena
        return arena

    def release(self) -> None:
        """Let every arena and graph go (their memory returns to the allocator)."""
        self.arenas.clear()
        self.pool = None

    def step(self, feed: "ArenaFeed") -> torch.Tensor:
        """One decode step of ``feed``: its bucket's graph replayed, captured after one eager step on
        a CUDA device, or an eager step over the whole span (a CPU, or after a failed capture)."""
        arena, b = feed.arena, (feed.b, feed.mode)
        if b in arena.graphs:
            graph, out = arena.graphs[b]
            graph.replay()
            return out
        if arena.fill.device.type != "cuda" or self.failed is not None or b not in arena.warm:
            arena.warm.add(b)
            return feed.compute()
        graph = torch.cuda.CUDAGraph()
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        try:
            graph.capture_begin(pool=self.pool, capture_error_mode="thread_local")
            try:
                out = feed.compute()
            finally:
                graph.capture_end()
        except Exception as exc:  # noqa: BLE001 - any capture error: decode on without graphs
            self.failed = f"{type(exc).__name__}: {exc}"
            logger.warning("grogu engine: CUDA graph capture failed (%s); decoding without graphs", exc)
            torch.cuda.current_stream(arena.fill.device).synchronize()
            return feed.compute()
        arena.graphs[b] = (graph, out)
        self.captured += 1
        graph.replay()
        return out


class ArenaFeed(SlotFeed):
    """A :class:`~.feeds.SlotFeed` over a :class:`StepArena`'s first rows: its steps are the arena's
    kept graphs (:meth:`KeptGraphs.step`), and finished rows leave it a bucket at a time."""

    def __init__(self, model: Any, start: PrefilledBatch, kept: KeptGraphs, arena: StepArena, chunk_rows: int) -> None:
        self.model, self.kept, self.arena, self.chunk_rows = model, kept, arena, chunk_rows
        self.width, self.pad_token_id, self.capacity = arena.width, arena.pad_token_id, arena.capacity
        self.slots, self.offsets = arena.slots, arena.offsets
        self.float_mask = attention_kind(model) == "eager"
        self.dtype = start.logits.dtype
        self.n = start.attention.shape[0]  # the rows holding answers
        self.mode = "host"  # the host keeps the answers; decode_on_device: "greedy" or "sampled"
        self.steps = 0  # steps run on the device by decode_on_device
        self.alive_fed: list[bool] = [False] * self.n
        self._view(arena.load(start))

    def _view(self, b: int) -> None:
        a = self.arena
        self.b = b
        self.cache = a.cache(b)
        self.layers = slot_layers(self.cache)
        self.seen, self.fill, self.last_pos = a.seen[:b], a.fill[:b], a.last_pos[:b]
        self.inputs, self.index = a.inputs[:b], a.index[:b]
        self._bind()

    def set_inputs(self, pending: list[int], drafts: list[list[int]], alive: list[bool]) -> None:
        w, pad, idle = self.width, self.pad_token_id, self.b - len(pending)
        rows = [[t, *d, *[pad] * (w - 1 - len(d)), len(d), int(a)] for t, d, a in zip(pending, drafts, alive)]
        rows += [[pad] * w + [0, 0]] * idle
        staging = self.arena.staging[: self.b]
        staging.numpy()[:] = rows  # pinned on a GPU: the copy below runs without blocking the host
        self.inputs.copy_(staging, non_blocking=True)
        self.alive_fed = list(alive)

    def step(self, limit: int | None = None) -> tuple[torch.Tensor, None]:
        """One step over the whole span (what a graph computes); the outcome of the rows with answers."""
        return self.kept.step(self)[: self.n], None

    def advanced(self, values: list[list[float]], alive_before: list[bool]) -> None:
        pass  # steps read the whole span: no host copy of the rows' ends is needed

    def compacts(self, live: int, rows: int) -> bool:
        return bucket(live) < self.b

    def select(self, keep: list[int]) -> None:
        self.kept.moves += 1
        self.n = len(keep)
        self.alive_fed = [self.alive_fed[j] for j in keep]
        self._view(self.arena.move(keep, self.b))

    def compute(self) -> torch.Tensor:
        """What a step computes, as captured: the slot step over the whole span, and in
        :meth:`decode_on_device` the draw (sampled) and the answers' bookkeeping."""
        packed, logits = SlotFeed.step(self, None)
        if self.mode == "sampled":
            self._draw(packed, logits)
        if self.mode != "host":
            self._record(packed)
        return packed

    def _draw(self, packed: torch.Tensor, logits: torch.Tensor) -> None:
        """Each alive row's token drawn (:func:`~.sampling.sample_rows`, its draw number the tokens it
        has), in place of the greedy choice in ``packed``, with its untempered log-probability."""
        a, r = self.arena, packed.shape[0]
        alive = self.inputs[:r, 2] > 0
        drawn = sample_rows(logits[:, 0], a.temperature, a.rng_keys[:r], a.count[:r], alive)
        packed[:, 0] = drawn[:, 0]
        packed[:, 2] = drawn[:, 1]

    def _record(self, packed: torch.Tensor) -> None:
        """Device-side bookkeeping of a greedy step without drafts (``packed``: [r, 4], the outcome of
        the first r rows): each alive row records its token, entropy and log-probability; a stop token
        or ``max_new`` tokens finish it; an alive row's token is its next input."""
        a, r = self.arena, packed.shape[0]
        inputs, count = self.inputs[:r], a.count[:r]
        alive = inputs[:, 2] > 0
        choice = packed[:, 0].long()
        at = count[:, None].clamp(max=a.capacity - 1)  # a finished row writes past its end, never read
        a.tokens[:r].scatter_(1, at, choice[:, None])
        a.ents[:r].scatter_(1, at, packed[:, 1:2].float())
        a.lps[:r].scatter_(1, at, packed[:, 2:3].float())
        count.add_(alive.long())
        stop = (choice[:, None] == a.stop_ids[None]).any(1)
        still = alive & ~stop & (count < a.max_new)
        inputs[:, 0].copy_(torch.where(still, choice, self.pad_token_id))
        inputs[:, 2].copy_(still.long())

    def _post(self, slot: int) -> Any:
        """Queue a copy of the rows' alive flags into ``arena.flags[slot]``; an event to wait for (GPU)."""
        flags = self.arena.flags[slot, : self.n]
        flags.copy_(self.inputs[: self.n, 2] > 0, non_blocking=True)
        if self.inputs.device.type != "cuda":
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def _read(self, slot: int, event: Any) -> list[bool]:
        if event is not None:
            event.synchronize()
        return self.arena.flags[slot, : self.n].tolist()

    def _answers(self, rows: list[int]) -> list[tuple[list[int], list[float], list[float]]]:
        """The records of arena rows ``rows`` (one synchronisation)."""
        a, idx = self.arena, torch.tensor(rows, device=self.inputs.device)
        count = a.count[idx]
        longest = max(1, int(count.max()))
        tokens, ents, lps = (t[idx, :longest].tolist() for t in (a.tokens, a.ents, a.lps))
        return [(t[:c], e[:c], p[:c]) for t, e, p, c in zip(tokens, ents, lps, count.tolist())]

    def decode_on_device(
        self, start: PrefilledBatch, max_new_tokens: int, sampling: Sampling | None = None
    ) -> list[tuple]:
        """Decoding without drafts, greedy or sampled, the answers kept on the device (see the module
        docstring), from the prefill's logits. Returns per row its tokens, entropies and
        log-probabilities, the stop token last if one ended it. At most one step runs past the last
        answer's end (its rows all finished: nothing of it is kept)."""
        a, dev = self.arena, self.inputs.device
        a.max_new.fill_(max_new_tokens)
        self.inputs[: self.n, 1:] = torch.tensor([0, 1], device=dev)  # no drafts, alive
        first = self.first(start.logits)
        self.mode = "greedy"
        if sampling is not None:
            self.mode = "sampled"
            a.temperature.fill_(sampling.temperature)
            a.rng_keys[: self.n] = torch.tensor(sampling.keys, dtype=torch.long, device=dev)
            self._draw(first, start.logits)
        self._record(first)
        order = list(range(self.n))  # the answer each of the first rows holds
        done: dict[int, tuple] = {}
        alive = self._read(0, self._post(0))  # after the first token
        slot, pending = 0, None
        if any(alive):
            self.kept.step(self)
            self.steps += 1
            slot, pending = 1, self._post(1)
        while any(alive):  # ``alive``: the flags before the queued step, whose own are in ``slot``
            live = [j for j, a in enumerate(alive) if a]
            if bucket(len(live)) < self.b:  # finished rows leave a bucket at a time
                finished = [j for j, a in enumerate(alive) if not a]
                done.update(zip((order[j] for j in finished), self._answers(finished)))
                order = [order[j] for j in live]
                self.select(live)
                pending = self._post(slot)  # the queued step's flags again, in the new order
            self.kept.step(self)  # the next step is queued before the host waits for the last one
            self.steps += 1
            queued = self._post(1 - slot)
            alive = self._read(slot, pending)
            slot, pending = 1 - slot, queued
        done.update(zip(order, self._answers(list(range(len(order))))))
        return [done[i] for i in range(len(done))]
