"""The shared, batched scoring engine: one object per (model, device).

Every metric in grogu is computed from three primitives, all batched over many prompts:

- :meth:`Engine.generate` — greedy (or sampled) generation that also returns, for every generated
  token, its entropy (nats, full vocabulary) and log-probability under the generating prompt, taken
  from the generation steps themselves (no second pass);
- :meth:`Engine.token_stats` — teacher-forced entropy and log-probability of given continuations
  under given prompts, logits taken only at the continuation positions;
- :meth:`Engine.next_token_logprobs` — the next-token distribution after each prompt.

How it is fast: prompts are length-bucketed into batches; within a batch shared prefixes are encoded
once, as a prefix tree (rows grouped by common prefix, each group's prefix continuing the KV cache of
earlier groups' prefixes: the chat-template header; the whole prompt when k answers are
teacher-forced under one ungrounded prompt; documents 1..i-1 for the i-th leave-one-out prompt of the
Influence Score), the rest of each row following with padding masked out and position ids that
continue its own prefix, and the groups' caches stacked to decode together; greedy decoding can
take prompt-lookup drafts (verified, so the answer is unchanged); finished rows leave the decode batch; entropies are computed in float32 on chunks, never on a
float32 [batch, seq, vocab] tensor of the whole prompt; on out-of-memory a batch is split in two
and retried. Inputs and outputs are token ids: prompts are rendered by :mod:`grogu.prompts`.

Thread safety: one re-entrant lock serialises the model work, so any number of threads can share an
engine and each gets exactly the result it would get alone.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from .checks import check_choice, check_int, check_positive_int, check_seed, check_temperature
from .kernels import LINEAR_BACKENDS, CpuLinears
from .kvcache import ReservedLayer, reserve
from .models import DEFAULT_MODEL, load_model

logger = logging.getLogger(__name__)

_STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")


@dataclass
class TokenStats:
    """Per-token statistics of a token sequence under one prompt.

    token_ids: the tokens; entropy: H of the model's next-token distribution at each token's step, in
    nats over the full vocabulary (float32); logprob: natural log-probability of each token (float32).
    """

    token_ids: list[int]
    entropy: torch.Tensor
    logprob: torch.Tensor

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class Generation(TokenStats):
    """A generated answer with its per-token statistics under the generating prompt.

    The end-of-turn token is not part of ``token_ids``; when the answer ended with one, its entropy
    and log-probability are in ``stop_entropy`` / ``stop_logprob`` (None when max_new_tokens was hit).
    ``entropy``/``logprob`` are always those of the untempered model distribution, also when sampling.
    """

    stop_token_id: int | None = None
    stop_entropy: float | None = None
    stop_logprob: float | None = None
    text: str = ""

    @property
    def finished(self) -> bool:
        return self.stop_token_id is not None

    @property
    def sequence_logprob(self) -> float:
        """Sum of the answer's token log-probabilities, the end-of-turn token included when present."""
        total = float(self.logprob.sum()) if len(self.token_ids) else 0.0
        return total + (self.stop_logprob or 0.0)


