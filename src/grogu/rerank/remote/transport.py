"""HTTP transport of the service clients: JSON over httpx, retries with exponential backoff on
connection errors, 502/503/504 answers and 5xx answers not written by grogu (a replica lost under the
request), and the errors that carry the server's message."""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

from ...core import aio
from ...core.checks import check_positive_int

#: answers retried (the service, or its proxy, is starting, restarting or overloaded)
RETRY_STATUSES = (502, 503, 504)
MAX_BACKOFF_S = 8.0


class ServiceError(RuntimeError):
    """An error answer of the scoring service: ``status`` (HTTP) and the server's ``message``."""

    def __init__(self, status: int | None, message: str, kind: str = "") -> None:
        self.status, self.message, self.kind = status, message, kind
        super().__init__(f"grogu service: {message}" + (f" (HTTP {status})" if status else ""))


class ServiceValueError(ServiceError, ValueError):
    """A bad value, or a request over the service's limits (HTTP 400, 413, 422)."""


class ServiceTypeError(ServiceError, TypeError):
    """A value of the wrong type (HTTP 422 from a TypeError on the server)."""


class ServiceAuthError(ServiceError, PermissionError):
    """Missing or wrong bearer token (HTTP 401)."""


class ServiceUnavailable(ServiceError, ConnectionError):
    """The service could not be reached, or kept answering 502/503/504, through every retry."""


def _raise_for(status: int, data: Any) -> None:
    detail = data.get("detail") if isinstance(data, dict) else data
    kind = data.get("error", "") if isinstance(data, dict) else ""
    message = detail if isinstance(detail, str) else str(detail)
    if status == 401:
        raise ServiceAuthError(status, message, kind)
    if kind == "TypeError":
        raise ServiceTypeError(status, message, kind)
    if 400 <= status < 500:
        raise ServiceValueError(status, message, kind)
    raise ServiceError(status, message, kind)


def _retriable(response: Any) -> bool:
    """502/503/504, or a 5xx that grogu's handlers did not write (no JSON ``error``): the request never
    reached a working replica or its replica died under it (Ray Serve's proxy answers a plain 500).
    Scoring is a pure function of the request, so sending it again is safe."""
    if response.status_code in RETRY_STATUSES:
        return True
    if response.status_code < 500:
        return False
    try:
        return "error" not in response.json()
    except ValueError:
        return True


class Transport:
    """JSON over HTTP to one service URL, with retries. One ``httpx.AsyncClient``, kept for the
    transport's life on grogu's background event loop (:mod:`grogu.core.aio`), serves every call: async
    ones from any loop, and sync ones, which wait for it."""

    def __init__(
        self, url: str, token: str | None = None, *, timeout: float = 120.0, retries: int = 4, backoff: float = 0.25
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"the service URL must start with http:// or https://, got {url!r}")
        import httpx

        self.url = url.rstrip("/")
        self.retries = check_positive_int("retries", retries + 1) - 1
        self.backoff = float(backoff)
        token = token if token is not None else os.environ.get("GROGU_SERVE_TOKEN") or None
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self._client: Any = None
        self._loop: Any = None
        self.retried = 0  # requests sent again (connection error or 502/503/504)
        #: how many clients this transport has opened (one, unless it was closed and used again)
        self.clients_made = 0

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickled, or sent to another process) opens its own client."""
        return {**self.__dict__, "_client": None, "_loop": None}

    def _delay(self, attempt: int) -> float:
        return min(self.backoff * 2**attempt, MAX_BACKOFF_S)

    def _result(self, response: Any) -> Any:
        try:
            data = response.json()
        except ValueError:
            data = {"detail": response.text[:500]}
        if response.status_code >= 400:
            _raise_for(response.status_code, data)
        return data

    def _http(self) -> Any:
        """The client, opened on first use (and again in a forked child, whose loop is its own); on the
        background loop. A transport dropped unclosed closes its client there."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            import httpx

            self._client = httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout)
            self._loop = loop
            self.clients_made += 1
            weakref.finalize(self, aio.close_soon, self._client, loop).atexit = False
        return self._client

    async def _send(self, method: str, path: str, body: Any) -> Any:
        """One call, retried; on the background loop."""
        import httpx

        client, last = self._http(), ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.retried += 1
                await asyncio.sleep(self._delay(attempt - 1))
            try:
                response = await client.request(method, path, json=body)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if not _retriable(response):
                return self._result(response)
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        raise ServiceUnavailable(None, f"{self.url}{path} unreachable after {self.retries + 1} attempts ({last})")

    async def arequest(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of one call, from async code on any event loop."""
        return await aio.call(self._send(method, path, body))

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of one call, from sync code (it waits)."""
        return aio.run(self._send(method, path, body))

    async def _aclose(self) -> None:
        client, self._client, self._loop = self._client, None, None
        if client is not None and not client.is_closed:
            await client.aclose()

    def close(self) -> None:
        """Close the connections (a later call opens a new client)."""
        if self._client is not None:
            aio.run(self._aclose())

    async def aclose(self) -> None:
        """Close the connections, from async code."""
        if self._client is not None:
            await aio.call(self._aclose())
