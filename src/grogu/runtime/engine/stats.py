"""Token statistics from logits: entropy (nats, full vocabulary) and log-probabilities, in float32,
chunk by chunk (never a float32 copy of a whole [rows, vocab] block at once); and the teacher-forced
statistics of continuations from the logits at their positions. Plain tensor code, no model."""

from __future__ import annotations

from typing import Sequence

import torch

from ...core.types import TokenStats


def entropy_logprob(logits: torch.Tensor, tokens: torch.Tensor, chunk_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(entropy, log-probability of ``tokens``) of ``logits`` ([rows, vocab], any float dtype) in
    float32, computed ``chunk_rows`` rows at a time: entropy [rows], the log-probability of
    ``tokens[i]`` (a [rows] long tensor on the logits' device) under row i [rows]."""
    ents, lps = [], []
    for start in range(0, logits.shape[0], chunk_rows):
        logp = torch.log_softmax(logits[start : start + chunk_rows].float(), dim=-1)  # [chunk, vocab]
        # p * log p with 0 * log 0 = 0: clamping -inf to the float minimum keeps the product finite
        ents.append(-(logp.exp() * logp.clamp(min=torch.finfo(logp.dtype).min)).sum(-1))
        lps.append(logp.gather(1, tokens[start : start + chunk_rows, None])[:, 0])
    return torch.cat(ents), torch.cat(lps)


def continuation_stats(
    row_logits: Sequence[torch.Tensor], continuations: Sequence[Sequence[int]], chunk_rows: int
) -> list[TokenStats]:
    """Teacher-forced statistics of each continuation: ``row_logits[i]`` ([>= len(continuations[i]),
    vocab]) holds, in its last ``len(continuations[i])`` rows, the logits that predict each of its
    tokens. Entropies and log-probabilities come back on the CPU."""
    out = []
    for logits, cont in zip(row_logits, continuations):
        target = torch.tensor(cont, device=logits.device)  # [c]
        entropy, logp = entropy_logprob(logits[-len(cont) :], target, chunk_rows)  # [c], [c]
        out.append(TokenStats(list(cont), entropy.cpu(), logp.cpu()))
    return out
