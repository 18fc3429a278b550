"""Arena memory: the buffers decode steps read and write that outlive a batch, so that a CUDA graph
captured over them serves later batches.

A :class:`StepArena` holds, for ``rows`` rows of ``capacity`` slots, each layer's keys and values and
the step's state (which slots each row sees, where it ends, its position, its inputs), and the
answers kept on the device (tokens, entropies, log-probabilities). It holds no tensor of any batch:
a batch is copied in after its prefill (:meth:`StepArena.load`), and the cache object each bucket
decodes through is a shallow copy of the prefill's, its layers replaced by views of the arena.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ..feeds import Columns
from ..kvcache import ReservedLayer, slot_layers
from ..prefill import PrefilledBatch


def bucket(n: int) -> int:
    """The rows a batch of ``n`` rows decodes in: the next power of two (1, 2, 4, 8, ...)."""
    if n < 1:
        raise ValueError(f"a batch has at least one row, got {n}")
    return 1 << (n - 1).bit_length()


#: the smallest span class: an arena has at least this many slots a row
MIN_SPAN = 256


def span_class(slots: int) -> int:
    """The slots an arena gives a batch that needs ``slots``: the smallest of 256 x 2^i and
    384 x 2^i (two sizes an octave: 256, 384, 512, 768, 1024, 1536, ...) that holds them. Over by less
    than half, so attention reads at most that many masked slots more; 13 classes up to 16,384 slots."""
    if slots < 1:
        raise ValueError(f"a batch needs at least one slot, got {slots}")
    size = MIN_SPAN
    while size < slots:
        size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
    return size


def arena_key(cache: Any, width: int, stop_token_ids: list[int]) -> tuple:
    """What an arena must match to take a batch: the span class, the step width, the layers' shapes
    and dtype, the stop tokens (the on-device loop checks them in the graph)."""
    layers = slot_layers(cache)
    shapes = tuple((*k.shape[1::2], *v.shape[1::2], k.dtype) for k, v in (lay.buffers for lay in layers))
    return span_class(min(lay.capacity for lay in layers)), width, shapes, tuple(stop_token_ids)


class StepArena:
    """Decode buffers for ``rows`` rows of ``capacity`` slots, shaped after ``cache``'s layers (a
    prefilled batch's :class:`~..kvcache.ReservedLayer` s), which it does not keep.

    Attributes:
        cols: the named columns of ``inputs`` and of a step's outcome (:class:`~..feeds.Columns`).
        graphs, warm, pool, broken: the graph cache's (:class:`~.cache.KeptGraphs`) per arena: the graphs
            captured over it per (bucket, mode), the (bucket, mode) that ran their warm-up step, its
            graph memory pool, and whether a capture over it failed (it is then let go).
    """

    def __init__(
        self, cache: Any, rows: int, capacity: int, width: int, pad_token_id: int, stop_token_ids: list[int]
    ) -> None:
        layers = slot_layers(cache)
        dev = layers[0].device
        self.rows, self.capacity, self.width, self.pad_token_id = rows, capacity, width, pad_token_id
        self.cols = Columns(width)
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
        # answers kept on the device (steps without drafts): per row its tokens, entropies and
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
        self._template = copy.copy(cache)  # the cache's type and settings, none of its layers
        self._template.layers = []
        self.caches: dict[int, Any] = {}
        self.graphs: dict[tuple, tuple[Any, Any]] = {}
        self.warm: set[tuple] = set()
        self.pool: Any = None
        self.broken = False

    @property
    def slots_held(self) -> int:
        """Rows x capacity: what the arena's KV buffers hold, in slots (a planner's tokens)."""
        return self.rows * self.capacity

    def cache(self, b: int) -> Any:
        """A cache whose layers are the arena's first ``b`` rows (made once per bucket)."""
        if b not in self.caches:
            cache = copy.copy(self._template)
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
        self.cols.drafted(self.inputs[lo:hi]).zero_()
        self.cols.alive(self.inputs[lo:hi]).zero_()
        self.count[lo:hi] = 0

    def load(self, start: PrefilledBatch) -> int:
        """Copy a prefilled batch into the first rows; returns its bucket. The batch's cache is then let
        go (``start.cache`` None): the arena holds its keys and values from here on."""
        n, prompt = start.attention.shape
        for k, v, lay in zip(self.keys, self.values, slot_layers(start.cache)):
            k[:n, :, :prompt] = lay.buffers[0][:, :, :prompt]
            v[:n, :, :prompt] = lay.buffers[1][:, :, :prompt]
        start.cache = None
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
