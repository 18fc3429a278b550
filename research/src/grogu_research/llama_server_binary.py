"""llama.cpp's own ``llama-server`` binary as a child process on loopback, for benchmarks.

The binary is built from the llama.cpp that llama-cpp-python 0.3.36 vendors
(``benchmarks/build_llama_server.sh``), so the server and the in-process reference
(``llama_cpp.Llama``) run the same llama.cpp. Its path comes from ``binary=`` or the
``GROGU_LLAMA_SERVER`` environment variable.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

from .testing import free_port

#: the command-line defaults that could bend greedy decoding stay as llama.cpp sets them (top-k 40,
#: min-p 0.05, ...): every request grogu sends overrides them, which is part of what is checked
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


class LlamaServerBinary:
    """``llama-server -m GGUF`` on a free loopback port, ``slots`` slots (1), ``threads`` threads (1); ``url`` is
    its base URL.

    Use as a context manager. ``alias`` is the served model name (default: the GGUF's file name, as
    llama-server lists it)."""

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
        self.startup_s, self.proc = startup_s, None

    def __enter__(self) -> "LlamaServerBinary":
        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([self.binary, *self.args], stdout=self._log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited at start: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url[: -len("/v1")] + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.__exit__()
        raise TimeoutError(f"llama-server did not answer within {self.startup_s} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-n:]

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None


__all__ = ["LlamaServerBinary", "llama_server_path", "ENV"]
