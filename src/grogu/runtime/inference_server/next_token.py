"""Given next tokens' log-probabilities through a server that teacher-forces (ACU's need).

A server returns at most the top k of a next-token distribution. ACU needs the probabilities of its
label tokens, wherever they rank. Teacher forcing gives them exactly: the log-probability of the
one-token answer ``[t]`` after a prompt is the next-token log-probability of ``t`` there. So a target
that teacher-forces (vLLM, SGLang, llama-cpp-python's server, llama-server with its token grammar)
answers :meth:`~grogu.runtime.inference_server.ServerTarget.next_token_logprobs` for given tokens, one
forced token per request. All requests go out at once, and the servers' prefix caches share each
prompt's encoding (vLLM's does not for ``prompt_logprobs`` requests). A chat API cannot: ACU is refused
there when the scorer is made.

An API with a request for all the tokens of one prompt answers in one request per prompt instead
(:meth:`~grogu.runtime.inference_server.protocol.ServerAPI.next_token_rows`; vLLM's
``logprob_token_ids``, :mod:`grogu.runtime.inference_server.vllm`). When the server leaves values out,
grogu teacher-forces each token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ...core.target import ServerCapabilityError, Target

if TYPE_CHECKING:  # annotations only: torch is imported when a request's results are built
    import torch


def check_token_ids(token_ids: Sequence[int] | None, vocab_size: int | None) -> list[int]:
    """The token ids whose log-probabilities are asked for, checked against the vocabulary."""
    if token_ids is None:
        raise ServerCapabilityError(
            "a server returns at most the top k of the next-token distribution: pass token_ids= (the "
            "tokens whose log-probabilities you need), or load the model in process for the whole of it"
        )
    if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Sequence):
        raise TypeError(f"token_ids must be a list of token ids, got {type(token_ids).__name__}")
    cols = []
    for t in token_ids:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (vocab_size and t >= vocab_size):
            raise ValueError(f"token_ids must be ids in [0, {vocab_size}), got {t!r}")
        cols.append(int(t))
    if not cols:
        raise ValueError("token_ids is empty: name at least one token")
    return cols


def next_token_table(
    target: Target, prompts: list[list[int]], cols: list[int], rows: list[list[float]] | None
) -> torch.Tensor:
    """``[len(prompts), len(cols)]``: the ``rows`` an API answered in one request per prompt, else each
    token teacher-forced after each prompt through ``target.token_stats``."""
    import torch

    if rows is not None:
        return torch.tensor(rows, dtype=torch.float32)
    pairs = [(p, [t]) for p in prompts for t in cols]
    stats = target.token_stats([p for p, _ in pairs], [c for _, c in pairs]) if pairs else []
    values = [float(s.logprob[0]) for s in stats]
    return torch.tensor(values, dtype=torch.float32).reshape(len(prompts), len(cols))


__all__ = ["check_token_ids", "next_token_table"]
