"""The two ways to feed a decode step (see :mod:`grogu.runtime.engine.decode`), and the device-side
reading of a step's logits.

- :class:`SlotFeed`: every cache layer is a :class:`~grogu.runtime.engine.kvcache.ReservedLayer`. Each
  row writes its step at its own slots, right after the tokens it kept, so a rejected draft is
  overwritten and rows may advance by different counts; a 4-D mask says which slots each fed position
  sees. Nothing here reads a number back to the host, so a step can be captured in a CUDA graph.
- :class:`AppendFeed`: any other cache (sliding-window, recurrent): rows of one length, one token a step,
  appended, with transformers' own masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .kvcache import attention_kind, forward_with_cache, slot_layers
from .prefill import PrefilledBatch
from .stats import entropy_logprob


@dataclass(frozen=True)
class Columns:
    """The named columns of a step of ``width`` fed positions: of its inputs ([rows, width + 2] long:
    the fed tokens, how many of them are drafts, whether the row is alive) and of its outcome
    ([rows, 3 * width + 1], :func:`step_outcome`: each position's greedy token, entropy and
    log-probability, then the drafts accepted). Each accessor returns a view of the tensor it is given."""

    width: int

    def fed(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs[:, : self.width]

    def drafted(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs[:, self.width]

    def alive(self, inputs: torch.Tensor) -> torch.Tensor:
        return inputs[:, self.width + 1]

    def choice(self, outcome: torch.Tensor, position: int = 0) -> torch.Tensor:
        return outcome[:, position]

    def entropy(self, outcome: torch.Tensor, position: int = 0) -> torch.Tensor:
        return outcome[:, self.width + position]

    def logprob(self, outcome: torch.Tensor, position: int = 0) -> torch.Tensor:
        return outcome[:, 2 * self.width + position]

    def accepted(self, outcome: torch.Tensor) -> torch.Tensor:
        return outcome[:, 3 * self.width]


class Feed(Protocol):
    """What the decode loop (:meth:`~grogu.runtime.engine.decode.Decoder.decode`) asks of a way to feed
    its steps. ``alive_fed``: the alive flags of the last inputs set."""

    width: int
    alive_fed: list[bool]

    def first(self, logits: torch.Tensor) -> torch.Tensor:
        """The outcome of the prefill's logits [rows, 1, vocab]: each row's first token."""

    def set_inputs(self, pending: list[int], drafts: list[list[int]], alive: list[bool]) -> None:
        """The next step's inputs: per row its pending token, its drafts, whether it is alive."""

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One step on the inputs set: (outcome [rows, 3W + 1], logits [rows, W, vocab]), on the device."""

    def advanced(self, values: list[list[float]], alive_before: list[bool]) -> None:
        """Told of a step's outcome as the host read it back (rows alive before the step)."""

    def compacts(self, live: int, rows: int) -> bool:
        """Whether the rows that finished leave the feed now (``live`` of ``rows`` still alive)."""

    def select(self, keep: list[int]) -> None:
        """Keep rows ``keep`` (in that order), the others finished."""


