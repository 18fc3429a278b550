"""Prefill with shared prefixes: rows grouped by common prefix (a prefix tree), each group's prefix
encoded once and continued by later groups, the groups' caches stacked to decode together. Which rows
form a group is plain logic on token lists, in :mod:`grogu.runtime.engine.prefixtree`.

:class:`PrefixPrefill` runs the model. It gives, per batch of token lists:

- :meth:`~PrefixPrefill.encode`: an :class:`EncodedGroup` per prefix group (its rows' logits, KV
  cache and attention mask);
- :meth:`~PrefixPrefill.logits`: each row's logits alone (teacher forcing, next-token distributions);
- :meth:`~PrefixPrefill.for_decoding`: a :class:`PrefilledBatch`, the groups stacked into one cache
  with room reserved for the answer, which is what the decode loop (:mod:`grogu.runtime.engine.decode`) starts
  from.

With ``retain_prefix_tokens`` > 0 (off by default), prompts encoded for decoding are kept for later
calls, the latest first: a later prompt that starts the same way continues their cache. A doubtful
query's other candidates keep its first documents in place, so they continue the first answer's prompt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from .config import EngineConfig
from .kvcache import SLOT_MASKS, DynamicLayer, ReservedLayer, attention_kind, forward_with_cache, new_cache, reserve
from .prefixtree import PrefixGroup, common_prefix, prefix_groups


@dataclass
class EncodedGroup:
    """Rows of a batch encoded together (one prefix group, or the stack of all of them).

    Each row's tokens are right-aligned: a row shorter than the group's widest has masked padding
    slots before its rest (after the shared prefix)."""

    rows: list[int]  # indices into the batch; row j of the tensors below is batch row rows[j]
    logits: torch.Tensor  # [rows, <= logits_to_keep, vocab]: the logits of the last positions
    cache: Any  # a transformers Cache; per layer keys/values [rows, kv_heads, width, head_dim]
    attention: torch.Tensor  # [rows, width]: 1 where the cache holds a row's token, 0 at padding


@dataclass
class PrefilledBatch:
    """A batch encoded for decoding: what the decode loop (:mod:`grogu.runtime.engine.decode`) starts from."""

    logits: torch.Tensor  # [rows, 1, vocab]: the logits after each row's last token
    cache: Any  # a transformers Cache with room for the answer; keys/values [rows, kv_heads, width, head_dim]
    attention: torch.Tensor  # [rows, width]: 1 where the cache holds a row's token, 0 at padding
    last_pos: torch.Tensor  # [rows]: the position id of each row's last token


@dataclass
class _StoredPrefix:
    """A prefix encoded earlier in the batch, kept for later groups to continue."""

    tokens: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]  # per layer (keys, values) [1, kv_heads, len(tokens), head_dim]


class PrefixPrefill:
    """Encodes batches of token lists with ``model``, group by group, sharing prefixes (see the module
    docstring). Runs ``model`` as it is: the caller provides the context (inference mode, kernels).

    Args:
        model: the causal LM (a transformers ``PreTrainedModel``).
        pad_token_id: the token written into padding slots (masked, so never attended to).

    Attributes:
        encoded_tokens: prompt tokens encoded so far, padding excluded (diagnostics; may be reset).
    """

    def __init__(self, model: Any, pad_token_id: int) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_token_id = pad_token_id
        self.encoded_tokens = 0
        self._stackable: bool | None = None  # found on first use (it takes a forward pass)
        self.retained: list[_StoredPrefix] = []  # prompts kept for later calls, the latest last

    def _new_cache(self):
        return new_cache(self.model)

    @property
    def stackable(self) -> bool:
        """Whether this model's caches can be padded and stacked (plain full-attention layers only).

        Sliding-window layers (Gemma 2/3, Mistral) count their window in cache slots, not in token
        positions, so a padding slot or a rejected draft inside the window hides a real token, and a
        recurrent layer reads padding as input: for those models a batch must hold rows of one length
        only (their prefix is still shared, as one group) and decoding must use no drafts. So must a
        model whose attention implementation takes no 4-D mask (flash attention: only 'sdpa' and
        'eager' do), as the decode loop writes each row's slots and masks itself."""
        if self._stackable is None:
            cache = self._new_cache()
            with torch.inference_mode():
                forward_with_cache(
                    self.model,
                    cache,
                    input_ids=torch.tensor([[self.pad_token_id]], device=self.device),
                    use_cache=True,
                    logits_to_keep=1,
                )
            layers = getattr(cache, "layers", None)
            self._stackable = (
                bool(layers)
                and all(
                    type(layer) is DynamicLayer and isinstance(getattr(layer, "keys", None), torch.Tensor)
                    for layer in layers
                )
                and attention_kind(self.model) in SLOT_MASKS
            )
        return self._stackable

    # ------------------------------------------------------------------ one group
    def _encode_group(
        self,
        seqs: list[list[int]],
        logits_to_keep: int,
        prefix: int,
        stored: list[_StoredPrefix] | None = None,
        kept: Sequence[_StoredPrefix] = (),
    ) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Encode rows whose first ``prefix`` tokens are equal: the prefix once (its cache repeated for
        every row), then each row's rest right-aligned with padding masked. ``stored``: prefixes already
        encoded (rows in token order); the longest agreement is continued rather than recomputed, this
        group's prefix is added, and the prefixes no later group can agree with better are dropped.
        ``kept``: prefixes kept from earlier calls (:attr:`retained`), continued likewise, never dropped here.
        Returns (logits [rows, logits_to_keep, vocab], cache, attention mask [rows, prefix + rest])."""
        n, dev = len(seqs), self.device
        cache, done = self._new_cache(), 0
        head = seqs[0][:prefix]
        if prefix and (stored or kept):
            best = max([*(stored or ()), *kept], key=lambda e: common_prefix(e.tokens, head))
            done = common_prefix(best.tokens, head)
            for i, (k, v) in enumerate(best.layers if done else []):  # cache layers only ever concatenate and
                cache.update(k[..., :done, :], v[..., :done, :], i)  # index, so stored tensors stay intact
        if prefix > done:
            forward_with_cache(
                self.model,
                cache,
                input_ids=torch.tensor([head[done:]], device=dev),
                attention_mask=torch.ones(1, prefix, dtype=torch.long, device=dev),
                position_ids=torch.arange(done, prefix, device=dev)[None],
                use_cache=True,
                logits_to_keep=1,
            )
        if stored is not None:
            # a stored prefix stays useful only where it agrees with this group's last row beyond `prefix`
            stored[:] = [e for e in stored if common_prefix(e.tokens, seqs[-1]) > prefix]
            if prefix:
                stored.append(_StoredPrefix(head, [(layer.keys, layer.values) for layer in cache.layers]))
        if prefix and n > 1:
            cache.batch_repeat_interleave(n)
        width = max(len(s) for s in seqs) - prefix
        ids = torch.full((n, width), self.pad_token_id, dtype=torch.long)  # [rows, width]
        mask = torch.zeros((n, width), dtype=torch.long)  # [rows, width]
        for i, s in enumerate(seqs):
            rest = s[prefix:]
            ids[i, width - len(rest) :] = torch.tensor(rest, dtype=torch.long)
            mask[i, width - len(rest) :] = 1
        ids, mask = ids.to(dev), mask.to(dev)
        position_ids = prefix + (mask.cumsum(-1) - 1).clamp(min=0)  # [rows, width]
        attention = torch.cat([torch.ones((n, prefix), dtype=torch.long, device=dev), mask], dim=1)
        out = forward_with_cache(
            self.model,
            cache,
            input_ids=ids,
            attention_mask=attention,
            position_ids=position_ids,
            use_cache=True,
            logits_to_keep=logits_to_keep,
        )
        self.encoded_tokens += prefix - done + sum(len(s) - prefix for s in seqs)
        return out.logits, cache, attention

    # ------------------------------------------------------------------ a batch
    def encode(
        self, seqs: list[list[int]], logits_to_keep: int, config: EngineConfig, limits: list[int] | None = None
    ) -> Iterator[EncodedGroup]:
        """Encode a batch group by group; yields an :class:`EncodedGroup` per group, whose logits are
        those of its rows' last ``logits_to_keep`` positions.

        Rows are encoded in groups that share a prefix (:func:`~grogu.runtime.engine.prefixtree.prefix_groups`
        under ``config.min_shared_prefix`` and ``config.group_overhead_tokens``), each group's prefix
        once. A row reuses at most ``limits[j]`` prompt tokens (default len - logits_to_keep). Caches
        that cannot be stacked (:attr:`stackable`) are encoded as one group with the prefix common to
        all rows."""
        n = len(seqs)
        lens = [len(s) for s in seqs]
        limits = [l - logits_to_keep for l in lens] if limits is None else limits
        groups = (
            prefix_groups(
                seqs,
                limits,
                min_shared_prefix=config.min_shared_prefix,
                group_overhead_tokens=config.group_overhead_tokens,
            )
            if n > 1
            else [PrefixGroup([0], 0)]
        )
        retained = list(self.retained) if config.retain_prefix_tokens and self.stackable else []
        if len(groups) > 1 and self.stackable:
            stored: list[_StoredPrefix] = []  # the prefixes encoded so far, continued by later groups
            for rows, prefix in groups:
                group = [seqs[i] for i in rows]
                yield EncodedGroup(rows, *self._encode_group(group, logits_to_keep, prefix, stored, retained))
            return
        common = 0  # one group: the prefix common to all rows
        cap = max(0, min(min(limits), min(lens)))
        if n > 1:
            common = min(cap, *(common_prefix(seqs[0], s) for s in seqs[1:]))
            if (n - 1) * common < config.min_shared_prefix:
                common = 0
        elif retained:  # one row: its prefix from an earlier call, when that saves more than a forward call
            reuse = min(cap, max(common_prefix(e.tokens, seqs[0]) for e in retained))
            if reuse >= max(config.min_shared_prefix, config.group_overhead_tokens or 0):
                common = reuse
        yield EncodedGroup(list(range(n)), *self._encode_group(seqs, logits_to_keep, common, None, retained))

    def for_decoding(self, seqs: list[list[int]], room: int, config: EngineConfig) -> PrefilledBatch:
        """Encode a batch for decoding (:meth:`encode`, the last position's logits): several groups'
        caches are left-padded to one width (padding masked) and stacked (:func:`stack_groups`), so
        decoding runs over the whole batch at once; the cache has room for ``room`` more positions."""
        groups = list(self.encode(seqs, 1, config))
        if config.retain_prefix_tokens and self.stackable:
            self._retain(seqs, groups, config.retain_prefix_tokens)
        batch = groups[0] if len(groups) == 1 else stack_groups(groups, len(seqs), room)
        reserve(batch.cache, room)  # a cache not stacked from groups (those have their room already)
        last_pos = torch.tensor([len(s) for s in seqs], device=self.device) - 1  # [rows]
        return PrefilledBatch(batch.logits, batch.cache, batch.attention, last_pos)

    def _retain(self, seqs: list[list[int]], groups: list[EncodedGroup], budget: int) -> None:
        """Keep each one-row group's prompt (and each group's shared prefix) for later calls, the latest
        last, at most ``budget`` tokens in all; a kept prompt another one starts with is dropped."""
        new = []
        for g in groups:
            width = g.attention.shape[1]
            if len(g.rows) == 1:
                tokens = seqs[g.rows[0]]
                layers = [(layer.keys, layer.values) for layer in g.cache.layers]
            else:  # the group's shared prefix: the leading slots every row attends to
                shared = int(g.attention.min(0).values.cumprod(0).sum())
                rows = [seqs[i] for i in g.rows]
                shared = min(shared, min(common_prefix(rows[0], r) for r in rows))
                if shared < 1:
                    continue
                tokens = rows[0][:shared]
                layers = [
                    (layer.keys[:1, :, :shared].clone(), layer.values[:1, :, :shared].clone())
                    for layer in g.cache.layers
                ]
            if len(tokens) <= budget and width >= len(tokens):
                new.append(
                    _StoredPrefix(
                        list(tokens), [(k[..., : len(tokens), :], v[..., : len(tokens), :]) for k, v in layers]
                    )
                )
        kept = self.retained + new
        kept = [
            e
            for i, e in enumerate(kept)
            if not any(common_prefix(e.tokens, f.tokens) == len(e.tokens) for f in kept[i + 1 :])
        ]
        while kept and sum(len(e.tokens) for e in kept) > budget:
            kept.pop(0)
        self.retained = kept

    def logits(
        self, seqs: list[list[int]], logits_to_keep: int, config: EngineConfig, limits: list[int] | None = None
    ) -> list[torch.Tensor]:
        """Encode a batch for its logits alone (teacher forcing, next-token distributions): per row, the
        logits of its last positions ([<= logits_to_keep, vocab]; at least as many as the row has tokens
        past its ``limits`` entry), views of its group's output. Nothing is stacked: no decode cache and
        no zero-padded [rows, logits_to_keep, vocab] tensor, and each group's cache is freed once encoded."""
        rows: list = [None] * len(seqs)
        for group in self.encode(seqs, logits_to_keep, config, limits):
            for j, i in enumerate(group.rows):
                rows[i] = group.logits[j]
        return rows


