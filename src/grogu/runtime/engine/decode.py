"""The decode loop: from a prefilled batch (:class:`~grogu.runtime.engine.prefill.PrefilledBatch`) to one
answer per row, greedy with optional prompt-lookup drafts (:mod:`grogu.runtime.engine.drafting`), or sampled
(:class:`~.sampling.Sampling`); each answer token's entropy and log-probability are read from the decode steps
themselves.

A decode step is device work only: the forward pass, the choice of each position's token, its entropy
and log-probability, how many drafted tokens the model accepted, and where each row's cache ends. One
small tensor then comes back to the host (one synchronisation a step), which keeps the answers, checks
stop tokens and proposes the next drafts. Because a step reads nothing back before its end, on a GPU it
can be captured as a CUDA graph and replayed: a step then costs the GPU's time, not the Python and
kernel launches of a forward pass of the model (``cuda_graphs``). Graphs are kept from batch to batch,
one per bucket of rows, over buffers that outlive a batch (:mod:`.graphs`). There, steps without drafts
(greedy or sampled) also keep the answers on the device: the host only reads back which rows are
alive, a step late, and never waits for the step it just queued.

Two ways to feed a step (:mod:`.feeds`), chosen by the cache the prefill made: slots (every layer a
:class:`~grogu.runtime.engine.kvcache.ReservedLayer`: rows write their own slots, masked in 4-D) or
appending (any other cache, one token a step).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Sequence

import torch

from ...core.types import Generation
from .drafting import PromptLookup
from .feeds import AppendFeed, Feed, SlotFeed
from .graphs import ArenaFeed, KeptGraphs, StandInGraphs
from .kvcache import SLOT_MASKS, attention_kind, slot_layers
from .prefill import PrefilledBatch
from .sampling import Sampling, sample_rows

logger = logging.getLogger(__name__)


class Decoder:
    """Decodes prefilled batches with ``model`` (see the module docstring). Runs ``model`` as it is:
    the caller provides the context (kernels).

    Args:
        model: the causal LM.
        pad_token_id: the token fed in padding slots of a decode step (masked).
        stop_token_ids: tokens that end an answer (not part of it; their statistics are kept apart).
        detokenize: token ids to an answer's text (:attr:`Generation.text`).

    Attributes:
        steps: decode forward passes run so far (diagnostics; may be reset).
        drafted: drafted tokens fed so far (diagnostics; may be reset).
        graphs: CUDA graphs captured so far (diagnostics; may be reset).
        graphs_failed: the cause of the latest failed CUDA graph capture (None: none failed). A failed
            capture's batch decodes eagerly; later batches capture again (:mod:`.graphs`).
        kept: the buffers and graphs kept from batch to batch (:class:`~.graphs.KeptGraphs`); its
            ``stats`` count captures, replays, failures, warm-up and eager steps (:meth:`graph_stats`).
        emulate_graphs: run the graphed path on a CPU, captured and replayed by the CPU stand-in that
            enforces CUDA's rules (:class:`~.graphs.StandInGraphs`; tests).
    """

    def __init__(
        self, model: Any, *, pad_token_id: int, stop_token_ids: Sequence[int], detokenize: Callable[[list[int]], str]
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.stop_token_ids = frozenset(stop_token_ids)
        self.detokenize = detokenize
        self.steps = self.drafted = 0
        self.kept = KeptGraphs("cuda" if self.device.type == "cuda" else None)
        self._stream: Any = None  # the side stream graphed decoding runs on (made once)

    @property
    def emulate_graphs(self) -> bool:
        return self.device.type != "cuda" and self.kept.backend is not None

    @emulate_graphs.setter
    def emulate_graphs(self, on: bool) -> None:
        if on and self.device.type == "cuda":
            raise ValueError("emulate_graphs is for a CPU: on a CUDA device the graphs are real")
        if on != self.emulate_graphs:
            self.kept.release()
            self.kept.backend = StandInGraphs() if on else None

    @property
    def graphs(self) -> int:
        return self.kept.stats.captured

    @graphs.setter
    def graphs(self, value: int) -> None:
        self.kept.stats.captured = value

    @property
    def graphs_failed(self) -> str | None:
        return self.kept.stats.last_error

    def graph_stats(self) -> dict[str, Any]:
        """The graph cache's counts (:class:`~.graphs.GraphStats`), with the arenas kept now."""
        return dict(self.kept.stats.as_dict(), arenas_kept=len(self.kept.arenas))

    def release_graphs(self) -> None:
        """Let the kept graphs and their buffers go (:meth:`~.graphs.KeptGraphs.release`)."""
        self.kept.release()

    @torch.inference_mode()
    def decode(
        self,
        start: PrefilledBatch,
        histories: list[list[int]],
        max_new_tokens: int,
        *,
        sampling: Sampling | None = None,
        drafter: PromptLookup | None = None,
        entropy_chunk_rows: int = 64,
        cuda_graphs: bool = False,
        graph_budget_tokens: int = 65536,
    ) -> list[Generation]:
        """Decode a batch from ``start`` (its tensors are consumed; a slot cache needs room for
        ``max_new_tokens`` plus ``drafter.max_draft`` positions): ``histories[i]`` is row i's prompt,
        where ``drafter`` looks for drafts. Greedy (``sampling`` None) with a drafter, each step feeds
        every row its pending token plus up to ``drafter.max_draft`` drafted tokens and keeps the
        drafted tokens the model itself would have chosen (so the answer is exactly the greedy one).
        Entropies and log-probabilities (float32, chunks of ``entropy_chunk_rows`` rows) are those of
        the positions that produced each kept token. ``cuda_graphs``: on a CUDA device, decoding over a
        slot cache replays each step as a CUDA graph, kept for later batches (:mod:`.graphs`); the
        arenas kept besides this batch's hold at most ``graph_budget_tokens`` slots."""
        slots = slot_layers(start.cache) is not None and attention_kind(self.model) in SLOT_MASKS
        if drafter is not None and (not slots or sampling is not None or drafter.max_draft < 1):
            drafter = None
        width = 1 + (drafter.max_draft if drafter is not None else 0)
        cuda = self.device.type == "cuda"
        graphed = cuda_graphs and slots and self.kept.backend is not None  # CUDA, or the CPU stand-in
        with contextlib.ExitStack() as stack:
            if graphed and cuda:  # the whole decode on one side stream, as CUDA graphs require
                if self._stream is None:
                    self._stream = torch.cuda.Stream(device=self.device)
                default = torch.cuda.current_stream(self.device)
                self._stream.wait_stream(default)  # the prefill's work comes first
                stack.callback(default.wait_stream, self._stream)
                stack.enter_context(torch.cuda.stream(self._stream))
            feed: Feed
            if graphed:
                stops = sorted(self.stop_token_ids)
                arena = self.kept.arena(start, width, self.pad_token_id, stops, graph_budget_tokens)
                feed = arena_feed = ArenaFeed(self.model, start, self.kept, arena, entropy_chunk_rows)
                if width == 1 and max_new_tokens >= 1:  # no drafts: the answers stay on the device
                    records = arena_feed.decode_on_device(start.logits, max_new_tokens, sampling)
                    self.steps += arena_feed.steps
                    return [self._generation(*r) for r in records]
            elif slots:
                feed = SlotFeed(self.model, start, width, self.pad_token_id, entropy_chunk_rows)
            else:
                feed = AppendFeed(self.model, start, self.pad_token_id, entropy_chunk_rows)
            return self._loop(start, feed, histories, max_new_tokens, sampling, drafter)

    def _generation(self, tokens: list[int], ents: list[float], lps: list[float]) -> Generation:
        """A row's answer from its records (:meth:`~.graphs.ArenaFeed.decode_on_device`): a stop token is last."""
        stop = None
        if tokens and tokens[-1] in self.stop_token_ids:
            stop, tokens, ents, lps = (tokens[-1], ents[-1], lps[-1]), tokens[:-1], ents[:-1], lps[:-1]
        return _Answers.one(tokens, ents, lps, stop, self.detokenize)

    def _loop(self, start, feed, histories, max_new_tokens, sampling, drafter) -> list[Generation]:
        n = len(histories)
        state = _Answers(histories, drafter)
        rows = list(range(n))  # the answer of each row of the feed
        alive = [True] * n
        packed = feed.first(start.logits)  # the prefill's logits choose each row's first token
        logits = start.logits
        while True:
            if sampling is not None:  # queued before the step's one synchronisation, read back with it
                dev = logits.device
                drawn = sample_rows(
                    logits[:, 0],
                    sampling.temperature,
                    torch.tensor([sampling.keys[r] for r in rows], device=dev),
                    torch.tensor([len(state.tokens[r]) for r in rows], device=dev),  # the draw's number
                    torch.tensor(alive, device=dev),
                )
            values = packed.tolist()  # the one synchronisation of a step
            if sampling is not None:
                chosen_tokens, chosen_lp = zip(*drawn.tolist())
                chosen = [int(t) for t in chosen_tokens]
            pending: list[int] = []
            for j, (r, v) in enumerate(zip(rows, values)):
                if not alive[j]:
                    pending.append(self.pad_token_id)
                    continue
                w = (len(v) - 1) // 3  # the positions this step fed
                accepted = int(v[-1])
                keep = True
                for p in range(accepted + 1):
                    token, lp = (chosen[j], chosen_lp[j]) if sampling is not None else (int(v[p]), v[2 * w + p])
                    keep = state.add(r, token, v[w + p], lp, self.stop_token_ids, max_new_tokens)
                    if not keep:
                        break
                alive[j] = keep
                pending.append(chosen[j] if sampling is not None else int(v[accepted]))
            feed.advanced(values, alive_before=feed.alive_fed)
            if not any(alive):
                break
            live = [j for j, a in enumerate(alive) if a]
            if len(live) < len(rows) and feed.compacts(len(live), len(rows)):
                feed.select(live)  # finished rows leave the batch (a graph's batch: a bucket at a time)
                rows, pending, alive = [rows[j] for j in live], [pending[j] for j in live], [True] * len(live)
            drafts = [
                state.propose(r, max_new_tokens - len(state.tokens[r]) - 1) if a and drafter is not None else []
                for r, a in zip(rows, alive)
            ]
            feed.set_inputs(pending, drafts, alive)
            packed, logits = feed.step()
            self.steps += 1
            self.drafted += sum(map(len, drafts))
        return state.generations(self.detokenize)