def step_outcome(
    logits: torch.Tensor,
    fed: torch.Tensor | None,
    drafted: torch.Tensor | None,
    chunk_rows: int,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Device-side reading of a step's logits [rows, W, vocab]: per row the greedy token of each position,
    its entropy and log-probability (float32), and how many of the drafted tokens (``fed[:, 1:]``, the
    first ``drafted[j]`` of them real) the model chose; packed as float64 [rows, 3W + 1] (exact for
    token ids) so that one copy brings it all to the host."""
    b, w, v = logits.shape
    flat = logits.reshape(b * w, v)
    choice = flat.argmax(-1)  # [rows * W]
    entropy, logp = entropy_logprob(flat, choice, chunk_rows)  # [rows * W] each
    choice = choice.view(b, w)
    if w > 1 and fed is not None:
        agree = (choice[:, :-1] == fed[:, 1:]) & (offsets[None, : w - 1] < drafted[:, None])  # [rows, W - 1]
        accepted = agree.long().cumprod(-1).sum(-1)  # [rows]
    else:
        accepted = torch.zeros(b, dtype=torch.long, device=logits.device)
    return torch.cat(
        [choice.double(), entropy.view(b, w).double(), logp.view(b, w).double(), accepted[:, None].double()], dim=1
    )


class SlotStep:
    """The slot step: one decode step over a slot cache, device work only (see the module docstring).
    Its tensors are set by a subclass: ``inputs`` ([rows, W + 2], :class:`Columns`), each row's filled
    slots ``fill`` and last position ``last_pos`` (the step advances both), the slots it sees
    ``seen`` [rows, capacity], the slots it writes ``index`` [rows, W], and the cache ``layers``."""

    model: Any
    cache: Any
    layers: list
    width: int
    cols: Columns
    chunk_rows: int
    capacity: int
    float_mask: bool
    dtype: torch.dtype
    seen: torch.Tensor
    fill: torch.Tensor
    last_pos: torch.Tensor
    inputs: torch.Tensor
    index: torch.Tensor
    slots: torch.Tensor
    offsets: torch.Tensor

    def _bind(self) -> None:
        for layer in self.layers:
            layer.write_index = self.index

    def first(self, logits: torch.Tensor) -> torch.Tensor:
        return step_outcome(logits, None, None, self.chunk_rows, self.offsets)

    def run_step(self, limit: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step on the current inputs (device work only); returns (packed outcome, logits).
        ``limit``: the slots attention reads (None: all, as a graph does)."""
        cols = self.cols
        ids, drafted, alive = cols.fed(self.inputs), cols.drafted(self.inputs), cols.alive(self.inputs)
        torch.add(self.fill[:, None], self.offsets[None], out=self.index)  # [rows, W]: the slots written
        positions = self.last_pos[:, None] + 1 + self.offsets[None]  # [rows, W]
        span = self.capacity if limit is None else limit
        for layer in self.layers:
            layer.limit = limit
        mask = (self.slots[None, None, :span] <= self.index[:, :, None]) & self.seen[:, None, :span]  # [rows, W, span]
        mask = mask[:, None]  # [rows, 1, W, span]
        if self.float_mask:
            mask = torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill_(
                ~mask, torch.finfo(self.dtype).min
            )
        logits = forward_with_cache(
            self.model, self.cache, input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
        ).logits  # [rows, W, vocab]
        packed = step_outcome(logits, ids, drafted, self.chunk_rows, self.offsets)
        advance = (cols.accepted(packed).long() + 1) * alive  # the pending token and the accepted drafts
        self.fill += advance
        self.last_pos += advance
        return packed, logits


class SlotFeed(SlotStep):
    """Decode steps over a slot cache (see the module docstring): the inputs of a step (token ids, the
    number of drafted tokens and whether the row is alive) in one device tensor the host writes; each
    row's filled slots and last position in device tensors that the step itself advances, followed on
    the host (``host_fill``) so that attention reads just past the fullest row."""

    def __init__(self, model: Any, start: PrefilledBatch, width: int, pad_token_id: int, chunk_rows: int) -> None:
        self.model, self.cache, self.width, self.chunk_rows = model, start.cache, width, chunk_rows
        self.layers = slot_layers(start.cache)
        rows, prompt = start.attention.shape
        dev = start.attention.device
        self.capacity = min(layer.capacity for layer in self.layers)
        self.seen = torch.ones(rows, self.capacity, dtype=torch.bool, device=dev)  # [rows, capacity]
        self.seen[:, :prompt] = start.attention.bool()  # a prompt's padding is never seen
        self.fill = torch.full((rows,), prompt, dtype=torch.long, device=dev)  # [rows]: the first free slot
        self.last_pos = start.last_pos.clone()  # [rows]: the position id of the last cached token
        self.inputs = torch.full((rows, width + 2), pad_token_id, dtype=torch.long, device=dev)
        self.index = torch.zeros(rows, width, dtype=torch.long, device=dev)  # [rows, W]: slots written
        self.slots = torch.arange(self.capacity, device=dev)
        self.offsets = torch.arange(width, device=dev)
        self.float_mask = attention_kind(model) == "eager"
        self.dtype = start.logits.dtype
        self.cols = Columns(width)
        self.host_fill = [prompt] * rows  # the host's copy of ``fill``, for the eager steps' read limit
        self.alive_fed: list[bool] = [False] * rows
        self.pad_token_id = pad_token_id
        self._bind()

    def set_inputs(self, pending: list[int], drafts: list[list[int]], alive: list[bool]) -> None:
        w, pad = self.width, self.pad_token_id
        rows = [[t, *d, *[pad] * (w - 1 - len(d)), len(d), int(a)] for t, d, a in zip(pending, drafts, alive)]
        self.inputs.copy_(torch.tensor(rows, dtype=torch.long))
        self.alive_fed = list(alive)

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step on the current inputs, attention reading just past the fullest row."""
        return self.run_step(min(self.capacity, max(self.host_fill) + self.width))

    def advanced(self, values: list[list[float]], alive_before: list[bool]) -> None:
        """The host's copy of ``fill`` follows the step just read back."""
        if any(alive_before):
            for j, v in enumerate(values):
                if alive_before[j]:
                    self.host_fill[j] += int(v[3 * self.width]) + 1  # the drafts accepted, then the pending token

    def compacts(self, live: int, rows: int) -> bool:
        """Whether finished rows leave the batch now (here: as soon as any row finishes)."""
        return True

    def select(self, keep: list[int]) -> None:
        idx = torch.tensor(keep, device=self.fill.device)
        for layer in self.layers:
            layer.batch_select_indices(idx)
        self.seen, self.fill, self.last_pos = self.seen[idx], self.fill[idx], self.last_pos[idx]
        self.inputs, self.index = self.inputs[idx], self.index[idx]
        self.host_fill = [self.host_fill[j] for j in keep]
        self.alive_fed = [self.alive_fed[j] for j in keep]
        self._bind()


class AppendFeed:
    """Decode steps over a cache of other layers (sliding-window, recurrent): rows of one length without
    padding, one token a step appended, transformers' own masks from a 2-D attention mask."""

    width = 1

    def __init__(self, model: Any, start: PrefilledBatch, pad_token_id: int, chunk_rows: int) -> None:
        self.model, self.cache, self.chunk_rows = model, start.cache, chunk_rows
        self.attention, self.last_pos = start.attention, start.last_pos.clone()
        self.inputs = torch.full((len(self.last_pos), 3), pad_token_id, dtype=torch.long, device=self.last_pos.device)
        self.offsets = torch.arange(1, device=self.last_pos.device)
        self.alive_fed: list[bool] = [False] * len(self.last_pos)

    def first(self, logits: torch.Tensor) -> torch.Tensor:
        return step_outcome(logits, None, None, self.chunk_rows, self.offsets)

    def set_inputs(self, pending: list[int], drafts: list[list[int]], alive: list[bool]) -> None:
        self.inputs.copy_(torch.tensor([[t, 0, int(a)] for t, a in zip(pending, alive)], dtype=torch.long))
        self.alive_fed = list(alive)

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.inputs[:, :1]
        self.attention = torch.cat([self.attention, torch.ones_like(self.attention[:, :1])], dim=1)
        logits = forward_with_cache(
            self.model,
            self.cache,
            input_ids=ids,
            attention_mask=self.attention,
            position_ids=self.last_pos[:, None] + 1,
            use_cache=True,
        ).logits  # [rows, 1, vocab]
        self.last_pos += 1
        return step_outcome(logits, None, None, self.chunk_rows, self.offsets), logits

    def advanced(self, values: list[list[float]], alive_before: list[bool]) -> None:
        pass

    def compacts(self, live: int, rows: int) -> bool:
        return True

    def select(self, keep: list[int]) -> None:
        idx = torch.tensor(keep, device=self.last_pos.device)
        self.cache.batch_select_indices(idx)
        self.attention, self.last_pos, self.inputs = self.attention[idx], self.last_pos[idx], self.inputs[idx]
        self.alive_fed = [self.alive_fed[j] for j in keep]
