"""The HTTP face of the scoring service: the FastAPI app, its JSON responses, and how failures become
status codes (400 malformed JSON, 401 no token, 404 a model not served (the compatible rerank API), 408 a body too slow to arrive, 413 over a limit, 422 a
wrong type or a bad value with grogu's own message, 500 anything else, with its message), every one
a JSON body ``{"detail": message, "message": message, "error": kind}`` (``detail`` as FastAPI and Jina
write it, ``message`` as Cohere does). The routes are in :mod:`.service`."""

# no `from __future__ import annotations`: FastAPI reads the handlers' annotations at runtime
import asyncio
import hmac
import json
import logging
from typing import Any, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...core.version import __version__
from ...rerank.remote.schema import validation_message
from .config import ServeConfig

logger = logging.getLogger(__name__)


class LimitError(Exception):
    """A request over the service's size limits (HTTP 413)."""


class ModelNotFound(Exception):
    """A compatible rerank request names a model this route does not serve (HTTP 404)."""


class StalledError(Exception):
    """The replica's worker is stuck (HTTP 503 from /health)."""


class _JSON(JSONResponse):
    """JSON that keeps NaN / infinities (a perplexity can overflow) instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode("utf-8")


app = FastAPI(
    title="grogu scoring service",
    version=__version__,
    default_response_class=_JSON,
    description="LLM-specific utility of retrieved documents (GROGU, Influence, ΔSePer, ACU). "
    "Every route but /health needs `Authorization: Bearer <token>` when the service "
    "was started with a token.",
)


def answers(model: Any) -> dict[str, Any]:
    """A route's response settings: its answer is validated against ``model`` (the wire schema's, which
    the clients validate with too, :mod:`grogu.rerank.remote.schema`) and documented by it in the
    OpenAPI schema; fields the handler did not set are not sent (an answer keeps its shape)."""
    return {"response_model": model, "response_model_exclude_unset": True}


def _error(status: int, message: str, kind: str, headers: dict | None = None) -> _JSON:
    # "detail": FastAPI's and Jina's key; "message": Cohere's (its SDK and clients read that one)
    return _JSON({"detail": message, "message": message, "error": kind}, status_code=status, headers=headers)


@app.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError) -> _JSON:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _error(
            400, f"malformed JSON body: {errors[0].get('ctx', {}).get('error', errors[0]['msg'])}", "MalformedJSON"
        )
    return _error(422, *validation_message(errors))


@app.exception_handler(ValueError)
@app.exception_handler(TypeError)
async def _bad_value(request: Request, exc: Exception) -> _JSON:
    if isinstance(exc, ValidationError):  # a request built inside a route (the compatible rerank API)
        return _error(422, *validation_message(exc.errors()))
    return _error(422, str(exc), type(exc).__name__)


@app.exception_handler(LimitError)
async def _too_large(request: Request, exc: LimitError) -> _JSON:
    return _error(413, str(exc), "LimitError")


@app.exception_handler(ModelNotFound)
async def _no_model(request: Request, exc: ModelNotFound) -> _JSON:
    return _error(404, str(exc), "ModelNotFound")


@app.exception_handler(StalledError)
async def _stalled(request: Request, exc: StalledError) -> _JSON:
    return _error(503, str(exc), "WorkerStalled", {"Retry-After": "5"})


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> _JSON:
    kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HTTPError")
    return _error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}", kind, exc.headers)


#: routes open without the token: liveness and the API's own description
OPEN_PATHS = ("/health", "/docs", "/openapi.json", "/redoc")

#: this process's replica settings the guard needs (a replica is a process of its own). Set through a
#: function: Ray pickles the ingress class by value, and its module globals with it.
_REPLICA: dict[str, Any] = {
    "token": None,
    "max_body_bytes": ServeConfig.default("max_body_bytes"),
    "body_timeout_s": ServeConfig.default("body_timeout_s"),
}


def set_replica_token(token: Optional[str]) -> None:
    _REPLICA["token"] = token


def set_replica_limits(*, max_body_bytes: int, body_timeout_s: float) -> None:
    _REPLICA["max_body_bytes"], _REPLICA["body_timeout_s"] = int(max_body_bytes), float(body_timeout_s)


class _Refused(Exception):
    def __init__(self, status: int, message: str, kind: str) -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


async def _read_body(receive: Callable[[], Any], limit: int, timeout: float) -> Optional[list[dict]]:
    """The whole request body, read before anything parses it: at most ``limit`` bytes (the declared
    Content-Length was checked before; a streamed body is counted as it arrives) within ``timeout``
    seconds. Returns the messages to replay, or None when the client went away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    messages, size = [], 0
    while True:
        left = deadline - loop.time()
        try:
            if left <= 0:
                raise asyncio.TimeoutError
            message = await asyncio.wait_for(receive(), left)
        except asyncio.TimeoutError:
            raise _Refused(
                408, f"the request body did not arrive within {timeout:g} s (grogu serve --body-timeout-s)", "Timeout"
            ) from None
        if message["type"] == "http.disconnect":
            return None
        size += len(message.get("body", b""))
        if size > limit:
            raise _Refused(
                413,
                f"the request body has more than {limit} bytes; this service takes at most {limit} "
                f"(grogu serve --max-body-bytes)",
                "LimitError",
            )
        messages.append(message)
        if not message.get("more_body", False):
            return messages


