"""The HTTP face of the scoring service: the FastAPI app, its JSON responses, and how failures become
status codes (400 malformed JSON, 401 no token, 413 over a limit, 422 a wrong type or a bad value with
grogu's own message, 500 anything else, with its message). The routes are in :mod:`.service`."""

# no `from __future__ import annotations`: FastAPI reads the handlers' annotations at runtime
import hmac
import json
import logging
from typing import Any, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__

logger = logging.getLogger("grogu.serve")


class LimitError(Exception):
    """A request over the service's size limits (HTTP 413)."""


class _JSON(JSONResponse):
    """JSON that keeps NaN / infinities (a perplexity can overflow) instead of failing the response."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, allow_nan=True, separators=(",", ":")).encode("utf-8")


app = FastAPI(title="grogu scoring service", version=__version__, default_response_class=_JSON,
              description="LLM-specific utility of retrieved documents (GROGU, Influence, ΔSePer, ACU). "
                          "Every route but /health needs `Authorization: Bearer <token>` when the service "
                          "was started with a token.")


def _error(status: int, message: str, kind: str, headers: dict | None = None) -> _JSON:
    return _JSON({"detail": message, "error": kind}, status_code=status, headers=headers)


@app.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError) -> _JSON:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _error(400, f"malformed JSON body: {errors[0].get('ctx', {}).get('error', errors[0]['msg'])}",
                      "MalformedJSON")
    parts = []
    for e in errors[:10]:
        field = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{field}: {e.get('msg')}")
    return _error(422, "invalid request: " + "; ".join(parts), "ValidationError")


@app.exception_handler(ValueError)
@app.exception_handler(TypeError)
async def _bad_value(request: Request, exc: Exception) -> _JSON:
    return _error(422, str(exc), type(exc).__name__)


@app.exception_handler(LimitError)
async def _too_large(request: Request, exc: LimitError) -> _JSON:
    return _error(413, str(exc), "LimitError")


#: routes open without the token: liveness and the API's own description
OPEN_PATHS = ("/health", "/docs", "/openapi.json", "/redoc")

#: this process's replica settings the middleware needs (a replica is a process of its own). Set
#: through a function: Ray pickles the ingress class by value, and its module globals with it.
_REPLICA: dict[str, Any] = {"token": None}


def set_replica_token(token: Optional[str]) -> None:
    _REPLICA["token"] = token


@app.middleware("http")
async def _guard(request: Request, call_next: Callable[[Request], Any]) -> Any:
    """The bearer token first (before the body is even read: 401, not 422, for a stranger), then any
    failure the handlers did not map is this request's 500 with its message; the replica goes on."""
    token = _REPLICA["token"]
    if token and not request.url.path.rstrip("/").endswith(OPEN_PATHS):
        given = request.headers.get("authorization", "")
        if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].strip().encode(), token.encode())):
            return _error(401, "missing or wrong bearer token: send 'Authorization: Bearer <token>' (the token "
                               "the service was started with, --token or GROGU_SERVE_TOKEN)", "AuthError",
                          {"WWW-Authenticate": "Bearer"})
    try:
        return await call_next(request)
    except Exception as exc:  # noqa: BLE001
        logger.exception("grogu serve: request to %s failed", request.url.path)
        return _error(500, f"internal error while scoring: {type(exc).__name__}: {exc}", type(exc).__name__)
