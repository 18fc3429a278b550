"""The Engine: one causal LM on one device, its public primitives, and the process-wide registry.

The Engine owns its parts and passes each its inputs explicitly: a :class:`~.planning.BatchPlanner`
(which rows run together; the out-of-memory retry), a :class:`~.prefill.PrefixPrefill` (encoding with
shared prefixes) and a :class:`~.decode.Decoder` (the decode loop); teacher forcing is the prefill's
logits turned into statistics (:func:`~.stats.continuation_stats`). Each primitive reads
``engine.config`` once, under the lock, and hands it to the parts."""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Any, Sequence

import torch

from ...core.checks import check_continuations, check_positive_int, check_seed, check_temperature
from ...core.target import CAPABILITIES, Target
from ...core.types import Generation, TokenStats
from ..models import DEFAULT_MODEL, load_model
from .config import NOT_GIVEN, Configured, EngineConfig, engine_config
from .decode import Decoder
from .drafting import PromptLookup
from .kernels import CpuLinears
from .planning import BatchCap, BatchPlanner
from .prefill import PrefixPrefill
from .sampling import Sampling, row_keys
from .stats import continuation_stats

_STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


def _text(tokenizer: Any, ids: Sequence[int]) -> str:
    """An answer's text: its tokens decoded, special tokens skipped, whitespace stripped."""
    return tokenizer.decode(list(ids), skip_special_tokens=True).strip()


def _part_counter(part: str, name: str, doc: str) -> property:
    """An Engine attribute that reads and assigns the counter ``name`` of its part ``part``."""

    def get(self: "Engine") -> int:
        return getattr(getattr(self, part), name)

    def set_(self: "Engine", value: int) -> None:
        setattr(getattr(self, part), name, value)

    return property(get, set_, doc=doc)


