"""The module paths of grogu before its layers became packages, and where each one lives now.

Every old path keeps working and is the very module of its new home (``grogu.models is
grogu.runtime.models``): a class is one class whichever path imported it, and a monkeypatch through either
path reaches the code. A path below an old package (``grogu.engine.config``) follows its package
(``grogu.runtime.engine.config``) unless the table names it. New code imports the new paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

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
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    """Put the finder of old paths first on ``sys.meta_path`` (once): before the path finder, which would
    load a second copy of ``grogu.engine.config`` from the new package's folder."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