class _Guard:
    """The replica's outer ASGI layer, before FastAPI routes or parses anything:

    1. a path's trailing slash is dropped (``/health/`` is ``/health``): no redirect, and so no
       redirect built from a client's ``Host`` header;
    2. the bearer token (before the body is read: 401, not 422, for a stranger), compared in
       constant time;
    3. the body size: the declared Content-Length, then the bytes as they arrive (413), and the time
       the body takes to arrive (408), all before parsing;
    4. any failure the handlers did not map is this request's 500 with its message, as JSON; the
       replica goes on.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        started = False

        async def tracked_send(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def refuse(status: int, message: str, kind: str, headers: Optional[dict] = None) -> None:
            await _error(status, message, kind, headers)(scope, receive, tracked_send)

        token = _REPLICA["token"]
        if token and not path.endswith(OPEN_PATHS):
            given = _header(scope, b"authorization")
            if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip().encode(), token.encode())):
                await refuse(
                    401,
                    "missing or wrong bearer token: send 'Authorization: Bearer <token>' (the token "
                    "the service was started with, --token or GROGU_SERVE_TOKEN)",
                    "AuthError",
                    {"WWW-Authenticate": "Bearer"},
                )
                return
        limit = _REPLICA["max_body_bytes"]
        declared = _header(scope, b"content-length")
        if declared:
            if not declared.isdigit():
                await refuse(400, f"invalid Content-Length header {declared[:40]!r}", "BadRequest")
                return
            if int(declared) > limit:
                await refuse(
                    413,
                    f"the request body has {int(declared)} bytes; this service takes at most {limit} "
                    f"(grogu serve --max-body-bytes)",
                    "LimitError",
                    {"Connection": "close"},
                )
                return
        try:
            messages = await _read_body(receive, limit, _REPLICA["body_timeout_s"])
        except _Refused as refused:
            await refuse(refused.status, refused.message, refused.kind, {"Connection": "close"})
            return
        if messages is None:
            return  # the client went away before its body arrived

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        try:
            await self.app(scope, replay, tracked_send)
        except Exception as exc:  # noqa: BLE001
            logger.exception("grogu serve: request to %s failed", path)
            if not started:
                await refuse(500, f"internal error while scoring: {type(exc).__name__}: {exc}", type(exc).__name__)


def _header(scope: dict, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


app.add_middleware(_Guard)
app.router.redirect_slashes = False  # never a redirect (whose target Starlette builds from the Host header)