def _row_generators(prompts: Sequence[Sequence[int]], seed: int) -> list[torch.Generator]:
    """One CPU generator per prompt, seeded from (seed, the prompt's tokens, how many identical prompts
    come before it): each prompt's samples are reproducible whatever else is in the call."""
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for p in prompts:
        key = tuple(p)
        nth = seen.get(key, 0)
        seen[key] = nth + 1
        digest = hashlib.blake2b(repr((int(seed), key, nth)).encode(), digest_size=8).digest()
        out.append(torch.Generator(device="cpu").manual_seed(int.from_bytes(digest, "little") & (2**63 - 1)))
    return out


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _entropy_logprob(logits: torch.Tensor, chunk_rows: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """(entropy, log-softmax) of [n, V] logits in float32, computed chunk by chunk."""
    ents, logps = [], []
    for start in range(0, logits.shape[0], chunk_rows):
        logp = torch.log_softmax(logits[start:start + chunk_rows].float(), dim=-1)
        # p * log p with 0 * log 0 = 0: clamping -inf to the float minimum keeps the product finite
        ents.append(-(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1))
        logps.append(logp)
    return torch.cat(ents), torch.cat(logps)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    m = min(len(a), len(b))
    k = 0
    while k < m and a[k] == b[k]:
        k += 1
    return k


class Engine:
    """Batched token statistics for one causal LM on one device.

    Args:
        model: a model spec (embedded alias, path, hub id; see :func:`grogu.models.load_model`), a loaded
            ``PreTrainedModel`` (then pass ``tokenizer``), or a ``(model, tokenizer)`` pair.
        tokenizer: the tokenizer when ``model`` is a loaded model.
        device, dtype: where and how to load a model given by name (default: CUDA+bf16, else CPU+float32).
        max_batch_size: most prompts in one forward pass (default 64 on GPU, 32 on CPU).
        max_batch_tokens: most padded tokens in one forward pass (default 65,536 on GPU, 16,384 on CPU).
        logits_budget_mb: most memory for the logits of one teacher-forced batch.
        stop_token_ids: tokens that end an answer (default: the tokenizer's and generation config's EOS
            plus the usual end-of-turn tokens found in the vocabulary).
        min_shared_prefix: fewest prompt tokens a shared prefix must save to be worth encoding once.
        prompt_lookup: most tokens drafted per greedy decode step by prompt lookup (0 turns it off;
            default 4 on GPU, 0 on CPU). Drafts are verified by the model, so greedy answers and their
            statistics are unchanged; grounded answers copy from their documents, so several tokens
            are often accepted per step. It pays where a decode step is memory-bound (GPU); on a CPU
            every extra token fed costs compute and measured no faster (benchmarks/engine_speed.py).
        prompt_lookup_ngram: longest n-gram matched to find a draft (shortest: 2).
        cpu_linear: kernels of the model's linear layers on a CPU (:mod:`grogu.kernels`): 'auto'
            (default: oneDNN where it measures faster than the default BLAS, as on AMD CPUs, where it
            is about twice as fast), 'onednn' or 'default'. The model is only switched while the
            engine runs it. Ignored on a GPU.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        dtype: str | torch.dtype | None = None,
        max_batch_size: int | None = None,
        max_batch_tokens: int | None = None,
        logits_budget_mb: int = 256,
        stop_token_ids: Sequence[int] | None = None,
        min_shared_prefix: int = 8,
        prompt_lookup: int | None = None,
        prompt_lookup_ngram: int = 3,
        cpu_linear: str = "auto",
    ) -> None:
        for name, value in (("max_batch_size", max_batch_size), ("max_batch_tokens", max_batch_tokens)):
            if value is not None:
                check_positive_int(name, value)
        check_positive_int("logits_budget_mb", logits_budget_mb)
        check_int("min_shared_prefix", min_shared_prefix, minimum=0)
        if prompt_lookup is not None:
            check_int("prompt_lookup", prompt_lookup, minimum=0)
        check_int("prompt_lookup_ngram", prompt_lookup_ngram, minimum=2)
        check_choice("cpu_linear", cpu_linear, LINEAR_BACKENDS)
        if tokenizer is not None:
            model = (model, tokenizer)
        if not isinstance(model, (str, tuple)):
            raise TypeError("pass a model name/path, a (model, tokenizer) pair, or a model plus tokenizer=")
        self.model, self.tokenizer = load_model(model, device=device, dtype=dtype)
        self.model_name = model if isinstance(model, str) else (
            getattr(self.model.config, "_name_or_path", None) or type(self.model).__name__)
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        on_gpu = self.device.type == "cuda"
        self.max_batch_size = max_batch_size or (64 if on_gpu else 32)
        self.max_batch_tokens = max_batch_tokens or (65536 if on_gpu else 16384)
        self.logits_budget_bytes = logits_budget_mb * 2**20
        self.min_shared_prefix = min_shared_prefix
        # each extra prefix group costs forward calls: counted as this many tokens when grouping
        self.group_overhead_tokens = 256 if on_gpu else 32
        self._stack_ok: bool | None = None  # whether group caches can be stacked (see _stackable)
        self.min_batch_fill = 0.5  # a row shorter than this fraction of a batch's widest starts a new one
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self._logit_bytes = self.vocab_size * max(self.dtype.itemsize, 4)  # model logits + float32 copy
        self.pad_token_id = self._pad_token_id()
        self.stop_token_ids = sorted(set(stop_token_ids) if stop_token_ids is not None else self._default_stops())
        if not self.stop_token_ids:
            raise ValueError("the tokenizer defines no end-of-sequence token; pass stop_token_ids=")
        self._stop_tensor = torch.tensor(self.stop_token_ids, device=self.device)
        self.max_context_tokens = self._context_window()
        self._lock = threading.RLock()
        self._cache_takes_config = "config" in inspect.signature(self._cache_cls().__init__).parameters
        self.oom_backoffs = 0
        self._stop_set = set(self.stop_token_ids)
        if prompt_lookup is None:
            prompt_lookup = 4 if on_gpu else 0
        self.prompt_lookup, self.prompt_lookup_ngram = int(prompt_lookup), int(prompt_lookup_ngram)
        self.prompt_lookup_min_ngram = 2  # 1-gram matches draft mostly noise
        self._linears = CpuLinears(self.model, cpu_linear if not on_gpu else "default")
        self.linear_backend = self._linears.backend
        self.prefill_tokens = 0  # prompt tokens actually encoded, padding excluded (diagnostics)
        self.lookup_steps = self.lookup_drafted = 0  # decode forwards run, drafted tokens fed (diagnostics)

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

    @staticmethod
    def _cache_cls():
        from transformers import DynamicCache

        return DynamicCache

    def _new_cache(self):
        cls = self._cache_cls()
        return cls(config=self.model.config) if self._cache_takes_config else cls()

    def __repr__(self) -> str:
        return f"Engine(model={self.model_name!r}, device={self.device}, dtype={self.dtype})"

    def kernels(self):
        """A context in which forward passes of ``self.model`` use this engine's kernels (oneDNN linear
        layers on a CPU where they are faster, see :mod:`grogu.kernels`). The engine's own calls run in
        it; wrap your own forward passes of ``engine.model`` in it to compute exactly what it computes."""
        return self._linears()

    # ------------------------------------------------------------------ text helpers
    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True).strip()

    # ------------------------------------------------------------------ batching
    def _plan(self, lengths: Sequence[int], logit_rows: Sequence[int] | None = None,
              prompts: Sequence[Sequence[int]] | None = None) -> list[list[int]]:
        """Length-bucketed batches of row indices (longest first) that respect max_batch_size,
        max_batch_tokens and, when ``logit_rows`` (logit positions per row) is given, the logits budget.
        With ``prompts``, rows are ordered by prompt first, so rows sharing a prompt share a batch (and
        its prefix cache) — e.g. the k answers teacher-forced under one ungrounded prompt. With both
        (teacher forcing, whose groups are encoded one by one and never padded to the batch's widest
        row), rows go in token order and lengths are not bucketed: a batch is a contiguous part of the
        prompts' prefix tree, so prompts that share a prefix share a batch (on 64 ContextCite masks of
        5 paragraphs this encodes 6.3 k tokens instead of 8.1 k; the prefix tree holds 5.6 k)."""
        by_tokens = prompts is not None and logit_rows is not None
        if prompts is None:
            order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        elif by_tokens:
            order = sorted(range(len(lengths)), key=lambda i: (prompts[i], -lengths[i]))
        else:
            order = sorted(range(len(lengths)), key=lambda i: (-len(prompts[i]), prompts[i], -lengths[i]))
        batches: list[list[int]] = []
        current: list[int] = []
        widest = most_logits = 0
        for i in order:
            width = max(widest, lengths[i])
            logits = max(most_logits, logit_rows[i] if logit_rows is not None else 0)
            n = len(current) + 1
            fits = (n <= self.max_batch_size and n * width <= self.max_batch_tokens
                    and n * logits * self._logit_bytes <= self.logits_budget_bytes
                    and (by_tokens or lengths[i] >= self.min_batch_fill * width))  # padding is waste
            if current and not fits:
                batches.append(current)
                current, width, logits = [], lengths[i], logit_rows[i] if logit_rows is not None else 0
            current.append(i)
            widest, most_logits = width, logits
        if current:
            batches.append(current)
        return batches

    def _unpadded(self, batches: list[list[int]], lengths: Sequence[int]) -> list[list[int]]:
        """Batches whose rows need no padding, for models whose caches cannot be stacked.

        Sliding-window layers (Gemma 2/3, Mistral) count their window in cache slots, not in token
        positions, so a padding slot or a rejected draft inside the window hides a real token, and a
        recurrent layer reads padding as input: for those models a batch holds rows of one length only
        (their prefix is still shared) and decoding uses no drafts (:meth:`_generate_batch`)."""
        if self._stackable():
            return batches
        out: list[list[int]] = []
        for batch in batches:
            by_length: dict[int, list[int]] = {}
            for i in batch:
                by_length.setdefault(lengths[i], []).append(i)
            out.extend(by_length.values())
        return out

    def _run(self, batches: list[list[int]], fn: Callable[[list[int]], dict[int, Any]]) -> dict[int, Any]:
        """Run fn on each batch; on out-of-memory split the batch in two and retry."""
        results: dict[int, Any] = {}
        queue = list(batches)
        while queue:
            batch = queue.pop(0)
            try:
                results.update(fn(batch))
            except Exception as exc:  # noqa: BLE001 - only OOM is handled, the rest re-raised
                if not _is_oom(exc) or len(batch) == 1:
                    raise
                self.oom_backoffs += 1
                half = len(batch) // 2
                self.max_batch_size = max(1, min(self.max_batch_size, half))
                logger.warning("grogu engine: out of memory on a batch of %d, retrying as %d + %d",
                               len(batch), half, len(batch) - half)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
                queue[:0] = [batch[:half], batch[half:]]
        return results

    # ------------------------------------------------------------------ forward passes
    def _prefix_groups(self, seqs: list[list[int]], limits: list[int]) -> list[tuple[list[int], int]]:
        """Split a batch into groups of rows that share a prefix: returns [(row indices, prefix length)],
        in token order. Each group's prefix is encoded once (at batch size 1), continuing the cache of
        the earlier groups' prefixes where they agree, and its rows' rests are encoded together, padded
        to the group's longest. Rows are sorted by their tokens, so long common prefixes are neighbours;
        the split of that order into runs minimises (dynamic programming) the tokens computed —
        prefixes as a prefix tree (the part a run shares with the run before it costs nothing), each
        run's rows padded to its longest rest — plus ``group_overhead_tokens`` per run. E.g. the
        leave-one-out prompts of the Influence Score: the i-th shares documents 1..i-1 with the full
        prompt. A row reuses at most ``limits[j]`` of its tokens."""
        n = len(seqs)
        order = sorted(range(n), key=lambda i: seqs[i])
        lens = [len(seqs[i]) for i in order]
        cap = [max(0, min(limits[i], len(seqs[i]))) for i in order]
        adjacent = []  # LCP of neighbours in the sorted order
        for x, y in zip(order, order[1:]):
            u, v, m, k = seqs[x], seqs[y], min(len(seqs[x]), len(seqs[y])), 0
            while k < m and u[k] == v[k]:
                k += 1
            adjacent.append(k)
        # prefix[a][b], longest[a][b]: run order[a..b]'s shared prefix and longest row
        prefix = [[0] * n for _ in range(n)]
        longest = [[0] * n for _ in range(n)]
        for a in range(n):
            p, w = cap[a], lens[a]
            prefix[a][a], longest[a][a] = p, w
            for b in range(a + 1, n):
                p, w = min(p, adjacent[b - 1], cap[b]), max(w, lens[b])
                prefix[a][b] = p if (b - a) * p >= self.min_shared_prefix else 0
                longest[a][b] = w

        def cost(a: int, b: int, reuse: int) -> int:  # run a..b after a run whose prefix shares `reuse`
            p = prefix[a][b]
            return p - min(p, reuse) + (b - a + 1) * (longest[a][b] - p) + self.group_overhead_tokens

        inf = float("inf")
        best = [[inf] * n for _ in range(n)]  # best[a][b]: first b+1 rows, last run a..b
        back = [[-1] * n for _ in range(n)]
        for b in range(n):
            best[0][b] = cost(0, b, 0)
            for a in range(1, b + 1):
                for a0 in range(a):  # the run before: a0..a-1
                    if best[a0][a - 1] == inf:
                        continue
                    reuse = min(prefix[a0][a - 1], adjacent[a - 1])
                    c = best[a0][a - 1] + cost(a, b, reuse)
                    if c < best[a][b]:
                        best[a][b], back[a][b] = c, a0
        a = min(range(n), key=lambda i: best[i][n - 1])
        groups, b = [], n - 1
        while True:
            groups.append(([order[i] for i in range(a, b + 1)], prefix[a][b]))
            if a == 0:
                break
            a, b = back[a][b], a - 1
        return groups[::-1]

    def _prefill_group(self, seqs: list[list[int]], logits_to_keep: int, prefix: int, encoded=None):
        """Encode rows whose first ``prefix`` tokens are equal: the prefix once (its cache repeated for
        every row), then each row's rest right-aligned with padding masked. ``encoded``: a list of
        (tokens, per-layer (keys, values)) of prefixes already encoded (rows in token order); the
        longest agreement is continued rather than recomputed, this group's prefix is added, and the
        prefixes no later group can agree with better are dropped. Returns (logits of the last
        ``logits_to_keep`` positions, cache, attention mask)."""
        n, dev = len(seqs), self.device
        cache, done = self._new_cache(), 0
        head = seqs[0][:prefix]
        if prefix and encoded:
            tokens, stored = max(encoded, key=lambda e: _lcp(e[0], head))
            done = _lcp(tokens, head)
            for i, (k, v) in enumerate(stored if done else []):  # cache layers only ever concatenate and
                cache.update(k[..., :done, :], v[..., :done, :], i)  # index, so stored tensors stay intact
        if prefix > done:
            self.model(input_ids=torch.tensor([head[done:]], device=dev),
                       attention_mask=torch.ones(1, prefix, dtype=torch.long, device=dev),
                       position_ids=torch.arange(done, prefix, device=dev)[None],
                       past_key_values=cache, use_cache=True, logits_to_keep=1)
        if encoded is not None:
            # a stored prefix stays useful only where it agrees with this group's last row beyond `prefix`
            encoded[:] = [e for e in encoded if _lcp(e[0], seqs[-1]) > prefix]
            if prefix:
                encoded.append((head, [(layer.keys, layer.values) for layer in cache.layers]))
        if prefix and n > 1:
            cache.batch_repeat_interleave(n)
        width = max(len(s) for s in seqs) - prefix
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, s in enumerate(seqs):
            rest = s[prefix:]
            ids[i, width - len(rest):] = torch.tensor(rest, dtype=torch.long)
            mask[i, width - len(rest):] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        position_ids = prefix + (mask.cumsum(-1) - 1).clamp(min=0)
        attention = torch.cat([torch.ones((n, prefix), dtype=torch.long, device=dev), mask], dim=1)
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=position_ids,
                         past_key_values=cache, use_cache=True, logits_to_keep=logits_to_keep)
        self.prefill_tokens += prefix - done + sum(len(s) - prefix for s in seqs)
        return out.logits, cache, attention

    def _encode(self, seqs: list[list[int]], logits_to_keep: int, limits: list[int] | None = None):
        """Encode a batch group by group; yields (row indices, logits of the group's last
        ``logits_to_keep`` positions, its cache, its attention mask) per group.

        Prefix reuse (:meth:`_prefix_groups`): rows are encoded in groups that share a prefix, each
        group's prefix once. A row reuses at most ``limits[j]`` prompt tokens (default len -
        logits_to_keep). Caches that cannot be stacked (sliding-window or recurrent layers) are encoded as
        one group with the prefix common to all rows."""
        n = len(seqs)
        lens = [len(s) for s in seqs]
        limits = [l - logits_to_keep for l in lens] if limits is None else limits
        groups = self._prefix_groups(seqs, limits) if n > 1 else [([0], 0)]
        if len(groups) > 1 and self._stackable():
            encoded: list = []  # the prefixes encoded so far, continued by later groups
            for rows, prefix in groups:
                yield (rows, *self._prefill_group([seqs[i] for i in rows], logits_to_keep, prefix, encoded))
            return
        common = 0  # one group: the prefix common to all rows
        if n > 1:
            shared = min(min(limits), min(lens))
            while common < shared and all(s[common] == seqs[0][common] for s in seqs):
                common += 1
            if (n - 1) * common < self.min_shared_prefix:
                common = 0
        yield (list(range(n)), *self._prefill_group(seqs, logits_to_keep, common))

    def _prefill(self, seqs: list[list[int]], logits_to_keep: int, limits: list[int] | None = None,
                 room: int = 0):
        """Encode a batch for decoding (:meth:`_encode`); returns (logits of the last `logits_to_keep`
        positions, cache, attention mask, position of each row's last token). Several groups' caches are
        left-padded to one width (padding masked) and stacked, so decoding runs over the whole batch at
        once; ``room``: positions to reserve in stacked caches for decoding."""
        parts = list(self._encode(seqs, logits_to_keep, limits))
        last_pos = torch.tensor([len(s) for s in seqs], device=self.device) - 1
        if len(parts) == 1:
            return (*parts[0][1:], last_pos)
        return (*self._merge(parts, len(seqs), room), last_pos)

    def _prefill_logits(self, seqs: list[list[int]], logits_to_keep: int,
                        limits: list[int] | None = None) -> list[torch.Tensor]:
        """Encode a batch for its logits alone (teacher forcing, next-token distributions): per row, the
        logits of its last positions ([<= logits_to_keep, V]; at least as many as the row has tokens past
        its ``limits`` entry), views of its group's output. Nothing is stacked: no decode cache and no
        zero-padded [n, logits_to_keep, V] tensor, and each group's cache is freed once encoded."""
        rows: list = [None] * len(seqs)
        for idx, logits, *_ in self._encode(seqs, logits_to_keep, limits):
            for j, i in enumerate(idx):
                rows[i] = logits[j]
        return rows

    def _stackable(self) -> bool:
        """Whether this model's caches can be padded and stacked (plain full-attention layers only)."""
        if self._stack_ok is None:
            from transformers.cache_utils import DynamicLayer

            cache = self._new_cache()
            self.model(input_ids=torch.tensor([[self.pad_token_id]], device=self.device), past_key_values=cache,
                       use_cache=True, logits_to_keep=1)
            layers = getattr(cache, "layers", None)
            self._stack_ok = bool(layers) and all(
                type(layer) is DynamicLayer and isinstance(getattr(layer, "keys", None), torch.Tensor)
                for layer in layers)
        return self._stack_ok

    def _merge(self, parts, n: int, room: int = 0):
        """Stack group caches (left-padded to one width), logits and masks into the caller's row order.
        Each is written once into its final buffer; the caches become :class:`ReservedLayer` s with
        room for ``room`` more positions (the answer to decode)."""
        width = max(attention.shape[1] for _, _, _, attention in parts)
        index = [torch.tensor(rows, device=self.device) for rows, _, _, _ in parts]
        cache = parts[0][2]

        def stack(tensors: list[torch.Tensor], extra: int = 0) -> torch.Tensor:  # [rows, ..., s, d] each
            t0 = tensors[0]
            out = t0.new_empty(n, *t0.shape[1:-2], width + extra, t0.shape[-1])
            for idx, t in zip(index, tensors):
                s = t.shape[-2]
                out[idx, ..., width - s: width, :] = t
                if s < width:  # padding slots are masked, but must hold finite numbers
                    out[idx, ..., : width - s, :] = 0
            return out

        for l in range(len(cache.layers)):
            keys = stack([c.layers[l].keys for _, _, c, _ in parts], room)
            values = stack([c.layers[l].values for _, _, c, _ in parts], room)
            cache.layers[l] = ReservedLayer.of_buffers(keys, values, width)
        keep = max(lg.shape[1] for _, lg, _, _ in parts)  # a group narrower than logits_to_keep has fewer
        logits = parts[0][1].new_zeros(n, keep, parts[0][1].shape[-1])
        for idx, (_, lg, _, _) in zip(index, parts):
            logits[idx, keep - lg.shape[1]:] = lg
        attention = torch.zeros(n, width, dtype=parts[0][3].dtype, device=self.device)
        for idx, (_, _, _, a) in zip(index, parts):
            attention[idx, width - a.shape[1]:] = a
        return logits, cache, attention

    def _draft(self, history: list[int], budget: int) -> list[int]:
        """Prompt-lookup draft: the tokens that followed the latest earlier occurrence of the history's
        last n-gram (n = prompt_lookup_ngram .. 2) in the prompt or the answer so far; at most
        ``budget`` tokens, [] when nothing matches."""
        budget = min(budget, self.prompt_lookup)
        end = len(history)
        if budget < 1:
            return []
        for n in range(min(self.prompt_lookup_ngram, end - 1), self.prompt_lookup_min_ngram - 1, -1):
            pattern, last = history[end - n:], history[-1]
            for s in range(end - 2, n - 2, -1):  # s: the last token of an earlier copy of the pattern
                if history[s] == last and history[s - n + 1:s + 1] == pattern:
                    return history[s + 1:s + 1 + budget]
        return []

    @torch.inference_mode()
    def _generate_batch(self, seqs: list[list[int]], max_new_tokens: int, temperature: float | None,
                        generators: list[torch.Generator] | None) -> list[Generation]:
        """Decode a batch. Greedy decoding uses prompt-lookup drafts (answers copy from their documents):
        each step feeds every row its pending token plus up to ``prompt_lookup`` drafted tokens, keeps
        the drafted tokens the model itself would have chosen (so the answer is exactly the greedy one)
        and masks the cache slots of rejected drafts out. Entropies and log-probabilities are read at
        the positions that produced each kept token."""
        n = len(seqs)
        lookup = temperature is None and self.prompt_lookup > 0 and self._stackable()  # see _unpadded
        room = max_new_tokens + (self.prompt_lookup if lookup else 0)  # decode writes the cache in place
        logits, cache, attention, last_pos = self._prefill(seqs, logits_to_keep=1, room=room)
        reserve(cache, room)  # a cache not stacked from groups (those are reserved already)
        rows = torch.arange(n, device=self.device)
        history = [list(s) for s in seqs]
        tokens: list[list[int]] = [[] for _ in range(n)]
        ents: list[list[float]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        stops: list[tuple[int, float, float] | None] = [None] * n
        drafts: list[list[int]] = [[] for _ in range(n)]  # the drafted tokens fed with each active row
        fed_step = False  # False for the prefill's logits, True after a decode forward
        while True:
            # logits: [active, 1 + D, V]; position j scores the token after (pending, draft[:j])
            active = rows.tolist()
            if temperature is None:
                choice = logits.argmax(-1).tolist()
            else:
                probs = torch.softmax(logits[:, 0].float() / temperature, dim=-1).cpu()
                # one generator per prompt: a row's samples do not depend on the other rows of the batch
                choice = [torch.multinomial(probs[j], 1, generator=generators[r]).tolist()
                          for j, r in enumerate(active)]
            accepted = []
            for j, d in enumerate(drafts):
                a = 0
                while a < len(d) and choice[j][a] == d[a]:
                    a += 1
                accepted.append(a)
            # statistics only at the positions whose token is kept
            pick_row = torch.tensor([j for j, a in enumerate(accepted) for _ in range(a + 1)], device=self.device)
            pick_pos = torch.tensor([p for a in accepted for p in range(a + 1)], device=self.device)
            picked = torch.tensor([choice[j][p] for j, a in enumerate(accepted) for p in range(a + 1)],
                                  device=self.device)
            entropy, logp = _entropy_logprob(logits[pick_row, pick_pos], chunk_rows=64)
            tok_lp = logp.gather(1, picked[:, None])[:, 0].tolist()
            entropy = entropy.tolist()
            keep, pending, cursor = [], [], 0
            for j, (r, a) in enumerate(zip(active, accepted)):
                alive = True
                for p in range(a + 1):
                    t, e, l = choice[j][p], entropy[cursor + p], tok_lp[cursor + p]
                    if not alive:
                        continue
                    if t in self._stop_set:
                        stops[r], alive = (t, e, l), False
                    else:
                        tokens[r].append(t)
                        history[r].append(t)
                        ents[r].append(e)
                        lps[r].append(l)
                        alive = len(tokens[r]) < max_new_tokens
                cursor += a + 1
                keep.append(alive)
                pending.append(choice[j][a])
            if drafts and max(map(len, drafts)):
                # cache slots of the rejected drafts (and of draft padding) never count again
                width = 1 + max(map(len, drafts))
                valid = torch.arange(width, device=self.device)[None] <= torch.tensor(accepted, device=self.device)[:, None]
                attention[:, -width:] = valid.to(attention.dtype)
            if fed_step:  # the pending token and the accepted drafts are now in the cache
                last_pos = last_pos + torch.tensor([a + 1 for a in accepted], device=last_pos.device)
            if not any(keep):
                break
            if not all(keep):
                idx = torch.tensor([j for j, k in enumerate(keep) if k], device=self.device)
                cache.batch_select_indices(idx)
                attention, last_pos, rows = attention[idx], last_pos[idx], rows[idx]
                pending = [t for t, k in zip(pending, keep) if k]
            active = rows.tolist()
            drafts = [self._draft(history[r], max_new_tokens - len(tokens[r]) - 1) if lookup else [] for r in active]
            width = 1 + max(map(len, drafts))
            ids = torch.full((len(active), width), self.pad_token_id, dtype=torch.long)
            fed = torch.zeros((len(active), width), dtype=torch.long)
            for j, (t, d) in enumerate(zip(pending, drafts)):
                ids[j, : 1 + len(d)] = torch.tensor([t, *d], dtype=torch.long)
                fed[j, : 1 + len(d)] = 1
            ids, fed = ids.to(self.device), fed.to(self.device)
            attention = torch.cat([attention, fed], dim=1)
            positions = last_pos[:, None] + 1 + torch.arange(width, device=self.device)[None]
            out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions,
                             past_key_values=cache, use_cache=True)
            logits, fed_step = out.logits, True
            self.lookup_steps += 1
            self.lookup_drafted += sum(map(len, drafts))
        results = []
        for i in range(n):
            stop_info = stops[i] or (None, None, None)
            results.append(Generation(
                token_ids=tokens[i], entropy=torch.tensor(ents[i], dtype=torch.float32),
                logprob=torch.tensor(lps[i], dtype=torch.float32), stop_token_id=stop_info[0],
                stop_entropy=stop_info[1], stop_logprob=stop_info[2], text=self.decode(tokens[i]),
            ))
        return results

    @torch.inference_mode()
    def _token_stats_batch(self, prompts: list[list[int]], conts: list[list[int]]) -> list[TokenStats]:
        keep = max(len(c) for c in conts)
        seqs = [p + c[:-1] for p, c in zip(prompts, conts)]
        logits = self._prefill_logits(seqs, logits_to_keep=keep, limits=[len(p) - 1 for p in prompts])
        out = []
        for i, cont in enumerate(conts):
            row_logits = logits[i][-len(cont):]
            entropy, logp = _entropy_logprob(row_logits)
            target = torch.tensor(cont, device=logp.device)
            out.append(TokenStats(list(cont), entropy.cpu(), logp.gather(1, target[:, None])[:, 0].cpu()))
        return out

    # ------------------------------------------------------------------ public primitives
    def _check_prompts(self, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
        if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
            raise TypeError("prompts must be a list of token-id lists (render text with grogu.prompts)")
        out = []
        for p in prompts:
            if isinstance(p, (str, bytes)):
                raise TypeError("prompts must be token ids, not text (render text with grogu.prompts)")
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
    ) -> list[Generation]:
        """Generate one answer per prompt; greedy when ``temperature`` is None, else sampled.

        Returns per prompt a :class:`Generation` with each answer token's entropy (nats) and
        log-probability under the untempered model distribution. Sampling is reproducible for a given
        ``seed``: each prompt's samples depend only on the seed, the prompt and how many identical
        prompts precede it in the call, not on the other prompts or on batching.
        """
        prompts = self._check_prompts(prompts)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        temperature = check_temperature(temperature, "temperature (None: greedy decoding)", allow_none=True)
        seed = check_seed(seed)
        if not prompts:
            return []
        with self._lock, self.kernels():
            generators = None
            if temperature is not None:
                generators = _row_generators(prompts, seed if seed is not None else torch.seed())
            lengths = [len(p) + max_new_tokens for p in prompts]
            batches = self._unpadded(self._plan(lengths, prompts=prompts), lengths)
            res = self._run(batches, lambda b: dict(zip(b, self._generate_batch(
                [prompts[i] for i in b], max_new_tokens, temperature,
                None if generators is None else [generators[i] for i in b]))))
        return [res[i] for i in range(len(prompts))]

    def token_stats(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[TokenStats]:
        """Teacher-forced statistics of ``continuations[i]`` after ``prompts[i]``.

        For token c_j the entropy (nats) and log-probability are those of the next-token distribution
        given prompt + c_<j. Empty continuations give empty statistics.
        """
        prompts = self._check_prompts(prompts)
        conts = [[int(t) for t in c] for c in continuations]
        if len(conts) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(conts)} continuations")
        todo = [i for i, c in enumerate(conts) if c]
        empty = torch.zeros(0, dtype=torch.float32)
        res: dict[int, TokenStats] = {i: TokenStats([], empty, empty) for i, c in enumerate(conts) if not c}
        if todo:
            lengths = [len(prompts[i]) + len(conts[i]) for i in todo]
            with self._lock, self.kernels():
                batches = self._unpadded(self._plan(lengths, logit_rows=[len(conts[i]) for i in todo],
                                                    prompts=[prompts[i] for i in todo]), lengths)
                batches = [[todo[j] for j in b] for b in batches]
                res.update(self._run(batches, lambda b: dict(zip(b, self._token_stats_batch(
                    [prompts[i] for i in b], [conts[i] for i in b])))))
        return [res[i] for i in range(len(prompts))]

    def next_token_logprobs(self, prompts: Sequence[Sequence[int]],
                            token_ids: Sequence[int] | None = None) -> torch.Tensor:
        """Log-probabilities (float32, on CPU) of the next token after each prompt: [n, vocab], or
        [n, len(token_ids)] for just the given tokens."""
        prompts = self._check_prompts(prompts)
        cols = None if token_ids is None else torch.tensor(list(token_ids), dtype=torch.long)
        if not prompts:
            return torch.zeros(0, self.vocab_size if cols is None else len(cols))

        @torch.inference_mode()
        def run(batch: list[int]) -> dict[int, torch.Tensor]:
            logits = self._prefill_logits([prompts[i] for i in batch], logits_to_keep=1)
            logp = torch.log_softmax(torch.stack([row[-1] for row in logits]).float(), dim=-1).cpu()
            if cols is not None:
                logp = logp[:, cols]
            return dict(zip(batch, logp))

        with self._lock, self.kernels():
            lengths = [len(p) for p in prompts]
            res = self._run(self._unpadded(self._plan(lengths), lengths), run)
        return torch.stack([res[i] for i in range(len(prompts))])


_SHARED: dict[tuple, Engine] = {}
_SHARED_LOCK = threading.Lock()


def get_engine(model: Any = DEFAULT_MODEL, *, device: str | None = None, dtype: str | None = None,
               **kwargs: Any) -> Engine:
    """The process-wide engine for (model, device, dtype): loaded once, shared by every caller.

    ``model`` may be an Engine (returned as is), a name/path, or a loaded (model, tokenizer) pair.
    """
    if isinstance(model, Engine):
        return model
    key_model = model if isinstance(model, str) else tuple(id(m) for m in model)
    key = (key_model, str(device), str(dtype), tuple(sorted(kwargs.items())))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = Engine(model, device=device, dtype=dtype, **kwargs)
        return _SHARED[key]
