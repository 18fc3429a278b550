"""HTTP to an inference server: one async client per call with at most ``max_concurrency`` requests in
flight, retries with exponential backoff on connection errors, timeouts, 408/429/5xx (``Retry-After``
honoured), and the errors a :class:`~grogu.runtime.inference_server.ServerTarget` raises."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from typing import Any, Callable

from ...core.checks import check_positive_int

RETRY_STATUS = (408, 429, 500, 502, 503, 504)


class ServerError(RuntimeError):
    """The inference server could not be reached or refused a request (the message says which and why)."""


def run(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, also when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Connection:
    """Requests to one server's base URL. ``explain(response, url)`` turns a refused request (4xx, or a
    5xx after the retries) into the exception to raise."""

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

    def client(self) -> Any:
        import httpx

        limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(timeout=self.timeout, limits=limits, headers=headers)

    async def request(self, client: Any, method: str, path: str, body: Any, url: str | None = None) -> Any:
        """One request's JSON answer, retried on connection errors and retriable statuses."""
        import httpx

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
        async with self.client() as client:
            return await self.request(client, "GET", path, None, url=url)

    async def post_all(
        self, bodies: list[dict[str, Any]], path: str = "/completions", url: str | None = None
    ) -> list[Any]:
        """POST every body to ``path`` (or to the full ``url``) at once, at most ``max_concurrency`` in
        flight; the answers in order."""
        sem = asyncio.Semaphore(self.max_concurrency)
        async with self.client() as client:

            async def one(body: dict[str, Any]) -> Any:
                async with sem:
                    return await self.request(client, "POST", path, body, url=url)

            return await asyncio.gather(*(one(b) for b in bodies))
