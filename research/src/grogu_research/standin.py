"""What the transcribed server stand-ins share: llama.cpp in process behind a JSON HTTP server on loopback.

A subclass names its routes (:meth:`StandIn.get`, :meth:`StandIn.post`) and its error bodies, as the
server it stands in for writes them. The tests compare what grogu reads through it with llama.cpp run
directly on the same GGUF.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .loopback import send_json


class RequestError(ValueError):
    """A request the server refuses (400)."""


class StandIn:
    """llama.cpp on a GGUF (default: the embedded SmolLM2) behind HTTP on 127.0.0.1, a free port. Use as a
    context manager. ``url`` ends with ``/v1``, as a user gives the server's; ``bodies`` records each
    POST as (path, body)."""

    #: the body of a 404
    not_found: dict[str, Any] = {"detail": "Not Found"}

    def __init__(self, gguf: str | None = None, alias: str | None = None, *, n_ctx: int = 2048) -> None:
        import llama_cpp

        from grogu.runtime.models import DEFAULT_MODEL, embedded_path

        self.gguf = gguf or embedded_path(DEFAULT_MODEL)
        self.alias = alias or DEFAULT_MODEL
        self.llm = llama_cpp.Llama(
            self.gguf, n_ctx=n_ctx, logits_all=True, verbose=False, n_threads=1, n_threads_batch=1
        )
        self.vocab = self.llm._model.vocab
        self.bodies: list[tuple[str, dict]] = []
        self._lock = threading.Lock()  # one slot: one request decodes at a time

    def get(self, path: str) -> Any:
        """The answer to GET ``path``, or None for a 404."""
        return None

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """The answer to POST ``path``, or None for a 404; a :class:`RequestError` is a 400."""
        return None

    def bad_request(self, message: str) -> dict[str, Any]:
        """The body of a 400."""
        return {"error": {"message": message}}

    def __enter__(self) -> "StandIn":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, data: Any) -> None:
                send_json(self, status, data)

            def do_GET(self) -> None:  # noqa: N802
                got = standin.get(self.path)
                self._send(404, standin.not_found) if got is None else self._send(200, got)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                standin.bodies.append((self.path, body))
                try:
                    got = standin.post(self.path, body)
                except RequestError as exc:
                    return self._send(400, standin.bad_request(str(exc)))
                self._send(404, standin.not_found) if got is None else self._send(200, got)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.llm.close()
