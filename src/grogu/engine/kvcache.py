"""A decode-time KV cache layer with room reserved for the answer.

transformers' ``DynamicLayer`` appends each decode step's keys and values with ``torch.cat``, which
copies the whole cache of every layer at every step (and allocates it anew). :class:`ReservedLayer`
keeps the same tensors in a buffer with spare room along the sequence axis, so a step writes only its
new slots and attention reads a view; outputs are bit-identical. On SmolLM2-135M (CPU, 10 rows of
~250 tokens) this made a decode step about 8 % faster.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values ([batch, heads, seq, dim]) live in a buffer with room
    for ``extra`` more positions; it grows (doubling the room) if a step needs more."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, extra: int) -> None:
        self._k = self._v = None  # before the base class assigns keys/values = None
        self._n = 0
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._fill(keys, values, extra)

    @classmethod
    def of_buffers(cls, keys: torch.Tensor, values: torch.Tensor, length: int) -> "ReservedLayer":
        """A layer over ready buffers whose first ``length`` positions are filled (the rest is room)."""
        layer = cls(keys[:, :, :0], values[:, :, :0], 0)  # empty, then adopt the buffers without copying
        layer._k, layer._v, layer._n = keys, values, length
        return layer

    def _fill(self, keys: torch.Tensor, values: torch.Tensor, extra: int) -> None:
        b, h, s, _ = keys.shape
        k = keys.new_empty(b, h, s + extra, keys.shape[-1])
        v = values.new_empty(b, values.shape[1], s + extra, values.shape[-1])
        k[:, :, :s] = keys
        v[:, :, :s] = values
        self._k, self._v, self._n = k, v, s

    # keys / values read as views of the filled part; the base class assigns None to them on init
    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[:, :, : self._n]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("ReservedLayer keys are written through update()")

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self._n]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("ReservedLayer values are written through update()")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        s = key_states.shape[-2]
        if self._n + s > self._k.shape[-2]:
            self._fill(self.keys, self.values, max(s, self._k.shape[-2]))
        self._k[:, :, self._n : self._n + s] = key_states
        self._v[:, :, self._n : self._n + s] = value_states
        self._n += s
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._n

    def reset(self) -> None:
        self._k = self._v = None
        self._n = 0
        self.is_initialized = False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        self._n -= min(self._n, abs(tokens_to_remove))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k, self._v = self._k.repeat_interleave(repeats, 0), self._v.repeat_interleave(repeats, 0)


def reserve(cache, extra: int) -> None:
    """Turn every plain ``DynamicLayer`` of ``cache`` into a :class:`ReservedLayer` with room for
    ``extra`` more positions (other layer types are left as they are)."""
    layers = getattr(cache, "layers", None) or []
    for i, layer in enumerate(layers):
        if (
            type(layer) is DynamicLayer
            and isinstance(getattr(layer, "keys", None), torch.Tensor)
            and layer.keys.dim() == 4
        ):
            layers[i] = ReservedLayer(layer.keys, layer.values, extra)
