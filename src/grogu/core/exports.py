"""Packages whose public names are imported on first use (PEP 562), so that importing a package, or one
of its light modules, loads no tensor code: ``grogu --help`` and ``import grogu`` stay fast."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_names(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose public names come from the modules given
    in ``names`` (name -> module, absolute or relative to the package: ``".apis"``). A name is imported
    the first time it is read, then kept in the package like any other."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
