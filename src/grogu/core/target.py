"""The target LLM: what every metric needs of the model it scores.

Two classes implement :class:`Target`. :class:`grogu.Engine` runs a model in this process.
:class:`grogu.ServerTarget` reaches one behind an inference server. The scorers hold a ``target``
and use these members only, so neither the scorers nor the engine import the other implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:  # the result types only: this module imports nothing of grogu at run time
    from .types import Generation, TokenStats


#: what a target can do (:attr:`Target.capabilities`)
GENERATE = "generate"  # answers, with each generated token's log-probability and entropy
TEACHER_FORCE = "teacher_force"  # the same statistics of a given answer (token_stats): the ungrounded pass
NEXT_TOKEN = "next_token"  # given next tokens' log-probabilities (next_token_logprobs): ACU's label tokens
CAPABILITIES = (GENERATE, TEACHER_FORCE, NEXT_TOKEN)
#: why ACU cannot run on a target without NEXT_TOKEN
NEXT_TOKEN_MESSAGE = (
    "ACU needs the probabilities of given label tokens, which a chat API returns only when they are among "
    "its top-k; score ACU with a model loaded in process, or through a server that teacher-forces (vLLM, "
    "SGLang, llama-cpp-python's server, llama-server). GROGU's entropy and "
    "perplexity, Influence and SePer work through this target"
)


class ServerCapabilityError(ValueError):
    """The target (an LLM behind a server, or its settings) cannot give what a metric needs.

    The message names what can.
    """


@runtime_checkable
class Target(Protocol):
    """A target LLM that grogu can score.

    Attributes:
        capabilities: what it can do, from :data:`CAPABILITIES`. Every target generates. Without
            ``"teacher_force"`` it is grounded-only. ``next_token_logprobs`` works only with ``"next_token"``.
        model_name: the name reported in results and records.
        tokenizer: the model's tokenizer, or None (a chat API given none).
        device: where it runs (``"server"`` for a server).
        max_context_tokens: the context window in tokens, or None when unknown.
        stop_token_ids: tokens that end an answer (empty when the server ends it).
        grounded_only: True when it cannot teacher-force an answer (no ``"teacher_force"``): only
            grounded metrics work.
        takes_messages: True when prompts are chat messages, not token ids.
    """

    capabilities: frozenset[str]
    model_name: str
    tokenizer: Any
    device: Any
    max_context_tokens: int | None
    stop_token_ids: list[int]
    grounded_only: bool
    takes_messages: bool

    def encode(self, text: str) -> list[int]:
        """The text's token ids, without special tokens."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, special tokens dropped."""
        ...

    def generate(
        self,
        prompts: Sequence[Any],
        max_new_tokens: int = 64,
        *,
        temperature: float | None = None,
        seed: int | None = None,
    ) -> list[Generation]:
        """One answer per prompt, greedy when ``temperature`` is None, with per-token statistics."""
        ...

    def token_stats(self, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]) -> list[TokenStats]:
        """Teacher-forced statistics of ``continuations[i]`` after ``prompts[i]``."""
        ...

    def require_teacher_forcing(self, what: str) -> None:
        """Raise a clear error when ``what`` needs teacher forcing and this target cannot do it."""
        ...


def require(target: Any, capability: str, message: str) -> None:
    """Raise :class:`ServerCapabilityError` with ``message`` when ``target`` lacks ``capability``."""
    if capability not in target.capabilities:
        raise ServerCapabilityError(message)
