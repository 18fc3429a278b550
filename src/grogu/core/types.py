"""The engine's results: per-token statistics of a continuation, and of a generated answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the core imports no tensor code
    import torch

#: the id of a token whose id the target does not report (a chat API returns token strings only; see
#: ``Generation.tokens``)
UNKNOWN_TOKEN_ID = -1


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
    ``tokens``: each answer token's text as the target returned it, when it returns no token ids (a chat
    API); ``token_ids`` (and ``stop_token_id``) then hold :data:`UNKNOWN_TOKEN_ID`.
    """

    stop_token_id: int | None = None
    stop_entropy: float | None = None
    stop_logprob: float | None = None
    text: str = ""
    tokens: list[str] | None = None

    @property
    def finished(self) -> bool:
        return self.stop_token_id is not None

    @property
    def sequence_logprob(self) -> float:
        """Sum of the answer's token log-probabilities, the end-of-turn token included when present."""
        total = float(self.logprob.sum()) if len(self.token_ids) else 0.0
        return total + (self.stop_logprob or 0.0)
