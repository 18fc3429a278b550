"""What ``grogu serve`` adds to Ray Serve's HTTP proxy (the uvicorn server every request enters by),
before a request reaches a replica:

- a body over ``max_body_bytes`` by its Content-Length is a 413 at once, nothing of it forwarded;
- ``/health`` answers within ``health_timeout_s`` in every state: a 503 when no replica answers
  in time (Ray's proxy would otherwise hold the request until a replica is back);
- clients cannot set Ray's per-request timeout or disconnect policy (their ``x-request-timeout-seconds``
  and ``x-request-disconnect-disabled`` headers are dropped), so ``request_timeout_s`` holds;
- every error the proxy itself writes (a lost replica's plain-text 500, a timeout, an unknown route)
  becomes a JSON body ``{"detail", "message", "error"}``; a lost replica is a 503 with Retry-After, which
  clients retry;
- a connection whose request headers are not complete within ``header_timeout_s`` of its opening
  (or of its previous response) is closed: uvicorn has no such timeout of its own;
- with several models (each under its own prefix), the clients' rerank API at the root
  (``POST /v1/rerank``, ``/v2/rerank``) goes to the model the body's ``model`` names: the body is read
  (bounded), and the path rewritten to that model's prefix; an unknown or missing model is a 404 naming
  the served ones.

Ray Serve takes proxy middlewares only from a callback named by the environment variable
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, read when the proxy starts: :func:`proxy_environment`
gives that variable (pointing to :func:`proxy_middlewares`) and the settings, which ``grogu serve``
sets before it starts Ray. The proxy process then imports grogu.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

#: headers of Ray Serve's proxy a client must not set (per-request timeout and disconnect policy)
RAY_CONTROL_HEADERS = (b"x-request-timeout-seconds", b"x-request-disconnect-disabled")


def _json_error(status: int, detail: str, kind: str, headers: list | None = None) -> tuple[dict, dict]:
    body = json.dumps({"detail": detail, "message": detail, "error": kind}).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ],
    }
    return start, {"type": "http.response.body", "body": body, "more_body": False}


class ProxyGuard:
    """ASGI middleware of the HTTP proxy (see the module docstring)."""

    def __init__(
        self,
        app: Any,
        max_body_bytes: int,
        health_timeout_s: float = 0.9,
        header_timeout_s: float | None = 10.0,
        model_routes: dict[str, str] | None = None,
        body_timeout_s: float = 30.0,
    ) -> None:
        self.app, self.max_body_bytes, self.health_timeout_s = app, int(max_body_bytes), float(health_timeout_s)
        self.model_routes, self.body_timeout_s = dict(model_routes or {}), float(body_timeout_s)
        if header_timeout_s:
            install_header_timeout(float(header_timeout_s))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in RAY_CONTROL_HEADERS]
        length = next((v for k, v in headers if k.lower() == b"content-length"), None)
        if length is not None:
            try:
                size = int(length)
            except ValueError:
                size = -1
            if size < 0:
                for message in _json_error(400, "invalid Content-Length header", "BadRequest"):
                    await send(message)
                return
            if size > self.max_body_bytes:
                for message in _json_error(
                    413,
                    f"the request body has {size} bytes; this service takes at most {self.max_body_bytes} "
                    f"(grogu serve --max-body-bytes)",
                    "LimitError",
                    [(b"connection", b"close")],
                ):
                    await send(message)
                return
        health = scope.get("method") in ("GET", "HEAD") and scope.get("path", "").rstrip("/").endswith("/health")
        if health:
            headers.append((RAY_CONTROL_HEADERS[0], str(self.health_timeout_s).encode()))
        scope = {**scope, "headers": headers}
        if self.model_routes and scope.get("method") == "POST" and scope.get("path", "").rstrip("/") in COMPAT_PATHS:
            routed = await self._route_by_model(scope, receive, send)
            if routed is None:
                return
            scope, receive = routed
        guarded = _JSONErrors(send, health)
        try:
            await self.app(scope, receive, guarded)
        except Exception:  # noqa: BLE001 - answered below when nothing was sent yet
            if guarded.started:
                raise
        if not guarded.started:  # the proxy wrote nothing: its replica died under the request
            for message in _json_error(
                503,
                "the request's replica was lost before it answered; retry",
                "ServiceUnavailable",
                [(b"retry-after", b"1")],
            ):
                await send(message)

    async def _route_by_model(self, scope: dict, receive: Any, send: Any) -> tuple[dict, Any] | None:
        """(scope with the path under the model's prefix, a receive that replays the body), or None when
        an error was sent (a body too large or too slow, not JSON, a model not served)."""
        loop = asyncio.get_running_loop()
        deadline, messages, size = loop.time() + self.body_timeout_s, [], 0
        error = None
        while error is None:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                error = (408, f"the request body did not arrive within {self.body_timeout_s:g} s", "Timeout")
                break
            if message["type"] == "http.disconnect":
                return None
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                error = (413, f"the request body has more than {self.max_body_bytes} bytes", "LimitError")
            elif not message.get("more_body", False):
                break
        if error is None:
            try:
                data = json.loads(b"".join(m.get("body", b"") for m in messages))
            except ValueError as exc:  # not JSON, or not UTF-8
                data, error = None, (400, f"malformed JSON body: {exc}", "MalformedJSON")
            model = data.get("model") if isinstance(data, dict) else None
            served = sorted({prefix.strip("/") for prefix in self.model_routes.values()})
            prefix = self.model_routes.get(model) if isinstance(model, str) else None
            if error is None and prefix is None:
                error = (
                    404,
                    f"model {model!r} is not served here; this service serves {served}: pass one of them as "
                    f"model (or use its own base URL, http://host:port/<name>)",
                    "ModelNotFound",
                )
        if error is not None:
            for out in _json_error(*error, [(b"connection", b"close")] if error[0] != 404 else None):
                await send(out)
            return None
        path = prefix.rstrip("/") + scope["path"]

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        return {**scope, "path": path, "raw_path": path.encode()}, replay


#: the clients' rerank API, routed by the body's model when several models are served
COMPAT_PATHS = ("/v1/rerank", "/v2/rerank")


class _JSONErrors:
    """A send that turns the proxy's own non-JSON error answers into JSON ones (the replica's are JSON)."""

    def __init__(self, send: Any, health: bool) -> None:
        self.send, self.health = send, health
        self.held: dict | None = None  # a non-JSON error's start message, until its body is read
        self.body = b""
        self.started = False

    async def __call__(self, message: dict) -> None:
        self.started = True
        if message["type"] == "http.response.start":
            ctype = next((v for k, v in message.get("headers", []) if k.lower() == b"content-type"), b"")
            if message["status"] >= 400 and b"json" not in ctype.lower():
                self.held = message
                return
        elif message["type"] == "http.response.body" and self.held is not None:
            self.body += message.get("body", b"")
            if message.get("more_body"):
                return
            status, text = self.held["status"], self.body.decode("utf-8", "replace").strip()[:500]
            self.held = None
            if self.health and (status >= 500 or status == 408):
                status, text, kind = (
                    503,
                    f"no replica answered within the health timeout ({text})",
                    "ServiceUnavailable",
                )
            elif status >= 500:
                status, kind = 503, "ServiceUnavailable"
                text = f"the request's replica was lost or is not ready; retry ({text})"
            else:
                kind = {404: "NotFound", 405: "MethodNotAllowed", 408: "Timeout", 413: "LimitError"}.get(
                    status, "HTTPError"
                )
            extra = [(b"retry-after", b"1")] if status == 503 else []
            for out in _json_error(status, text, kind, extra):
                await self.send(out)
            return
        await self.send(message)


def install_header_timeout(seconds: float) -> None:
    """Close a connection of uvicorn (the proxy's HTTP server) whose request headers are not complete
    within ``seconds`` of the connection opening or of its previous response. uvicorn's own
    ``timeout_keep_alive`` covers only idle connections with no bytes arriving; a client that sends
    its headers a byte at a time would otherwise hold the connection open indefinitely."""
    from uvicorn.protocols.http import h11_impl, httptools_impl

    for cls in (httptools_impl.HttpToolsProtocol, h11_impl.H11Protocol):
        if getattr(cls, "_grogu_header_timeout", None) is None:
            made, complete = cls.connection_made, cls.on_response_complete

            def connection_made(self: Any, transport: Any, _made: Any = made) -> None:
                _made(self, transport)
                _arm(self)

            def on_response_complete(self: Any, _complete: Any = complete) -> None:
                _complete(self)
                _arm(self)

            cls.connection_made, cls.on_response_complete = connection_made, on_response_complete
        cls._grogu_header_timeout = seconds


def _arm(protocol: Any) -> None:
    timer = getattr(protocol, "_grogu_header_timer", None)
    if timer is not None:
        timer.cancel()
    loop = getattr(protocol, "loop", None) or asyncio.get_event_loop()
    protocol._grogu_header_timer = loop.call_later(
        type(protocol)._grogu_header_timeout, _expire, protocol, getattr(protocol, "cycle", None)
    )


def _expire(protocol: Any, cycle: Any) -> None:
    """No request's headers completed since the timer was armed (the protocol has no new cycle)."""
    transport = getattr(protocol, "transport", None)
    if getattr(protocol, "cycle", None) is cycle and transport is not None and not transport.is_closing():
        transport.close()


#: environment variables the proxy reads its settings from
ENV_MAX_BODY_BYTES = "GROGU_SERVE_MAX_BODY_BYTES"
ENV_HEADER_TIMEOUT_S = "GROGU_SERVE_HEADER_TIMEOUT_S"
ENV_HEALTH_TIMEOUT_S = "GROGU_SERVE_HEALTH_TIMEOUT_S"
ENV_MODEL_ROUTES = "GROGU_SERVE_MODEL_ROUTES"
RAY_CALLBACK = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"


def proxy_environment(
    *,
    max_body_bytes: int,
    header_timeout_s: float | None,
    health_timeout_s: float = 0.9,
    model_routes: dict[str, str] | None = None,
) -> dict:
    """The environment variables that make Ray Serve's proxy run :class:`ProxyGuard` with these
    settings: set them (``os.environ``) before Ray starts. ``model_routes``: with several models, each
    name a client may pass as ``model`` -> that model's route prefix."""
    return {
        RAY_CALLBACK: f"{__name__}.proxy_middlewares",
        ENV_MAX_BODY_BYTES: str(int(max_body_bytes)),
        ENV_HEADER_TIMEOUT_S: str(float(header_timeout_s or 0)),
        ENV_HEALTH_TIMEOUT_S: str(float(health_timeout_s)),
        ENV_MODEL_ROUTES: json.dumps(model_routes or {}),
    }


def proxy_middlewares() -> list:
    """Ray Serve's proxy callback: :class:`ProxyGuard` with the settings of :func:`proxy_environment`."""
    from starlette.middleware import Middleware

    return [
        Middleware(
            ProxyGuard,
            max_body_bytes=int(os.environ.get(ENV_MAX_BODY_BYTES, 8 * 2**20)),
            health_timeout_s=float(os.environ.get(ENV_HEALTH_TIMEOUT_S, 0.9)),
            header_timeout_s=float(os.environ.get(ENV_HEADER_TIMEOUT_S, 10.0)) or None,
            model_routes=json.loads(os.environ.get(ENV_MODEL_ROUTES) or "{}"),
        )
    ]


def http_options(host: str, port: int, *, request_timeout_s: float | None, keep_alive_timeout_s: int) -> dict:
    """Ray Serve's ``http_options`` for ``serve.start``: the host and port, and the proxy's timeouts
    (uvicorn's ``timeout_keep_alive``; Ray's end-to-end ``request_timeout_s``, 408 past it)."""
    return {
        "host": host,
        "port": port,
        "request_timeout_s": request_timeout_s,
        "keep_alive_timeout_s": keep_alive_timeout_s,
    }
