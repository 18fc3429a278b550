"""Optional dependencies: the evaluation harness and the rewrite pairs need packages that the plug-in
does not need at query time (BM25, statistics, plots). They are the ``eval`` extra and are imported
only where they are used, through :func:`require`, so a missing one is a clear error."""

from __future__ import annotations

import importlib
from types import ModuleType

EVAL_INSTALL = 'pip install "grogu[eval]"'


def require(module: str, purpose: str, install: str = EVAL_INSTALL) -> ModuleType:
    """``module`` imported; an ImportError naming ``purpose`` and the install command when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{purpose} needs the package {module.split('.')[0]!r}, which is not installed: {install}"
        ) from exc


__all__ = ["require", "EVAL_INSTALL"]
