"""A decode-time KV cache layer with room reserved for the answer, written slot by slot.

transformers' ``DynamicLayer`` appends each decode step's keys and values with ``torch.cat``, which
copies the whole cache of every layer at every step (and allocates it anew). :class:`ReservedLayer`
keeps the same tensors in one buffer with spare room along the sequence axis, zero-filled (a masked
slot must still hold finite numbers: attention multiplies it by a zero weight).

It writes in one of two ways:

- appending (``write_index`` None), as ``DynamicLayer`` does: a step's slots follow the filled part,
  and attention reads a view of it;
- at given slots (``write_index``, a [batch, width] tensor of slot numbers on the device, which the
  decode loop (:mod:`grogu.runtime.engine.decode`) updates in place): each row writes its step where its own
  answer ends, over the slots of drafts it rejected, so rows need not advance alike; attention reads
  the first ``limit`` slots (the whole buffer when ``limit`` is None), the decode loop's mask saying
  which of them each row sees. Nothing in this path reads a number back to the host, so a decode step
  can be captured in a CUDA graph.

What the engine relies on in transformers, all named in this module:

- ``transformers.DynamicCache`` (:func:`new_cache`): made empty, with ``config=`` where its constructor
  takes one; its ``update(keys, values, layer)``, ``batch_repeat_interleave(n)`` and ``layers`` list,
  which :func:`reserve` rewrites in place;
- ``transformers.cache_utils.DynamicLayer``: its ``keys`` / ``values`` ([batch, heads, seq, dim]) and the
  methods :class:`ReservedLayer` overrides (``update``, ``get_seq_length``, ``reset``, ``crop``,
  ``batch_select_indices``, ``batch_repeat_interleave``);
- the model's ``forward`` keyword for the cache: ``cache`` (transformers 5.24) or ``past_key_values``
  (:func:`forward_with_cache`); and ``logits_to_keep``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

_CACHE_TAKES_CONFIG = "config" in inspect.signature(DynamicCache.__init__).parameters


def new_cache(model: Any) -> DynamicCache:
    """An empty ``DynamicCache`` for ``model`` (given its config where this transformers takes one)."""
    return DynamicCache(config=model.config) if _CACHE_TAKES_CONFIG else DynamicCache()


#: attention implementations whose 4-D masks the decode loop writes for a slot cache (a boolean mask for
#: SDPA, an additive float one for eager attention); a model with another keeps its rows one length
#: (:attr:`grogu.runtime.engine.prefill.PrefixPrefill.stackable`)
SLOT_MASKS = ("sdpa", "eager")


@functools.lru_cache(maxsize=None)
def _cache_keyword(model_type: type) -> str:
    forward = inspect.signature(model_type.forward).parameters
    return "cache" if "cache" in forward else "past_key_values"


def forward_with_cache(model: Any, cache: Any, **inputs: Any) -> Any:
    """``model(**inputs)`` continuing ``cache``, under the keyword this transformers takes: ``cache`` where
    the model's ``forward`` has it (transformers 5.24 renamed ``past_key_values``, which it removes in
    5.40), else ``past_key_values``. Every forward pass of the engine goes through here."""
    return model(**{_cache_keyword(type(model)): cache}, **inputs)


def attention_kind(model: Any) -> str:
    """The model's attention implementation as transformers names it ('sdpa', 'eager', ...)."""
    return str(getattr(getattr(model, "config", None), "_attn_implementation", None) or "eager")


class ReservedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values ([batch, heads, seq, dim]) live in a buffer with room
    for ``extra`` more positions (zero-filled); it grows (doubling the room) if an appending step needs more.

    Attributes:
        write_index: None (append), or a [batch, width] long tensor: the slot of each row's each new position.
        limit: with ``write_index``, how many slots attention reads (None: the whole buffer).
    """

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, extra: int) -> None:
        self._k = self._v = None  # before the base class assigns keys/values = None
        self._n = 0
        self.write_index: torch.Tensor | None = None
        self.limit: int | None = None
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._fill(keys, values, extra)

    @classmethod
    def of_buffers(cls, keys: torch.Tensor, values: torch.Tensor, length: int) -> "ReservedLayer":
        """A layer over ready buffers whose first ``length`` positions are filled (the rest is room,
        which must hold finite numbers)."""
        layer = cls(keys[:, :, :0], values[:, :, :0], 0)  # empty, then adopt the buffers without copying
        layer._k, layer._v, layer._n = keys, values, length
        return layer

    def _fill(self, keys: torch.Tensor, values: torch.Tensor, extra: int) -> None:
        b, h, s, _ = keys.shape
        k = keys.new_zeros(b, h, s + extra, keys.shape[-1])
        v = values.new_zeros(b, values.shape[1], s + extra, values.shape[-1])
        k[:, :, :s] = keys
        v[:, :, :s] = values
        self._k, self._v, self._n = k, v, s

    @property
    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole key and value buffers, filled or not ([batch, heads, capacity, dim] each)."""
        return self._k, self._v

    @property
    def capacity(self) -> int:
        """Slots in the buffer, filled or not."""
        return self._k.shape[-2]

    # keys / values read as views of the filled part; the base class assigns None to them on init
    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._k is None else self._k[:, :, : self._visible()]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("ReservedLayer keys are written through update()")

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self._visible()]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("ReservedLayer values are written through update()")

    def _visible(self) -> int:
        if self.write_index is None:
            return self._n
        return self._k.shape[-2] if self.limit is None else self.limit

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if self.write_index is not None:  # each row's slots, read from the device
            index = self.write_index[:, None, :, None]  # [batch, 1, width, 1]
            self._k.scatter_(2, index.expand_as(key_states), key_states)
            self._v.scatter_(2, index.expand(*value_states.shape), value_states)
            return self.keys, self.values
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


def slot_layers(cache) -> list[ReservedLayer] | None:
    """The cache's layers when every one is a :class:`ReservedLayer` (it can be written slot by slot), else None."""
    layers = list(getattr(cache, "layers", None) or [])
    return layers if layers and all(type(layer) is ReservedLayer for layer in layers) else None
