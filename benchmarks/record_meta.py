"""What a record measured, written beside its figures as ``"meta"``: the commit of the code, whether the
tree had uncommitted changes, the machine (CPU model, cores, GPU), the library versions, the command and
the settings that differ from the defaults. ``benchmarks/claims.py`` reads ``meta.commit`` to say which
code a published figure describes.

    from record_meta import meta
    json.dump({"meta": meta(settings={"dtype": "bfloat16"}), "rows": rows}, f)
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return out.stdout.strip()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else what ``platform`` says)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu() -> str | None:
    """The first CUDA device's name, without importing torch where it is not loaded yet."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0)


def versions(*names: str) -> dict[str, str]:
    out = {}
    for name in ("torch", "transformers", *names):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def write_sidecar(record_path: str, settings: dict[str, Any] | None = None, **extra: Any) -> str:
    """Write ``RECORD.meta.json`` beside a record that cannot hold a ``meta`` key (JSONL, text)."""
    import json

    path = f"{record_path}.meta.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(meta(settings, **extra), f, indent=1)
        f.write("\n")
    return path


def meta(settings: dict[str, Any] | None = None, command: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    """The ``meta`` of a record made now: commit, dirty, machine, versions, command, settings."""
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "src", "integrations", "research"))
    return {
        "commit": _git("rev-parse", "--short=7", "HEAD"),
        "dirty": dirty,
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "gpu": gpu(),
            "python": platform.python_version(),
            "threads": os.environ.get("OMP_NUM_THREADS"),
        },
        "versions": versions(),
        "command": shlex.join(command if command is not None else [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "settings": settings or {},
        **extra,
    }
