"""Sampled decoding's draws, on the model's device, from counter-based random numbers.

A row's t-th token is drawn from one uniform number ``u``, a function of the row's key and ``t`` alone
(:func:`uniforms`): a hash of integers, so it needs no generator state. That makes a row's samples

- independent of the other rows of its batch, and of how a call is split into batches;
- the same on any device (integer arithmetic is exact), and the same in the eager decode loop and in a
  CUDA graph, which replays the hash like any other kernel.

The token is the inverse of the tempered distribution's cumulative sum at ``u`` (float64 sums; ``u`` has
53 random bits): an exact draw from ``softmax(logits / temperature)`` up to float64 rounding.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import torch

_M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding of a batch: ``temperature`` and one key per row (:func:`row_keys`), so that a
    row's samples do not depend on the other rows of the batch."""

    temperature: float
    keys: list[int]  # one per row of the batch, in [0, 2**63)


def row_keys(prompts: Sequence[Sequence[int]], seed: int, numbers: Sequence[int] | None = None) -> list[int]:
    """One key per prompt (for :class:`Sampling`), from (seed, the prompt's tokens, how many identical
    prompts come before it, or ``numbers[i]`` when given): each prompt's samples are reproducible
    whatever else is in the call, and whatever batches the call is split into."""
    if numbers is not None and len(numbers) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(numbers)} sample numbers")
    seen: dict[tuple[int, ...], int] = {}
    out = []
    for i, p in enumerate(prompts):
        key = tuple(p)
        nth = seen.get(key, 0) if numbers is None else int(numbers[i])
        seen[key] = nth + 1
        digest = hashlib.blake2b(repr((int(seed), key, nth)).encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little") & (2**63 - 1))
    return out


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c`` modulo 2**32 for ``x`` in [0, 2**32), in int64 without overflow (16-bit halves)."""
    return (((x & 0xFFFF) * c) + ((((x >> 16) * c) & 0xFFFF) << 16)) & _M32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser (a bijection of [0, 2**32) with full avalanche)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def uniforms(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """One float64 in [0, 1) per (key, counter) pair (int64 tensors of one shape; keys in [0, 2**63),
    counters in [0, 2**32)), with 53 random bits: two 32-bit words hashed from the key's halves and the
    counter, chained through :func:`_mix32`."""
    lo, hi = keys & _M32, keys >> 32
    a = _mix32(_mix32(_mix32(counters & _M32) ^ lo) ^ hi)
    b = _mix32(_mix32(a ^ 0x9E3779B9) ^ lo)
    return ((a << 21) | (b >> 11)).double() * 2.0**-53


def sample_rows(
    logits: torch.Tensor,
    temperature: float | torch.Tensor,
    keys: torch.Tensor,
    counters: torch.Tensor,
    alive: torch.Tensor,
) -> torch.Tensor:
    """One token per row of ``logits`` [rows, vocab] from ``softmax(logits / temperature)``: row j's
    draw is the inverse of the cumulative distribution at ``uniforms(keys[j], counters[j])``. ``alive``
    ([rows] bool): a row not alive draws nothing. Returns [rows, 2] float32 on the logits' device: the
    token (-1 for a row not alive) and its log-probability under the untempered model. Nothing is copied
    to the host, and nothing here depends on the host, so a CUDA graph can hold it."""
    first = logits.float()
    cdf = torch.softmax(first / temperature, dim=-1).double().cumsum(-1)  # [rows, vocab]
    target = uniforms(keys, counters) * cdf[:, -1]  # [rows]
    tokens = torch.searchsorted(cdf, target[:, None], right=True)[:, 0].clamp(max=cdf.shape[1] - 1)
    logp = first.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(first, dim=-1)  # no [rows, vocab] copy
    return torch.stack([torch.where(alive, tokens, -1).float(), torch.where(alive, logp, 0.0)], dim=1)