class Engine(Configured):
    """Batched token statistics for one causal LM on one device.

    Args:
        model: a model spec (embedded alias, path, hub id; see :func:`grogu.runtime.models.load_model`), a loaded
            ``PreTrainedModel`` (then pass ``tokenizer``), or a ``(model, tokenizer)`` pair.
        tokenizer: the tokenizer when ``model`` is a loaded model.
        device, dtype: where and how to load a model given by name (default: CUDA+bf16, else CPU+float32; float32 for GGUF).
        max_batch_size: most prompts in one forward pass (default 64 on GPU, 32 on CPU).
        max_batch_tokens: most padded tokens in one forward pass (default 65,536 on GPU, 16,384 on CPU).
        logits_budget_mb: most memory for the logits of one teacher-forced batch.
        stop_token_ids: tokens that end an answer (default: the tokenizer's and generation config's EOS
            plus the usual end-of-turn tokens found in the vocabulary).
        min_shared_prefix: fewest prompt tokens a shared prefix must save to be worth encoding once.
        prompt_lookup: most tokens drafted per greedy decode step by prompt lookup (0, the default,
            turns it off). Drafts are verified by the model, so greedy answers and their statistics are
            unchanged; grounded answers copy from their documents, so several tokens are often accepted
            per step. It measured no faster on a CPU (every token fed costs compute) nor on a GPU with
            CUDA graphs (a batch decodes until its longest answer ends): see :class:`EngineConfig`.
        prompt_lookup_ngram: longest n-gram matched to find a draft (shortest: ``prompt_lookup_min_ngram``, 2).
        cpu_linear: kernels of the model's linear layers on a CPU (:mod:`grogu.runtime.engine.kernels`): 'auto'
            (default: oneDNN where it measures faster than the default BLAS, as on AMD CPUs, where it
            is about twice as fast), 'onednn' or 'default'. The model is only switched while the
            engine runs it. Ignored on a GPU.
        config: the engine's settings, an :class:`~grogu.runtime.engine.config.EngineConfig` (the keyword
            arguments above are a convenience that builds one; not both: a TypeError). ``engine.config`` is
            the configuration in use, resolved for the device; a setting changes by a new one
            (``engine.config = dataclasses.replace(engine.config, max_batch_size=8)``).

    Its parts (see :mod:`grogu.runtime.engine`): ``planner`` (:class:`~grogu.runtime.engine.planning.BatchPlanner`),
    ``prefill`` (:class:`~grogu.runtime.engine.prefill.PrefixPrefill`), ``decoder``
    (:class:`~grogu.runtime.engine.decode.Decoder`). Diagnostics (assignable, e.g. reset to 0):
    ``prefill_tokens``, ``lookup_steps``, ``lookup_drafted``, ``oom_backoffs``.
    """

    prefill_tokens = _part_counter("prefill", "encoded_tokens", "Prompt tokens encoded, padding excluded (diagnostics)")
    lookup_steps = _part_counter("decoder", "steps", "Decode forward passes run (diagnostics).")
    lookup_drafted = _part_counter("decoder", "drafted", "Drafted tokens fed to decode steps (diagnostics).")
    cuda_graphs_captured = _part_counter("decoder", "graphs", "CUDA graphs of decode steps captured (diagnostics).")
    #: an in-process model generates, teacher-forces any answer and gives the full next-token distribution
    capabilities = frozenset(CAPABILITIES)
    #: it teacher-forces any answer, and its prompts are token ids
    grounded_only = False
    takes_messages = False

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        max_batch_size: int | None = NOT_GIVEN,
        max_batch_tokens: int | None = NOT_GIVEN,
        logits_budget_mb: int = NOT_GIVEN,
        stop_token_ids: Sequence[int] | None = None,
        min_shared_prefix: int = NOT_GIVEN,
        prompt_lookup: int | None = NOT_GIVEN,
        prompt_lookup_ngram: int = NOT_GIVEN,
        cpu_linear: str = NOT_GIVEN,
        config: EngineConfig | None = None,
    ) -> None:
        # validated before a model is loaded
        config = engine_config(
            config,
            max_batch_size=max_batch_size,
            max_batch_tokens=max_batch_tokens,
            logits_budget_mb=logits_budget_mb,
            min_shared_prefix=min_shared_prefix,
            prompt_lookup=prompt_lookup,
            prompt_lookup_ngram=prompt_lookup_ngram,
            cpu_linear=cpu_linear,
        )
        if tokenizer is not None:
            model = (model, tokenizer)
        if not isinstance(model, (str, tuple)):
            raise TypeError("pass a model name/path, a (model, tokenizer) pair, or a model plus tokenizer=")
        self.model, self.tokenizer = load_model(model, device=device, dtype=dtype)
        self.model_name = (
            model
            if isinstance(model, str)
            else (getattr(self.model.config, "_name_or_path", None) or type(self.model).__name__)
        )
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        self.config = config  # resolved for the device: engine.config.max_batch_size ... read it
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.pad_token_id = self._pad_token_id()
        self.stop_token_ids = sorted(set(stop_token_ids) if stop_token_ids is not None else self._default_stops())
        if not self.stop_token_ids:
            raise ValueError("the tokenizer defines no end-of-sequence token; pass stop_token_ids=")
        self.max_context_tokens = self._context_window()
        self._lock = threading.RLock()
        self.oom_backoffs = 0  # batches split in two on out-of-memory (diagnostics)
        self.batch_cap = BatchCap()  # the batch size under out-of-memory: halved, then restored
        self._linears = CpuLinears(
            self.model,
            self.config.cpu_linear if self.device.type != "cuda" else "default",
            pack_limit_mb=self.config.cpu_linear_pack_limit_mb,
        )
        self.linear_backend = self._linears.backend
        # the parts; the logits budget counts the model's logits plus their float32 copy
        self.planner = BatchPlanner(logit_bytes=self.vocab_size * max(self.dtype.itemsize, 4))
        self.prefill = PrefixPrefill(self.model, pad_token_id=self.pad_token_id)
        detokenize = functools.partial(_text, self.tokenizer)  # no cycle back to self
        self.decoder = Decoder(
            self.model, pad_token_id=self.pad_token_id, stop_token_ids=self.stop_token_ids, detokenize=detokenize
        )

    # ------------------------------------------------------------------ setup helpers
    def _pad_token_id(self) -> int:
        tok = self.tokenizer
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        return int(pad if pad is not None else 0)

    def _default_stops(self) -> set[int]:
        stops: set[int] = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                stops.add(source)
            elif source:
                stops.update(int(s) for s in source)
        vocab = self.tokenizer.get_vocab()
        stops.update(vocab[name] for name in _STOP_TOKEN_NAMES if name in vocab)
        return stops

    def _context_window(self) -> int:
        cfg = self.model.config
        window = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 2048
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and 0 < tok_max < 10**7:
            window = min(window, tok_max)
        return int(window)

    def __repr__(self) -> str:
        return f"Engine(model={self.model_name!r}, device={self.device}, dtype={self.dtype})"

    def kernels(self):
        """A context in which forward passes of ``self.model`` use this engine's kernels (:mod:`.kernels`: oneDNN
        linear layers on a CPU where faster). Wrap your own forward passes in it to compute what the engine does."""
        return self._linears()

    # ------------------------------------------------------------------ text helpers
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return _text(self.tokenizer, ids)

    # ------------------------------------------------------------------ public primitives
    def _check_prompts(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise TypeError("prompts must be a list of token-id lists (render text with grogu.core.prompts)")
        out = []
        for p in prompts:
            if isinstance(p, (str, bytes)):
                raise TypeError("prompts must be token ids, not text (render text with grogu.core.prompts)")
            p = [int(t) for t in p]
            if not p:
                raise ValueError("a prompt has no tokens")
            out.append(p)
        return out

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int = 64,
        *,
        temperature: float | None = None,
        seed: int | None = None,
        sample_numbers: Sequence[int] | None = None,
    ) -> list[Generation]:
        """Generate one answer per prompt; greedy when ``temperature`` is None, else sampled.

        Returns per prompt a :class:`Generation` with each answer token's entropy (nats) and
        log-probability under the untempered model distribution. Sampling is reproducible for a given
        ``seed``: each prompt's samples depend only on the seed, the prompt and how many identical
        prompts precede it in the call, not on the other prompts or on batching. ``sample_numbers``:
        each row's sample number instead of that count (a caller drawing one prompt's samples in slices).
        """
        prompts = self._check_prompts(prompts)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        temperature = check_temperature(temperature, "temperature (None: greedy decoding)", allow_none=True)
        seed = check_seed(seed)
        if not prompts:
            return []
        with self._lock, self.kernels():
            config = self.config
            seed = seed if seed is not None or temperature is None else torch.seed()
            keys = None if temperature is None else row_keys(prompts, seed, sample_numbers)
            lengths = [len(p) + max_new_tokens for p in prompts]
            batches = self.planner.plan(lengths, config, prompts=prompts, padding=self.prefill.stackable)

            def run(batch: list[int]) -> dict[int, Generation]:
                sampling = None if keys is None else Sampling(temperature, [keys[i] for i in batch])
                answers = self._generate_batch([prompts[i] for i in batch], max_new_tokens, sampling, config)
                return dict(zip(batch, answers))

            res = self.planner.run(batches, run, self._split_batches, self._batch_ran)
        return [res[i] for i in range(len(prompts))]

    def token_stats(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[TokenStats]:
        """Teacher-forced statistics of ``continuations[i]`` after ``prompts[i]``.

        For token c_j the entropy (nats) and log-probability are those of the next-token distribution
        given prompt + c_<j. Empty continuations give empty statistics.
        """
        prompts = self._check_prompts(prompts)
        conts = check_continuations(continuations, len(prompts))
        todo = [i for i, c in enumerate(conts) if c]
        empty = torch.zeros(0, dtype=torch.float32)
        res: dict[int, TokenStats] = {i: TokenStats([], empty, empty) for i, c in enumerate(conts) if not c}
        if todo:
            lengths = [len(prompts[i]) + len(conts[i]) for i in todo]
            with self._lock, self.kernels():
                config = self.config
                batches = self.planner.plan(
                    lengths,
                    config,
                    logit_rows=[len(conts[i]) for i in todo],
                    prompts=[prompts[i] for i in todo],
                    padding=self.prefill.stackable,
                )
                batches = [[todo[j] for j in b] for b in batches]
                res.update(
                    self.planner.run(
                        batches,
                        lambda b: dict(
                            zip(b, self._token_stats_batch([prompts[i] for i in b], [conts[i] for i in b], config))
                        ),
                        self._split_batches,
                        self._batch_ran,
                    )
                )
        return [res[i] for i in range(len(prompts))]

    def graph_stats(self) -> dict[str, Any]:
        """The decoder's CUDA graph counts (:class:`~.graphs.GraphStats`; all 0 on a CPU)."""
        return self.decoder.graph_stats()

    def drop_kept_prompts(self) -> None:
        """Forget the prompts kept for later calls (``retain_prefix_tokens``): the next call encodes its
        prompts whole, as the first call of a process does (a benchmark timing each query cold)."""
        with self._lock:
            self.prefill.retained = []

    def require_teacher_forcing(self, what: str) -> None:
        """Nothing to raise: an in-process model teacher-forces any answer."""

    def next_token_logprobs(
        self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Log-probabilities (float32, on CPU) of the next token after each prompt: [n, vocab], or
        [n, len(token_ids)] for just the given tokens."""
        prompts = self._check_prompts(prompts)
        cols = None if token_ids is None else torch.tensor(list(token_ids), dtype=torch.long)
        if not prompts:
            return torch.zeros(0, self.vocab_size if cols is None else len(cols))

        @torch.inference_mode()
        def run(batch: list[int]) -> dict[int, torch.Tensor]:
            logits = self.prefill.logits([prompts[i] for i in batch], 1, config)  # per row [1, vocab]
            logp = torch.log_softmax(torch.stack([row[-1] for row in logits]).float(), dim=-1).cpu()  # [rows, vocab]
            if cols is not None:
                logp = logp[:, cols]
            return dict(zip(batch, logp))

        with self._lock, self.kernels():
            config = self.config
            lengths = [len(p) for p in prompts]
            res = self.planner.run(
                self.planner.plan(lengths, config, padding=self.prefill.stackable),
                run,
                self._split_batches,
                self._batch_ran,
            )
        return torch.stack([res[i] for i in range(len(prompts))])

    # ------------------------------------------------------------------ one batch, through the parts
    @torch.inference_mode()
    def _generate_batch(
        self, seqs: list[list[int]], max_new_tokens: int, sampling: Sampling | None, config: EngineConfig
    ) -> list[Generation]:
        """Prefill then decode one planned batch. Greedy decoding takes prompt-lookup drafts where
        ``config.prompt_lookup`` > 0 and the model's caches can be stacked (see
        :attr:`~grogu.runtime.engine.prefill.PrefixPrefill.stackable`); the cache gets room for the answer and
        the longest draft, as decoding writes it in place."""
        drafter = None
        if sampling is None and config.prompt_lookup > 0 and self.prefill.stackable:
            drafter = PromptLookup(config.prompt_lookup, config.prompt_lookup_ngram, config.prompt_lookup_min_ngram)
        room = max_new_tokens + (drafter.max_draft if drafter is not None else 0)
        start = self.prefill.for_decoding(seqs, room, config)
        return self.decoder.decode(
            start,
            seqs,
            max_new_tokens,
            sampling=sampling,
            drafter=drafter,
            entropy_chunk_rows=config.entropy_chunk_rows,
            cuda_graphs=config.cuda_graphs,
            graph_budget_tokens=config.max_batch_tokens,
        )

    @torch.inference_mode()
    def _token_stats_batch(
        self, prompts: list[list[int]], conts: list[list[int]], config: EngineConfig
    ) -> list[TokenStats]:
        """Teacher forcing of one planned batch: prompt + continuation (but its last token) encoded for
        the logits at the continuation's positions, a row reusing at most its prompt but the last token."""
        seqs = [p + c[:-1] for p, c in zip(prompts, conts)]
        logits = self.prefill.logits(
            seqs, max(len(c) for c in conts), config, limits=[len(p) - 1 for p in prompts]
        )  # per row [<= keep, vocab]
        return continuation_stats(logits, conts, config.entropy_chunk_rows)

    def _split_batches(self, half: int) -> None:
        """The planner split a batch on out-of-memory: cap the batch size for later calls (:class:`BatchCap`)."""
        self.oom_backoffs += 1
        size = self.batch_cap.split(self.config.max_batch_size, half)
        self.config = dataclasses.replace(self.config, max_batch_size=size)
        self.decoder.release_graphs()  # the kept decode buffers too
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _batch_ran(self, rows: int) -> None:
        if (size := self.batch_cap.ran(self.config.max_batch_size)) != self.config.max_batch_size:
            self.config = dataclasses.replace(self.config, max_batch_size=size)


_SHARED: dict[tuple, Engine] = {}
_SHARED_LOCK = threading.Lock()


def get_engine(
    model: Any = DEFAULT_MODEL, *, device: str | None = None, dtype: str | None = None, **kwargs: Any
) -> Engine | Target:
    """The process-wide engine for (model, device, dtype): loaded once, shared by every caller.

    ``model`` may be an Engine or a :class:`grogu.ServerTarget` (returned as is), a name/path, or a
    loaded (model, tokenizer) pair.
    """
    if isinstance(model, Target):
        return model
    key_model = model if isinstance(model, str) else tuple(id(m) for m in model)
    key = (key_model, str(device), str(dtype), tuple(sorted(kwargs.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Engine(model, device=device, dtype=dtype, **kwargs)
        return _SHARED[key]
