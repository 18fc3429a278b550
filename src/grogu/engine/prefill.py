"""Prefill with shared prefixes: rows grouped by common prefix (a prefix tree), each group's prefix
encoded once and continued by later groups, the groups' caches stacked to decode together. Which rows
form a group is plain logic on token lists, in :mod:`grogu.engine.prefixtree`."""

from __future__ import annotations

import torch

from .kvcache import ReservedLayer
from .prefixtree import common_prefix, prefix_groups


class PrefixPrefill:
    """Engine part: encodes a batch group by group, sharing prefixes (see the module docstring)."""

    # ------------------------------------------------------------------ forward passes
    def _prefix_groups(self, seqs: list[list[int]], limits: list[int]) -> list[tuple[list[int], int]]:
        """:func:`~grogu.engine.prefixtree.prefix_groups` under this engine's settings."""
        return prefix_groups(seqs, limits, min_shared_prefix=self.min_shared_prefix,
                             group_overhead_tokens=self.group_overhead_tokens)

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
            tokens, stored = max(encoded, key=lambda e: common_prefix(e[0], head))
            done = common_prefix(tokens, head)
            for i, (k, v) in enumerate(stored if done else []):  # cache layers only ever concatenate and
                cache.update(k[..., :done, :], v[..., :done, :], i)  # index, so stored tensors stay intact
        if prefix > done:
            self.model(input_ids=torch.tensor([head[done:]], device=dev),
                       attention_mask=torch.ones(1, prefix, dtype=torch.long, device=dev),
                       position_ids=torch.arange(done, prefix, device=dev)[None],
                       past_key_values=cache, use_cache=True, logits_to_keep=1)
        if encoded is not None:
            # a stored prefix stays useful only where it agrees with this group's last row beyond `prefix`
            encoded[:] = [e for e in encoded if common_prefix(e[0], seqs[-1]) > prefix]
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
            common = max(0, min(min(limits), min(lens), *(common_prefix(seqs[0], s) for s in seqs[1:])))
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
