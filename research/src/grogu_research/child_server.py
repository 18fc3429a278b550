"""An inference server as a child process on loopback, for tests and benchmarks: started on ``with``, ready
when its readiness URL answers, stopped by its own PID on exit. Its output goes to a temporary file (a
pipe nobody reads while it runs would fill and stall it); the tail is in the error when it fails to start."""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from typing import Any


class ChildServer:
    """A subclass sets :attr:`name`, :meth:`command` and :meth:`ready_request`. ``url`` is its base URL."""

    name = "the server"
    url: str
    startup_s: float = 180.0

    def command(self) -> list[str]:
        """The command line that starts the server."""
        raise NotImplementedError

    def ready_request(self) -> urllib.request.Request:
        """The request that answers 200 once the server serves."""
        return urllib.request.Request(self.url + "/models")

    def __enter__(self) -> Any:
        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.__exit__()
                raise RuntimeError(f"{self.name} exited at start: {tail}")
            try:
                with urllib.request.urlopen(self.ready_request(), timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        tail = self.log_tail()
        self.__exit__()
        raise TimeoutError(f"{self.name} did not answer within {self.startup_s} s: {tail}")

    def log_tail(self, n: int = 2000) -> str:
        """The last ``n`` characters the server wrote."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-n:]

    def __exit__(self, *exc: Any) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None


__all__ = ["ChildServer"]
