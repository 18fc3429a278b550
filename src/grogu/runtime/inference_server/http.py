"""HTTP to an inference server: one async client per target, reused across calls, with at most
``max_concurrency`` requests in flight; retries with exponential backoff on connection errors, timeouts,
408/429/5xx (``Retry-After`` honoured); and the errors a :class:`~grogu.runtime.inference_server.ServerTarget`
raises.

Every request of every target runs on grogu's one background event loop (:mod:`grogu.core.aio`): an
``httpx.AsyncClient`` belongs to the loop it first ran on. A forked child starts its own loop, and its
targets their own clients.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from typing import Any, Callable

from ...core.aio import close_soon, run
from ...core.checks import check_positive_int

RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class ServerError(RuntimeError):
    """The inference server could not be reached or refused a request (the message says which and why)."""


class Connection:
    """Requests to one server's base URL, through one client kept for the target's life. ``explain(response,
    url)`` turns a refused request (4xx, or a 5xx after the retries) into the exception to raise."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_concurrency: int,
        explain: Callable[[Any, str], Exception],
    ) -> None:
        self.max_concurrency = check_positive_int("max_concurrency", max_concurrency)
        if not (isinstance(retries, int) and not isinstance(retries, bool) and retries >= 0):
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not (isinstance(backoff, (int, float)) and math.isfinite(backoff) and backoff >= 0):
            raise ValueError(f"backoff must be a non-negative number of seconds, got {backoff!r}")
        self.base_url, self.api_key = base_url, api_key
        self.timeout, self.retries, self.backoff = float(timeout), retries, float(backoff)
        self.explain = explain
        self.requests_sent = 0
        #: how many clients this connection has opened (one, unless it was closed and used again)
        self.clients_made = 0
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickled, or sent to another process) opens its own client."""
        return {**self.__dict__, "_client": None, "_loop": None}

    def client(self) -> Any:
        """The connection's client, opened on first use; called on the background loop."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            import httpx

            n = self.max_concurrency
            limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            # no pool timeout: a request waits for a free connection as long as it takes, then times out alone
            timeout = httpx.Timeout(self.timeout, pool=None)
            self._client = httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers)
            self._loop = loop
            self.clients_made += 1
            weakref.finalize(self, close_soon, self._client, loop).atexit = False
        return self._client

    async def aclose(self) -> None:
        """Close the client (a later request opens a new one); on the background loop."""
        client, self._client, self._loop = self._client, None, None
        if client is not None and not client.is_closed:
            await client.aclose()

    def close(self) -> None:
        """Close the client from sync code."""
        if self._client is not None:
            run(self.aclose())

    async def request(self, method: str, path: str, body: Any, url: str | None = None) -> Any:
        """One request's JSON answer, retried on connection errors and retriable statuses."""
        import httpx

        client = self.client()
        url = url or self.base_url + path
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            try:
                resp = await client.request(method, url, json=body)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                if attempt == self.retries:
                    raise ServerError(
                        f"cannot reach the LLM server at {url} ({type(exc).__name__}: {exc}) "
                        f"after {attempt + 1} attempt(s); is it running?"
                    ) from exc
                await asyncio.sleep(wait)
                continue
            self.requests_sent += 1
            if resp.status_code in RETRY_STATUS and attempt < self.retries:
                retry_after = resp.headers.get("retry-after", "")
                await asyncio.sleep(float(retry_after) if retry_after.replace(".", "", 1).isdigit() else wait)
                continue
            if resp.status_code >= 400:
                raise self.explain(resp, url)
            try:
                return resp.json()
            except ValueError as exc:
                raise ServerError(
                    f"the LLM server at {url} answered with something that is not JSON: {resp.text[:200]!r}"
                ) from exc
        raise AssertionError("unreachable")

    async def get(self, path: str, url: str | None = None) -> Any:
        return await self.request("GET", path, None, url=url)

    async def post_all(
        self, bodies: list[dict[str, Any]], path: str = "/completions", url: str | None = None
    ) -> list[Any]:
        """POST every body to ``path`` (or to the full ``url``) at once, at most ``max_concurrency`` in
        flight; the answers in order."""
        sem = asyncio.Semaphore(self.max_concurrency)

        async def one(body: dict[str, Any]) -> Any:
            async with sem:
                return await self.request("POST", path, body, url=url)

        return list(await asyncio.gather(*(one(b) for b in bodies)))