def stack_groups(groups: list[EncodedGroup], n: int, room: int = 0) -> EncodedGroup:
    """The groups of a batch of ``n`` rows as one group in row order: caches left-padded to the widest
    and stacked, logits and masks likewise. Each tensor is written once into its final buffer; the
    cache layers become :class:`~grogu.runtime.engine.kvcache.ReservedLayer` s with room for ``room`` more
    positions (the answer to decode). The first group's cache object is reused."""
    device = groups[0].attention.device
    width = max(g.attention.shape[1] for g in groups)
    index = [torch.tensor(g.rows, device=device) for g in groups]
    cache = groups[0].cache

    def stack(tensors: list[torch.Tensor], extra: int = 0) -> torch.Tensor:  # [rows, ..., s, d] each
        t0 = tensors[0]
        out = t0.new_empty(n, *t0.shape[1:-2], width + extra, t0.shape[-1])  # [n, ..., width + extra, d]
        for idx, t in zip(index, tensors):
            s = t.shape[-2]
            out[idx, ..., width - s : width, :] = t
            if s < width:  # padding slots are masked, but must hold finite numbers
                out[idx, ..., : width - s, :] = 0
        out[..., width:, :] = 0  # so must the room a decode step reads before writing it
        return out

    for l in range(len(cache.layers)):
        keys = stack([g.cache.layers[l].keys for g in groups], room)
        values = stack([g.cache.layers[l].values for g in groups], room)
        cache.layers[l] = ReservedLayer.of_buffers(keys, values, width)
    keep = max(g.logits.shape[1] for g in groups)  # a group narrower than logits_to_keep has fewer
    logits = groups[0].logits.new_zeros(n, keep, groups[0].logits.shape[-1])  # [n, keep, vocab]
    for idx, g in zip(index, groups):
        logits[idx, keep - g.logits.shape[1] :] = g.logits
    attention = torch.zeros(n, width, dtype=groups[0].attention.dtype, device=device)  # [n, width]
    for idx, g in zip(index, groups):
        attention[idx, width - g.attention.shape[1] :] = g.attention
    return EncodedGroup(list(range(n)), logits, cache, attention)
