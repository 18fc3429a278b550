"""A JSON HTTP server on 127.0.0.1 whose answers a test gives: what the client-side tests run against.

:class:`LoopbackJSON` keeps connections alive (HTTP/1.1), counts the TCP connections it accepts and
records each request as (method, path, body). ``answer(method, path, body)`` returns (status, JSON body).
Use it as a context manager; it listens on a free port until closed.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Answer = Callable[[str, str, Any], "tuple[int, Any]"]


def send_json(handler: BaseHTTPRequestHandler, status: int, data: Any) -> None:
    """Answer ``handler``'s request with ``status`` and ``data`` as a JSON body (content-length set)."""
    raw = json.dumps(data).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


class LoopbackJSON:
    """See the module docstring. ``url``: ``http://127.0.0.1:<port>`` plus ``prefix``."""

    def __init__(self, answer: Answer, prefix: str = "") -> None:
        self.answer = answer
        self.connections = 0
        self.requests: list[tuple[str, str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: one TCP connection may carry many requests

            def setup(self) -> None:
                super().setup()
                server.connections += 1

            def _handle(self, method: str, body: Any) -> None:
                server.requests.append((method, self.path, body))
                send_json(self, *server.answer(method, self.path.split("?")[0], body))

            def do_GET(self) -> None:  # noqa: N802
                self._handle("GET", None)

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST", json.loads(self.rfile.read(int(self.headers["content-length"]))))

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.block_on_close = False
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{prefix}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self, method: str | None = None) -> list[str]:
        """The paths requested so far (of ``method`` only, when given), in order."""
        return [p for m, p, _ in self.requests if method is None or m == method]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> "LoopbackJSON":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
