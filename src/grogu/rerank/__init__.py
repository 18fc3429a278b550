"""The rerank layer: from a query and documents to the documents to keep.

Its settings (:mod:`.settings`: ``ModeSettings``; its names are also this package's, as the old module
``grogu.rerank`` had them) and modes (:mod:`.modes`, a registry), the one rerank pipeline
(:mod:`.pipeline`), selection rules (:mod:`.selection`), context scoring and the scorer
(:mod:`.context_scoring`, :mod:`.scorer`), the factory that turns whatever a user passes into a scorer
(:mod:`.factory`), batch scoring (:mod:`.batch`), retrieval (:mod:`.retrieval`) and the scoring service's
client (:mod:`.remote`: the scorer's interface over HTTP, so it stands where the scorer stands). It imports
the core, runtime and metrics layers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported from .settings on first use
    from .settings import (  # noqa: F401
        ANSWER_STYLES,
        DEFAULT_CONFIDENCE_WEIGHT,
        DEFAULT_CONTEXT_METRIC,
        DEFAULT_FAMILY,
        DEFAULT_GATE,
        DEFAULT_GATE_CONFIDENCE,
        DEFAULT_GATE_ENTROPY_CHANGE,
        DEFAULT_GATE_SUPPORT,
        DEFAULT_MARGIN,
        DEFAULT_MAX_NEW_TOKENS,
        DEFAULT_MODE,
        DEFAULT_RULE,
        DEFAULT_SUPPORT_WEIGHT,
        DEFAULT_TOP_N,
        DEFAULT_WEIGHT,
        MODES,
        ModeOverrides,
        ModeSettings,
        Selection,
        decide,
        doubt,
        gate_reading,
        gated,
        grounded_choice,
        mode_of,
        plan,
        plan_size,
        split_settings,
        verdict,
    )

#: the names of the old module ``grogu.rerank`` (its settings, rules and defaults), from :mod:`.settings`
__all__ = [
    "ModeSettings",
    "ModeOverrides",
    "split_settings",
    "Selection",
    "plan",
    "grounded_choice",
    "gated",
    "gate_reading",
    "doubt",
    "verdict",
    "decide",
    "plan_size",
    "mode_of",
    "MODES",
    "DEFAULT_MODE",
    "DEFAULT_TOP_N",
    "ANSWER_STYLES",
    "DEFAULT_MAX_NEW_TOKENS",
    "DEFAULT_FAMILY",
    "DEFAULT_WEIGHT",
    "DEFAULT_MARGIN",
    "DEFAULT_RULE",
    "DEFAULT_CONFIDENCE_WEIGHT",
    "DEFAULT_SUPPORT_WEIGHT",
    "DEFAULT_GATE",
    "DEFAULT_GATE_SUPPORT",
    "DEFAULT_GATE_CONFIDENCE",
    "DEFAULT_GATE_ENTROPY_CHANGE",
    "DEFAULT_CONTEXT_METRIC",
]
__getattr__, __dir__ = lazy_names(__name__, dict.fromkeys(__all__, ".settings"))
