"""grogu: how useful each retrieved document is to the specific LLM that will read it.

Main entry points: :class:`UtilityScorer` (per-document GROGU scores, reranking, layouts) and
:class:`Engine` (the shared batched scoring engine every integration calls); :class:`ServerTarget` (a
target LLM behind an inference server, in place of an Engine).
"""

from .engine import Engine, EngineConfig, Generation, TokenStats, get_engine
from .inference_server import ServerCapabilityError, ServerError, ServerTarget
from .metrics import ALPHA, DEFAULT_METRIC, METRICS, TOP_K_FRAC
from .models import DEFAULT_MODEL, load_model
from .prompts import Document, PromptTemplate, TruncationWarning
from .rerank import ModeSettings
from .results import GateVerdict
from .scorer import ContextScore, DocumentScore, LayoutChoice, UtilityScorer, standard_layouts
from .version import __version__

__all__ = [
    "Engine",
    "EngineConfig",
    "Generation",
    "TokenStats",
    "get_engine",
    "ALPHA",
    "DEFAULT_METRIC",
    "METRICS",
    "TOP_K_FRAC",
    "DEFAULT_MODEL",
    "load_model",
    "ModeSettings",
    "Document",
    "PromptTemplate",
    "TruncationWarning",
    "UtilityScorer",
    "DocumentScore",
    "GateVerdict",
    "ContextScore",
    "LayoutChoice",
    "standard_layouts",
    "__version__",
    "RemoteScorer",
    "RemoteInfluenceScorer",
    "ServerTarget",
    "ServerError",
    "ServerCapabilityError",
]


def __getattr__(name: str):
    # the service clients (grogu.serve) are imported on first use: the core does not need httpx
    if name in ("RemoteScorer", "RemoteInfluenceScorer"):
        from . import serve

        return getattr(serve, name)
    raise AttributeError(f"module 'grogu' has no attribute {name!r}")
