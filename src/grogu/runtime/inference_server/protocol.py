"""The one protocol every server API implements (:class:`ServerAPI`).

A :class:`~grogu.runtime.inference_server.ServerTarget` holds one object of this protocol, chosen once
when it connects (:mod:`grogu.runtime.inference_server.apis`). The target checks prompts, turns steps into
statistics and raises the errors; the API object knows its server: its URLs, its request bodies, how to
read its answers, and what it can do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only
    from ...core.types import Generation, TokenStats
    from .requests import Step


@runtime_checkable
class ServerAPI(Protocol):
    """One inference server's API, bound to one served model (its :class:`~.base.Served`).

    Attributes:
        name: its ``api=`` name.
        capabilities: what it can do (:data:`grogu.core.target.CAPABILITIES`).
        takes_messages: True when prompts are chat messages, False when they are token ids.
        grounded_only: True when it cannot teacher-force an answer.
        generate_url: where its generation requests go.
    """

    name: str
    capabilities: frozenset[str]
    takes_messages: bool
    grounded_only: bool
    generate_url: str

    def why_grounded_only(self) -> str:
        """Why it cannot teacher-force, and how to get teacher forcing (for a grounded-only API)."""
        ...

    async def start(self) -> list[str]:
        """The requests it makes once, on connecting; the warnings they give."""
        ...

    async def generate(
        self, prompts: list[Any], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[Generation]:
        """One answer per prompt, greedy when ``temperature`` is None, with each token's statistics."""
        ...

    async def forced_steps(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[Step]]:
        """The steps of each non-empty ``conts[i]`` teacher-forced after ``prompts[i]``."""
        ...

    async def next_token_rows(self, prompts: list[list[int]], cols: list[int]) -> list[list[float]] | None:
        """The log-probabilities of the tokens ``cols`` after each prompt in one request per prompt, or
        None when the API has no such request (the target then teacher-forces each token)."""
        ...

    def statistics(self, ids: list[int], steps: list[Step]) -> TokenStats:
        """The tokens ``ids`` with each step's top-k entropy (the target's tail correction) and log-probability."""
        ...

    def refusal(self, status: int, text: str, url: str) -> Exception | None:
        """What a refused request means for this API, or None when the target's general reading applies."""
        ...


__all__ = ["ServerAPI"]
