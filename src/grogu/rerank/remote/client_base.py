"""What every client of the service shares (:mod:`grogu.rerank.remote.client`): a transport, the sync and async
request runners, the service's info and health, and the prompt template check."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ...core.prompts import PromptTemplate
from . import wire
from .transport import ServiceError, Transport


def check_prompt_template(template: Any) -> PromptTemplate | None:
    """None, or a PromptTemplate whose placeholders the service takes (ValueError naming the field)."""
    if template is None:
        return None
    if not isinstance(template, PromptTemplate):
        raise TypeError(f"template must be a grogu.PromptTemplate or None, got {type(template).__name__}")
    wire.check_template(dataclasses.asdict(template))
    return template


class RemoteClient:
    """A client bound to a transport: each call is a (path, body, decode) triple run sync or async."""

    def __init__(self, url: Any, token: str | None, timeout: float, retries: int, backoff: float) -> None:
        self.transport = (
            url
            if isinstance(url, Transport)
            else Transport(url, token, timeout=timeout, retries=retries, backoff=backoff)
        )
        self._info: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return self.transport.url

    def _run(self, path: str, body: Any, decode: Callable[[Any], Any]) -> Any:
        return decode(self.transport.request("POST", path, body))

    async def _arun(self, path: str, body: Any, decode: Callable[[Any], Any]) -> Any:
        return decode(await self.transport.arequest("POST", path, body))

    def info(self) -> dict[str, Any]:
        """The service's model, device, limits and batching (GET /info; cached)."""
        if self._info is None:
            self._info = self.transport.request("GET", "/info")
        return self._info

    def close(self) -> None:
        """Close this client's connections (a transport shared with other clients is closed for them too)."""
        self.transport.close()

    def __enter__(self) -> "RemoteClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def health(self) -> bool:
        return self.transport.request("GET", "/health").get("status") == "ok"

    @property
    def model_name(self) -> str:
        """The served model's name; the URL while the service cannot be reached."""
        try:
            return str(self.info()["model"])
        except ServiceError:
            return self.url
