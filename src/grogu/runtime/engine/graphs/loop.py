"""The decode loop over an arena: :class:`ArenaFeed` feeds the decode loop's steps
(:class:`~..feeds.Feed`) from a :class:`~.arena.StepArena`'s first rows, each step a graph of the
cache (:class:`~.cache.KeptGraphs`), and runs steps without drafts entirely on the device
(:meth:`ArenaFeed.decode_on_device`).

- A batch of n rows decodes in the arena's first b rows, b = bucket(n); rows n..b-1 are idle (fed as
  finished). When the live rows fit a smaller bucket, they move to the first rows and that bucket's
  graph runs.
- A step computes over the arena's whole span (what a graph must: its shapes are fixed), so the host
  keeps no copy of the rows' ends.
- Without drafts, greedy or sampled, a step also draws or chooses each row's token, records it with its
  entropy and log-probability, checks the stop tokens and feeds the token to the next step. The host
  reads back only which rows are alive, a step late, so the device always has the next step queued,
  and the answers once at the end. A sampled step's random numbers are counter-based
  (:mod:`..sampling`), so the graph holds the draw too.
"""

from __future__ import annotations

from typing import Any

import torch

from ..feeds import SlotStep
from ..kvcache import attention_kind, slot_layers
from ..prefill import PrefilledBatch
from ..sampling import Sampling, sample_rows
from .arena import StepArena, bucket
from .cache import KeptGraphs


