"""The plain, one-document-at-a-time computation: the correctness reference and the speed baseline.

Per grounded prompt: ``model.generate`` (greedy), then one forward pass over grounded prompt + answer
and one over ungrounded prompt + answer, reading entropies and log-probabilities at the answer
positions. No batching, no cache reuse. Tests compare the engine against it; benchmarks time it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass
class NaiveStats:
    token_ids: list[int]
    grounded_entropy: torch.Tensor
    grounded_logprob: torch.Tensor
    ungrounded_entropy: torch.Tensor
    ungrounded_logprob: torch.Tensor
    stop_token_id: int | None
    stop_entropy: float | None


@torch.inference_mode()
def forward_stats(model: Any, prompt: Sequence[int], continuation: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Entropy (nats) and log-probability of each continuation token after prompt: one full forward."""
    dev = next(model.parameters()).device
    ids = torch.tensor([list(prompt) + list(continuation)], device=dev)
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : ids.shape[1] - 1].float()
    logp = torch.log_softmax(logits, -1)
    ent = -torch.special.xlogy(logp.exp(), logp.exp()).sum(-1)
    return ent.cpu(), logp.gather(1, torch.tensor(list(continuation), device=dev)[:, None])[:, 0].cpu()


@torch.inference_mode()
def greedy_generate(
    model: Any, prompt: Sequence[int], max_new_tokens: int, stop_ids: Sequence[int], pad_id: int
) -> list[int]:
    """transformers' own greedy ``generate`` on one prompt; returns the new tokens (stop token kept)."""
    dev = next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=dev)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        do_sample=False,
        num_beams=1,
        temperature=None,
        top_p=None,
        top_k=None,
        repetition_penalty=None,
        eos_token_id=list(stop_ids),
        pad_token_id=pad_id,
    )
    new = out[0, len(prompt) :].tolist()
    for i, t in enumerate(new):
        if t in stop_ids:
            return new[: i + 1]
    return new


def naive_grogu_stats(
    model: Any,
    grounded_prompts: Sequence[Sequence[int]],
    ungrounded_prompt: Sequence[int],
    max_new_tokens: int,
    stop_ids: Sequence[int],
    pad_id: int,
) -> list[NaiveStats]:
    """The statistics GROGU needs, computed one document at a time (generate + 2 forward passes)."""
    results = []
    for prompt in grounded_prompts:
        new = greedy_generate(model, prompt, max_new_tokens, stop_ids, pad_id)
        stop = new[-1] if new and new[-1] in stop_ids else None
        h_g, lp_g = forward_stats(model, prompt, new)  # includes the stop token's step when present
        answer = new[:-1] if stop is not None else new
        teacher = answer if answer else new  # an empty answer is scored on its stop token
        h_u, lp_u = forward_stats(model, ungrounded_prompt, teacher) if teacher else (torch.zeros(0), torch.zeros(0))
        n = len(answer)
        results.append(
            NaiveStats(answer, h_g[:n], lp_g[:n], h_u, lp_u, stop, float(h_g[n]) if stop is not None else None)
        )
    return results
