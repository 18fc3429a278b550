"""What every client of the service shares (:mod:`grogu.rerank.remote.client`): a transport, the one
request runner (async; each sync method waits for its async twin, :func:`grogu.core.aio.blocking`), the
service's info and health, and the prompt template check."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from ...core import aio
from ...core.aio import blocking
from ...core.prompts import PromptTemplate
from . import schema, wire
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
    """A client bound to a transport. Each route has one async method; its sync twin waits for it."""

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

    async def _call(self, path: str, request: Any, answer: Any, decode: Callable[[Any], Any] = lambda a: a) -> Any:
        """POST ``request`` (a :mod:`.schema` model) to ``path``; the answer validated as ``answer`` (a
        schema model or a result class), then decoded."""
        data = await self.transport.arequest("POST", path, request.body())
        return decode(schema.validate(answer, data))

    async def ainfo(self) -> dict[str, Any]:
        """The service's model, device, limits and batching (GET /info; cached)."""
        if self._info is None:
            data = await self.transport.arequest("GET", "/info")
            schema.validate(schema.InfoResponse, data)
            self._info = data
        return self._info

    async def _known(self) -> None:
        """The service's info fetched once, when it can be reached (:attr:`model_name` reads it)."""
        try:
            await self.ainfo()
        except ServiceError:
            pass

    def info(self) -> dict[str, Any]:
        """Sync :meth:`ainfo`."""
        return self._info if self._info is not None else aio.run(self.ainfo())

    async def ahealth(self) -> bool:
        data = await self.transport.arequest("GET", "/health")
        return isinstance(data, dict) and data.get("status") == "ok"

    health = blocking(ahealth)

    def close(self) -> None:
        """Close this client's connections (a transport shared with other clients is closed for them too)."""
        self.transport.close()

    def __enter__(self) -> "RemoteClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> "RemoteClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def model_name(self) -> str:
        """The served model's name; the URL while the service cannot be reached."""
        if self._info is None and aio.on_background_loop():
            return self.url  # not fetched yet, and a sync fetch here would wait on itself
        try:
            return str(self.info()["model"])
        except ServiceError:
            return self.url