class ArenaFeed:
    """A :class:`~..feeds.Feed` over an arena's first rows (see the module docstring): its steps are
    the arena's kept graphs, and finished rows leave it a bucket at a time.

    Attributes:
        mode: 'host' (the host keeps the answers: steps with drafts), or in :meth:`decode_on_device`
            'greedy' or 'sampled'.
        steps: steps run on the device by :meth:`decode_on_device`.
    """

    def __init__(self, model: Any, start: PrefilledBatch, kept: KeptGraphs, arena: StepArena, chunk_rows: int) -> None:
        self.kept, self.arena = kept, arena
        self.width, self.cols = arena.width, arena.cols
        self.n = start.attention.shape[0]  # the rows holding answers
        self.mode = "host"
        self.steps = 0
        self.alive_fed: list[bool] = [False] * self.n
        self._step = _SpanStep(model, arena, start.logits.dtype, chunk_rows)
        self._view(arena.load(start))

    def _view(self, b: int) -> None:
        self.b = b
        self._step.view(b)

    # ------------------------------------------------------------------ the Feed protocol
    def first(self, logits: torch.Tensor) -> torch.Tensor:
        return self._step.first(logits)

    def set_inputs(self, pending: list[int], drafts: list[list[int]], alive: list[bool]) -> None:
        w, pad, idle = self.width, self.arena.pad_token_id, self.b - len(pending)
        rows = [[t, *d, *[pad] * (w - 1 - len(d)), len(d), int(a)] for t, d, a in zip(pending, drafts, alive)]
        rows += [[pad] * w + [0, 0]] * idle
        staging = self.arena.staging[: self.b]
        staging.numpy()[:] = rows  # pinned on a GPU: the copy below runs without blocking the host
        self.arena.inputs[: self.b].copy_(staging, non_blocking=True)
        self.alive_fed = list(alive)

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One step (the bucket's graph): the outcome and logits of the rows holding answers."""
        packed, logits = self._run()
        return packed[: self.n], logits[: self.n]

    def advanced(self, values: list[list[float]], alive_before: list[bool]) -> None:
        """Nothing to follow on the host: a step reads the arena's whole span."""

    def compacts(self, live: int, rows: int) -> bool:
        return bucket(live) < self.b

    def select(self, keep: list[int]) -> None:
        self.kept.stats.moves += 1
        self.n = len(keep)
        self.alive_fed = [self.alive_fed[j] for j in keep]
        self._view(self.arena.move(keep, self.b))

    # ------------------------------------------------------------------ one step, as captured
    def _run(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.kept.step(self.arena, (self.b, self.mode), self._compute)

    def _compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        """What a step computes, as captured: the slot step over the whole span, and in
        :meth:`decode_on_device` the draw (sampled) and the answers' bookkeeping."""
        packed, logits = self._step.run_step(None)
        if self.mode == "sampled":
            self._draw(packed, logits)
        if self.mode != "host":
            self._record(packed)
        return packed, logits

    def _draw(self, packed: torch.Tensor, logits: torch.Tensor) -> None:
        """Each alive row's token drawn (:func:`~..sampling.sample_rows`, its draw number the tokens it
        has), in place of the greedy choice in ``packed``, with its untempered log-probability."""
        a, cols, r = self.arena, self.cols, packed.shape[0]
        alive = cols.alive(a.inputs[:r]) > 0
        drawn = sample_rows(logits[:, 0], a.temperature, a.rng_keys[:r], a.count[:r], alive)
        cols.choice(packed).copy_(drawn[:, 0])
        cols.logprob(packed).copy_(drawn[:, 1])

    def _record(self, packed: torch.Tensor) -> None:
        """Device-side bookkeeping of a step without drafts (``packed``: the outcome of the first r
        rows): each alive row records its token, entropy and log-probability; a stop token or
        ``max_new`` tokens finish it; an alive row's token is its next input."""
        a, cols, r = self.arena, self.cols, packed.shape[0]
        inputs, count = a.inputs[:r], a.count[:r]
        alive = cols.alive(inputs) > 0
        choice = cols.choice(packed).long()
        at = count[:, None].clamp(max=a.capacity - 1)  # a finished row writes past its end, never read
        a.tokens[:r].scatter_(1, at, choice[:, None])
        a.ents[:r].scatter_(1, at, cols.entropy(packed)[:, None].float())
        a.lps[:r].scatter_(1, at, cols.logprob(packed)[:, None].float())
        count.add_(alive.long())
        stop = (choice[:, None] == a.stop_ids[None]).any(1)
        still = alive & ~stop & (count < a.max_new)
        cols.fed(inputs)[:, 0].copy_(torch.where(still, choice, a.pad_token_id))
        cols.alive(inputs).copy_(still.long())

    # ------------------------------------------------------------------ the loop on the device
    def _post(self, slot: int) -> Any:
        """Queue a copy of the rows' alive flags into ``arena.flags[slot]``; an event to wait for (GPU)."""
        a = self.arena
        flags = a.flags[slot, : self.n]
        flags.copy_(self.cols.alive(a.inputs[: self.n]) > 0, non_blocking=True)
        if a.inputs.device.type != "cuda":
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
        a, idx = self.arena, torch.tensor(rows, device=self.arena.inputs.device)
        count = a.count[idx]
        longest = max(1, int(count.max()))
        tokens, ents, lps = (t[idx, :longest].tolist() for t in (a.tokens, a.ents, a.lps))
        return [(t[:c], e[:c], p[:c]) for t, e, p, c in zip(tokens, ents, lps, count.tolist())]

    def decode_on_device(
        self, logits: torch.Tensor, max_new_tokens: int, sampling: Sampling | None = None
    ) -> list[tuple]:
        """Decoding without drafts, greedy or sampled, the answers kept on the device (see the module
        docstring), from the prefill's ``logits``. Returns per row its tokens, entropies and
        log-probabilities, the stop token last if one ended it. At most one step runs past the last
        answer's end (its rows all finished: nothing of it is kept)."""
        a, cols, dev = self.arena, self.cols, self.arena.inputs.device
        a.max_new.fill_(max_new_tokens)
        cols.drafted(a.inputs[: self.n]).zero_()
        cols.alive(a.inputs[: self.n]).fill_(1)
        first = self.first(logits)
        self.mode = "greedy"
        if sampling is not None:
            self.mode = "sampled"
            a.temperature.fill_(sampling.temperature)
            a.rng_keys[: self.n] = torch.tensor(sampling.keys, dtype=torch.long, device=dev)
            self._draw(first, logits)
        self._record(first)
        order = list(range(self.n))  # the answer each of the first rows holds
        done: dict[int, tuple] = {}
        alive = self._read(0, self._post(0))  # after the first token
        slot, pending = 0, None
        if any(alive):
            self._run()
            self.steps += 1
            slot, pending = 1, self._post(1)
        while any(alive):  # ``alive``: the flags before the queued step, whose own are in ``slot``
            live = [j for j, x in enumerate(alive) if x]
            if bucket(len(live)) < self.b:  # finished rows leave a bucket at a time
                finished = [j for j, x in enumerate(alive) if not x]
                done.update(zip((order[j] for j in finished), self._answers(finished)))
                order = [order[j] for j in live]
                self.select(live)
                pending = self._post(slot)  # the queued step's flags again, in the new order
            self._run()  # the next step is queued before the host waits for the last one
            self.steps += 1
            queued = self._post(1 - slot)
            alive = self._read(slot, pending)
            slot, pending = 1 - slot, queued
        done.update(zip(order, self._answers(list(range(len(order))))))
        return [done[i] for i in range(len(done))]


class _SpanStep(SlotStep):
    """The slot step (:meth:`~..feeds.SlotStep.run_step`) over an arena's first b rows (:meth:`view`)."""

    def __init__(self, model: Any, arena: StepArena, dtype: torch.dtype, chunk_rows: int) -> None:
        self.model, self.arena, self.chunk_rows, self.dtype = model, arena, chunk_rows, dtype
        self.width, self.cols, self.capacity = arena.width, arena.cols, arena.capacity
        self.pad_token_id = arena.pad_token_id
        self.slots, self.offsets = arena.slots, arena.offsets
        self.float_mask = attention_kind(model) == "eager"

    def view(self, b: int) -> None:
        a = self.arena
        self.cache = a.cache(b)
        self.layers = slot_layers(self.cache)
        self.seen, self.fill, self.last_pos = a.seen[:b], a.fill[:b], a.last_pos[:b]
        self.inputs, self.index = a.inputs[:b], a.index[:b]
        self._bind()
