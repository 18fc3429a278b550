"""llama.cpp's own ``llama-server`` binary as a child process on loopback, for benchmarks.

The binary is built from the llama.cpp that llama-cpp-python 0.3.36 vendors
(``benchmarks/build_llama_server.sh``), so the server and the in-process reference
(``llama_cpp.Llama``) run the same llama.cpp. Its path comes from ``binary=`` or the
``GROGU_LLAMA_SERVER`` environment variable. The command-line defaults that could bend greedy
decoding (top-k 40, min-p 0.05, ...) stay as llama.cpp sets them: grogu's requests override each one.
"""

from __future__ import annotations

import os
import urllib.request

from .child_server import ChildServer
from .testing import free_port

#: the environment variable that names the binary
ENV = "GROGU_LLAMA_SERVER"


def llama_server_path(binary: str | None = None) -> str:
    """The llama-server binary: ``binary``, else ``$GROGU_LLAMA_SERVER``; an error naming how to build one."""
    path = binary or os.environ.get(ENV)
    if not path or not os.access(path, os.X_OK):
        raise FileNotFoundError(
            f"no llama-server binary at {path!r}: build one with benchmarks/build_llama_server.sh "
            f"and pass its path (or set {ENV})"
        )
    return path


class LlamaServerBinary(ChildServer):
    """``llama-server -m GGUF`` on a free loopback port, ``slots`` slots (1), ``threads`` threads (1); ``url`` is
    its base URL. Use as a context manager. ``alias`` is the served model name (default: the GGUF's path,
    as llama-server lists it); ``extra``: more arguments."""

    name = "llama-server"

    def __init__(
        self,
        gguf: str,
        *,
        binary: str | None = None,
        alias: str | None = None,
        n_ctx: int = 2048,
        threads: int = 1,
        slots: int = 1,
        startup_s: float = 180.0,
        extra: list[str] | None = None,
    ) -> None:
        self.binary = llama_server_path(binary)
        self.gguf, self.port = gguf, free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.args = ["-m", gguf, "--host", "127.0.0.1", "--port", str(self.port), "-c", str(n_ctx), "-np", str(slots)]
        self.args += ["-t", str(threads), "-tb", str(threads), "--no-webui", "--no-warmup"]
        if alias:
            self.args += ["--alias", alias]
        self.args += list(extra or [])
        self.startup_s = startup_s

    def command(self) -> list[str]:
        return [self.binary, *self.args]

    def ready_request(self) -> urllib.request.Request:
        return urllib.request.Request(self.url[: -len("/v1")] + "/health")


__all__ = ["LlamaServerBinary", "llama_server_path", "ENV"]