class _Answers:
    """The answers of a decoding batch so far: per row its tokens, their entropies and log-probabilities,
    the stop token with its statistics, and (with a drafter) an index of the prompt plus answer."""

    def __init__(self, seqs: list[list[int]], drafter: PromptLookup | None = None) -> None:
        n = len(seqs)
        self.lookups = [drafter.index(list(s)) for s in seqs] if drafter is not None else None
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.ents: list[list[float]] = [[] for _ in range(n)]
        self.lps: list[list[float]] = [[] for _ in range(n)]
        self.stops: list[tuple[int, float, float] | None] = [None] * n

    def add(self, r: int, token: int, entropy: float, logprob: float, stop_set, max_new_tokens: int) -> bool:
        """Row r's next token; False once the row is done (a stop token, or max_new_tokens reached)."""
        if token in stop_set:
            self.stops[r] = (token, entropy, logprob)
            return False
        self.tokens[r].append(token)
        if self.lookups is not None:
            self.lookups[r].append([token])
        self.ents[r].append(entropy)
        self.lps[r].append(logprob)
        return len(self.tokens[r]) < max_new_tokens

    def propose(self, r: int, budget: int) -> list[int]:
        return self.lookups[r].propose(budget)

    def generations(self, detokenize: Callable[[list[int]], str]) -> list[Generation]:
        rows = zip(self.tokens, self.ents, self.lps, self.stops)
        return [self.one(tokens, ents, lps, stop, detokenize) for tokens, ents, lps, stop in rows]

    @staticmethod
    def one(tokens, ents, lps, stop, detokenize: Callable[[list[int]], str]) -> Generation:
        stop_info = stop or (None, None, None)
        return Generation(
            token_ids=tokens,
            entropy=torch.tensor(ents, dtype=torch.float32),
            logprob=torch.tensor(lps, dtype=torch.float32),
            stop_token_id=stop_info[0],
            stop_entropy=stop_info[1],
            stop_logprob=stop_info[2],
            text=detokenize(tokens),
        )
