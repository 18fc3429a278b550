"""Given next tokens' log-probabilities through a server that teacher-forces (ACU's need).

A server returns at most the top k of a next-token distribution. ACU needs the probabilities of its
label tokens, wherever they rank. Teacher forcing gives them exactly: the log-probability of the
one-token answer ``[t]`` after a prompt is the next-token log-probability of ``t`` there. So a target
that teacher-forces (vLLM, SGLang, llama-cpp-python's server, llama-server with its token grammar)
answers :meth:`next_token_logprobs` for given tokens, one forced token per request. All requests go out
at once, and the servers' prefix caches share each prompt's encoding (vLLM's does not for
``prompt_logprobs`` requests). A chat API cannot: ACU is refused there when the scorer is made.

vLLM (0.33 and later) answers all the tokens of one prompt in one request instead: ``logprob_token_ids``
with ``max_tokens`` 1 returns the raw log-probabilities of up to 128 given tokens at the generated
position, in ``choices[0].logprobs.top_logprobs[0]`` keyed ``"token_id:N"``
(vllm/entrypoints/openai/completion/protocol.py; vllm/sampling_params.py, ``MAX_LOGPROB_TOKEN_IDS``).
An older vLLM ignores the field (it keeps unknown fields): the values are then missing, and grogu
teacher-forces each token instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # annotations only: torch is imported when a request's results are built
    import torch

from ...core.target import NEXT_TOKEN, ServerCapabilityError
from .http import run

#: the most token ids vLLM's ``logprob_token_ids`` takes (vllm/sampling_params.py)
VLLM_MAX_TOKEN_IDS = 128


class ForcedNextToken:
    """The target's mixin: :meth:`next_token_logprobs` by teacher forcing one token at a time."""

    capabilities: frozenset[str]
    vocab_size: int | None
    # token_stats and require_teacher_forcing are the target's own

    def next_token_logprobs(
        self, prompts: Sequence[Sequence[int]], token_ids: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Log-probabilities (float32) of the tokens ``token_ids`` right after each prompt:
        ``[len(prompts), len(token_ids)]``. Each is a one-token teacher-forced answer, exact up to the
        server's numerics. The whole distribution (``token_ids=None``) is the in-process engine's alone."""
        import torch

        if NEXT_TOKEN not in self.capabilities:
            self.require_teacher_forcing(  # type: ignore[attr-defined]
                "next_token_logprobs (given next tokens' log-probabilities, ACU's need)"
            )
        if token_ids is None:
            raise ServerCapabilityError(
                "a server returns at most the top k of the next-token distribution: pass token_ids= (the "
                "tokens whose log-probabilities you need), or load the model in process for the whole of it"
            )
        if isinstance(token_ids, (str, bytes)) or not isinstance(token_ids, Sequence):
            raise TypeError(f"token_ids must be a list of token ids, got {type(token_ids).__name__}")
        cols = []
        for t in token_ids:
            if isinstance(t, bool) or not isinstance(t, int) or t < 0 or (self.vocab_size and t >= self.vocab_size):
                raise ValueError(f"token_ids must be ids in [0, {self.vocab_size}), got {t!r}")
            cols.append(int(t))
        if not cols:
            raise ValueError("token_ids is empty: name at least one token")
        prompts = list(prompts)
        if self.api == "vllm" and prompts and len(cols) <= VLLM_MAX_TOKEN_IDS:  # type: ignore[attr-defined]
            rows = run(self._vllm_next_tokens(prompts, cols))
            if rows is not None:
                return torch.tensor(rows, dtype=torch.float32)
        pairs = [(p, [t]) for p in prompts for t in cols]
        stats = (
            self.token_stats(  # type: ignore[attr-defined]
                [p for p, _ in pairs], [c for _, c in pairs]
            )
            if pairs
            else []
        )
        values = [float(s.logprob[0]) for s in stats]
        return torch.tensor(values, dtype=torch.float32).reshape(len(prompts), len(cols))

    async def _vllm_next_tokens(self, prompts: list, cols: list[int]) -> list[list[float]] | None:
        """One ``logprob_token_ids`` request per prompt; None when the server did not return every value."""
        bodies = [
            {**self._gen_body(list(p), 1, None, None), "logprobs": 1, "logprob_token_ids": cols}  # type: ignore[attr-defined]
            for p in self._check_prompts(prompts)  # type: ignore[attr-defined]
        ]
        replies = await self.http.post_all(bodies)  # type: ignore[attr-defined]
        rows = []
        for reply in replies:
            try:
                top = reply["choices"][0]["logprobs"]["top_logprobs"][0]
                got = {int(str(k).split("token_id:")[1]): float(v) for k, v in top.items()}
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                return None
            if any(c not in got for c in cols):
                return None
            rows.append([got[c] for c in cols])
        return rows


__all__ = ["ForcedNextToken"]
