"""Run a script many times, each run in its own process, and report how each process ended.

    python run_many.py SCRIPT RUNS OUT_DIR

The imports that dominate a start-up (torch, transformers and its Llama model, grogu) are done once,
here, before any thread exists; each run is a child forked from this process that runs SCRIPT as
``__main__`` and then ends through the interpreter's normal exit (finalisation, exit hooks, static
destructors), exactly the path on which ``python SCRIPT`` used to abort. A run costs about a
second instead of the ~6 s of a fresh interpreter. Runs are sequential. Each child's stdout and
stderr go to OUT_DIR/<run>.out / .err; one line per run is printed: ``<run> <exit status>`` (the
shell's convention: 128 + N for a run killed by signal N, e.g. 134 for SIGABRT).
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> int:
    script, runs, out_dir = os.path.abspath(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    here = os.path.dirname(script)
    sys.path.insert(0, here)
    import grogu_research.testing  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401

    import grogu  # noqa: F401

    os.makedirs(out_dir, exist_ok=True)
    for run in range(runs):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return _child(script, os.path.join(out_dir, str(run)))
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        print(run, code if code >= 0 else 128 - code, flush=True)
    return 0


def _child(script: str, out: str) -> int:
    """Run the script as __main__ with its output in files; the return value becomes the exit status
    of the normal interpreter exit that follows (this frame returns to the module's top level)."""
    for fd, suffix in ((1, ".out"), (2, ".err")):
        target = os.open(out + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = [script]
    # an exception propagates (exit status 1, as with python SCRIPT); the script's globals are kept
    # until the interpreter's exit tears modules down, as a script's own globals are
    _SCRIPT_GLOBALS.append(runpy.run_path(script, run_name="__main__"))
    return 0


_SCRIPT_GLOBALS: list[dict] = []


if __name__ == "__main__":
    sys.exit(main())
