"""grogu: how useful each retrieved document is to the specific LLM that will read it.

Main entry points: :class:`UtilityScorer` (per-document GROGU scores, reranking, layouts) and
:class:`Engine` (the shared batched scoring engine every integration calls); :class:`ServerTarget` (a
target LLM behind an inference server, in place of an Engine).

The package is six layers, each a subpackage that imports only the ones before it: :mod:`.core`,
:mod:`.runtime`, :mod:`.metrics`, :mod:`.rerank`, :mod:`.observe` and :mod:`.apps`. The names below are
imported on first use, so ``import grogu`` (and the command line's ``--help``) loads no model code. The
module paths from before the layers (``grogu.models``, ``grogu.engine``, ...) still import, with a warning,
until grogu 0.3.0: see :mod:`._moved`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._moved import MOVED, install
from .core.exports import lazy_names

install()

if TYPE_CHECKING:  # what static tools see; at run time each name is imported on first use
    from grogu.apps.tune import tune  # noqa: F401
    from grogu.core.prompts import Document, PromptTemplate, TruncationWarning  # noqa: F401
    from grogu.core.results import ContextScore, DocumentScore, GateVerdict, LayoutChoice  # noqa: F401
    from grogu.core.types import Generation, TokenStats  # noqa: F401
    from grogu.core.version import __version__  # noqa: F401
    from grogu.metrics.grogu import ALPHA, DEFAULT_METRIC, METRICS, TOP_K_FRAC  # noqa: F401
    from grogu.rerank.remote.client import RemoteInfluenceScorer, RemoteScorer  # noqa: F401
    from grogu.rerank.scorer import UtilityScorer, standard_layouts  # noqa: F401
    from grogu.rerank.settings import ModeSettings  # noqa: F401
    from grogu.rerank.tuned import TunedSettings, load_tuned  # noqa: F401
    from grogu.runtime.engine import Engine, EngineConfig, get_engine  # noqa: F401
    from grogu.runtime.inference_server import ServerCapabilityError, ServerError, ServerTarget  # noqa: F401
    from grogu.runtime.models import DEFAULT_MODEL, load_model  # noqa: F401

#: the public names and the module each comes from
_EXPORTS = {
    "Engine": "grogu.runtime.engine",
    "EngineConfig": "grogu.runtime.engine",
    "Generation": "grogu.core.types",
    "TokenStats": "grogu.core.types",
    "get_engine": "grogu.runtime.engine",
    "ALPHA": "grogu.metrics.grogu",
    "DEFAULT_METRIC": "grogu.metrics.grogu",
    "METRICS": "grogu.metrics.grogu",
    "TOP_K_FRAC": "grogu.metrics.grogu",
    "DEFAULT_MODEL": "grogu.runtime.models",
    "load_model": "grogu.runtime.models",
    "ModeSettings": "grogu.rerank.settings",
    "TunedSettings": "grogu.rerank.tuned",
    "load_tuned": "grogu.rerank.tuned",
    "tune": "grogu.apps.tune",
    "Document": "grogu.core.prompts",
    "PromptTemplate": "grogu.core.prompts",
    "TruncationWarning": "grogu.core.prompts",
    "UtilityScorer": "grogu.rerank.scorer",
    "DocumentScore": "grogu.core.results",
    "GateVerdict": "grogu.core.results",
    "ContextScore": "grogu.core.results",
    "LayoutChoice": "grogu.core.results",
    "standard_layouts": "grogu.rerank.scorer",
    "__version__": "grogu.core.version",
    "RemoteScorer": "grogu.rerank.remote.client",
    "RemoteInfluenceScorer": "grogu.rerank.remote.client",
    "ServerTarget": "grogu.runtime.inference_server",
    "ServerError": "grogu.runtime.inference_server",
    "ServerCapabilityError": "grogu.runtime.inference_server",
}

__all__ = list(_EXPORTS)


_exported, __dir__ = lazy_names(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if f"grogu.{name}" in MOVED:  # an old module path read as an attribute: grogu.models
        return importlib.import_module(f"grogu.{name}")
    return _exported(name)
