"""The module paths of grogu before its layers became packages, and where each one lives now.

Every old path keeps working and is the very module of its new home (``grogu.models is
grogu.runtime.models``): a class is one class whichever path imported it, and a monkeypatch through either
path reaches the code. A path below an old package (``grogu.engine.config``) follows its package
(``grogu.runtime.engine.config``) unless the table names it. New code imports the new paths.

Importing an old path warns once, with a :class:`MovedPathWarning` that names the new path. grogu 0.3.0
removes the old paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

#: the version of grogu that removes the old paths
REMOVED_IN = "0.3.0"

#: old module path -> its new home
MOVED: dict[str, str] = {
    "grogu.results": "grogu.core.results",
    "grogu.prompts": "grogu.core.prompts",
    "grogu.checks": "grogu.core.checks",
    "grogu.target": "grogu.core.target",
    "grogu.files": "grogu.core.files",
    "grogu.extras": "grogu.core.extras",
    "grogu.version": "grogu.core.version",
    "grogu.engine.types": "grogu.core.types",
    "grogu.engine": "grogu.runtime.engine",
    "grogu.inference_server": "grogu.runtime.inference_server",
    "grogu.models": "grogu.runtime.models",
    "grogu.gguf_meta": "grogu.runtime.gguf_meta",
    "grogu.coalescer": "grogu.runtime.coalescer",
    "grogu.embedders": "grogu.runtime.embedders",
    "grogu.seper": "grogu.metrics.seper",
    "grogu.acu": "grogu.metrics.acu",
    "grogu.influence": "grogu.metrics.influence",
    "grogu.attribution": "grogu.metrics.attribution",
    "grogu.scales": "grogu.metrics.scales",
    "grogu.rerank_modes": "grogu.rerank.modes",
    "grogu.rerank_pipeline": "grogu.rerank.pipeline",
    "grogu.selection": "grogu.rerank.selection",
    "grogu.context_scoring": "grogu.rerank.context_scoring",
    "grogu.scorer": "grogu.rerank.scorer",
    "grogu.scorer_factory": "grogu.rerank.factory",
    "grogu.batch": "grogu.rerank.batch",
    "grogu.retrieval": "grogu.rerank.retrieval",
    "grogu.serve.client": "grogu.rerank.remote.client",
    "grogu.serve.client_base": "grogu.rerank.remote.client_base",
    "grogu.serve.metric_clients": "grogu.rerank.remote.metric_clients",
    "grogu.serve.utility_client": "grogu.rerank.remote.utility_client",
    "grogu.serve.transport": "grogu.rerank.remote.transport",
    "grogu.serve.wire": "grogu.rerank.remote.wire",
    "grogu.influence_log": "grogu.observe.influence_log",
    "grogu.influence_record": "grogu.observe.influence_record",
    "grogu.sinks": "grogu.observe.sinks",
    "grogu.tracing": "grogu.observe.tracing",
    "grogu.cli": "grogu.apps.cli",
    "grogu.cli_arguments": "grogu.apps.cli.arguments",
    "grogu.cli_runners": "grogu.apps.cli.runners",
    "grogu.integration_settings": "grogu.apps.integration_settings",
    "grogu.serve": "grogu.apps.serve",
    "grogu.audit": "grogu.apps.audit",
}

#: old packages whose submodules followed them
PACKAGES = ("grogu.audit", "grogu.engine", "grogu.inference_server", "grogu.serve")


class MovedPathWarning(FutureWarning):
    """An old module path of grogu was imported; the message names its new path."""


def new_home(name: str) -> str | None:
    """The new path of an old module path (None: the path did not move)."""
    if name in MOVED:
        return MOVED[name]
    for package in PACKAGES:
        if name.startswith(package + "."):
            return MOVED[package] + name[len(package) :]
    return None


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old path as the module of its new home (the same object, under both names)."""

    def find_spec(self, name, path=None, target=None):
        if new_home(name) is None:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(new_home(spec.name))
        spec.loader_state = module.__spec__  # importlib sets __spec__ to this old path's; put back below
        return module

    def exec_module(self, module) -> None:
        old = module.__spec__.name
        module.__spec__ = module.__spec__.loader_state
        warnings.warn(
            f"{old} has moved to {new_home(old)}; import the new path. "
            f"grogu {REMOVED_IN} removes the old module paths.",
            MovedPathWarning,
            stacklevel=_importer_level(),
        )


# files whose frames stand between the importing code and the warning: this one, the package root (its
# __getattr__ imports an old path read as an attribute) and importlib's import_module
_NOT_THE_IMPORTER = {
    os.path.normcase(os.path.abspath(f))
    for f in (__file__, os.path.join(os.path.dirname(__file__), "__init__.py"), importlib.__file__)
}


def _importer_level() -> int:
    """The ``stacklevel`` of a warning issued in :meth:`_OldPaths.exec_module` that points at the code that
    imports the old path. ``warnings.warn`` skips the import system's own frames as it counts, so they are
    not counted here either."""
    level, frame = 1, sys._getframe(2)  # the caller of exec_module's caller: the import system, or above
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:  # as warnings.warn tells its internal frames
            frame = frame.f_back
            continue
        level += 1
        if os.path.normcase(os.path.abspath(name)) not in _NOT_THE_IMPORTER:
            return level
        frame = frame.f_back
    return 2


def install() -> None:
    """Put the finder of old paths first on ``sys.meta_path`` (once): before the path finder, which would
    load a second copy of ``grogu.engine.config`` from the new package's folder."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
