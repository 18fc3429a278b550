"""HTTP transport of the service clients: JSON over httpx, retries with exponential backoff on
connection errors, 502/503/504 answers and 5xx answers not written by grogu (a replica lost under the
request), and the errors that carry the server's message."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Iterator

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
    """JSON over HTTP to one service URL, with retries; sync (one shared ``httpx.Client``) and async."""

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
        self.retried = 0  # requests sent again (connection error or 502/503/504)

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

    def _waits(self) -> Iterator[float]:
        """The wait before each attempt (none before the first), counting the retries."""
        yield 0.0
        for attempt in range(self.retries):
            self.retried += 1
            yield self._delay(attempt)

    def _outcome(self, response: Any) -> tuple[bool, Any]:
        """One attempt's response (or transport error) as (done, the decoded result or why it is sent again)."""
        import httpx

        if isinstance(response, httpx.TransportError):
            return False, f"{type(response).__name__}: {response}"
        if _retriable(response):
            return False, f"HTTP {response.status_code}: {response.text[:200]}"
        return True, self._result(response)

    def _unreachable(self, path: str, last: str) -> ServiceUnavailable:
        return ServiceUnavailable(None, f"{self.url}{path} unreachable after {self.retries + 1} attempts ({last})")

    def request(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        if self._client is None:
            self._client = httpx.Client(base_url=self.url, headers=self._headers, timeout=self._timeout)
        for wait in self._waits():
            time.sleep(wait)
            try:
                done, value = self._outcome(self._client.request(method, path, json=body))
            except httpx.TransportError as exc:
                done, value = self._outcome(exc)
            if done:
                return value
        raise self._unreachable(path, value)

    async def arequest(self, method: str, path: str, body: Any = None) -> Any:
        import httpx

        async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as client:
            for wait in self._waits():
                await asyncio.sleep(wait)
                try:
                    done, value = self._outcome(await client.request(method, path, json=body))
                except httpx.TransportError as exc:
                    done, value = self._outcome(exc)
                if done:
                    return value
        raise self._unreachable(path, value)

    def close(self) -> None:
        """Close the pooled sync connections (also done when the transport is garbage-collected)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
