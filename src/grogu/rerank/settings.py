"""Rerank settings (:class:`ModeSettings`), and the contexts a mode scores (:func:`plan`) and what it keeps
(:func:`decide`), each asked of the mode's strategy in :data:`grogu.rerank.modes.MODES`.

The one pipeline that runs them on a target, in process or in the service, is :mod:`grogu.rerank.pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

from typing_extensions import TypedDict

from ..core.checks import check_choice, check_float, check_int
from ..metrics.defaults import default_metric, metric_name
from . import selection
from .modes import MODES, Selection, doubt, gate_reading, mode_of, verdict

#: the mode used when none is given (see README, "Which rerank mode")
DEFAULT_MODE = "context"
#: documents kept where none is said, everywhere: ``UtilityScorer.rerank``, the integrations' ``top_n``,
#: ``grogu rerank --top-n``, ``/rerank``; the measured top 3 of 5 (``top_n=None`` keeps them all)
DEFAULT_TOP_N = 3
#: answer styles of the scoring pass: "long" (the paper's prompt, free-length answers) or "short"
#: (a short-answer instruction, a small token budget, the answer cut at its first line or sentence end)
ANSWER_STYLES = ("long", "short")
#: the answer budget of each style where none is given (the scorer, the service, both integrations)
DEFAULT_MAX_NEW_TOKENS = {"long": 64, "short": 16}
DEFAULT_FAMILY = "swap_orders"
DEFAULT_WEIGHT = 0.6
DEFAULT_MARGIN = 0.3
DEFAULT_RULE = "confidence_support"
DEFAULT_CONFIDENCE_WEIGHT = 0.5
DEFAULT_SUPPORT_WEIGHT = 1.0
#: the gate's defaults: chosen on tuning splits, adopted on held-out ones (benchmarks/selective_settings.json)
DEFAULT_GATE = "doubt"
DEFAULT_GATE_SUPPORT = 0.8
DEFAULT_GATE_CONFIDENCE = 0.4
#: the gate's floor on the documents' entropy change of the answer's key tokens (None: not read)
DEFAULT_GATE_ENTROPY_CHANGE = None
#: the context mode's defaults: chosen on the tuning splits of three data sets (benchmarks/context_settings.json).
#: "auto": KeyEntropy, or perplexity on a grounded-only target, which cannot teacher-force
DEFAULT_CONTEXT_METRIC = "auto"


def _setting(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:
    """A field of :class:`ModeSettings` with its description (the command line's ``--help`` reads it)."""
    return field(default=default, metadata={"help": help, "choices": choices})


def _context_metric(name: Any) -> str:
    """A context_metric setting, checked: 'auto' (any case) or a metric's canonical name."""
    if isinstance(name, str) and name.strip().lower() == "auto":
        return "auto"
    try:
        return metric_name(name)
    except (TypeError, ValueError) as e:
        raise ValueError(f"context_metric: {e}; or 'auto' (key_entropy, or ppl on a grounded-only target)") from None


@dataclass(kw_only=True, frozen=True)
class ModeSettings:
    """Settings of the rerank modes (each used by the mode named in its comment): the one settings
    object of reranking. The scorer, both integrations and the service hold one, built and checked
    here (:meth:`build`); a setting added here travels everywhere without further code."""

    mode: str = _setting(DEFAULT_MODE, "rerank mode (see the README, 'Which rerank mode')", MODES)
    weight: float = _setting(DEFAULT_WEIGHT, "fusion: weight of the utility rank (1 - weight: retrieval rank)")
    family: str = _setting(
        DEFAULT_FAMILY,
        "context: the candidate contexts (grogu.rerank.selection.context_candidates)",
        selection.CANDIDATE_FAMILIES,
    )
    swaps: int = _setting(2, "context: how many next documents try the last slot of the top-n")
    margin: float = _setting(
        DEFAULT_MARGIN,
        "context: how much a candidate must beat the retriever's own context "
        "on the rule's score (the default is tuned for the default rule "
        "and context_metric: 0.3 of KeyEntropy plus support)",
    )
    context_metric: str = _setting(
        DEFAULT_CONTEXT_METRIC,
        "context: the GROGU metric whose utility is the "
        "candidates' confidence (grogu.metrics.METRICS), or 'auto': "
        "key_entropy, or ppl on a grounded-only target",
    )
    rule: str = _setting(
        DEFAULT_RULE,
        "context: how the candidate is chosen (grogu.rerank.selection.selection_scores)",
        selection.SELECTION_RULES,
    )
    confidence_weight: float = _setting(
        DEFAULT_CONFIDENCE_WEIGHT, "context, rule 'combined': weight of the confidence against the answers' agreement"
    )
    support_weight: float = _setting(
        DEFAULT_SUPPORT_WEIGHT,
        "context, rule 'confidence_support': weight of the share "
        "of the answer's words found in the candidate's own "
        "documents, added to its confidence",
    )
    supported: bool = _setting(
        True,
        "context: among candidates giving the chosen answer, hand over the one whose "
        "documents hold it (grogu.rerank.selection.prefer_supported)",
    )
    gate: str = _setting(
        DEFAULT_GATE,
        "context: 'always' scores every candidate; 'doubt' answers the retriever's "
        "context first and tries the others only when that answer is in doubt",
        selection.GATES,
    )
    gate_support: float = _setting(
        DEFAULT_GATE_SUPPORT,
        "context, gate 'doubt': in doubt when less than this share of the answer's words is in its documents",
    )
    gate_confidence: float = _setting(
        DEFAULT_GATE_CONFIDENCE,
        "context, gate 'doubt': in doubt when the answer's mean token probability is below this",
    )
    gate_entropy_change: float | None = _setting(
        DEFAULT_GATE_ENTROPY_CHANGE,
        "context, gate 'doubt': in doubt when the documents lower the entropy of the answer's key tokens "
        "by less than this (nats, GROGU's entropy_change; None: not read; a target that cannot "
        "teacher-force never reads it)",
    )

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, tuple(MODES))
        set_ = object.__setattr__  # frozen: the checked (normalised) values replace the given ones
        set_(self, "weight", selection.check_unit("weight", self.weight))
        check_choice("family", self.family, selection.CANDIDATE_FAMILIES)
        set_(self, "swaps", check_int("swaps", self.swaps, minimum=0))
        set_(self, "margin", check_float("margin", self.margin, minimum=0.0))
        check_choice("rule", self.rule, selection.SELECTION_RULES)
        set_(self, "context_metric", _context_metric(self.context_metric))
        set_(self, "confidence_weight", selection.check_unit("confidence_weight", self.confidence_weight))
        set_(self, "support_weight", check_float("support_weight", self.support_weight, minimum=0.0))
        if not isinstance(self.supported, bool):
            raise ValueError(f"supported must be True or False, got {self.supported!r}")
        check_choice("gate", self.gate, selection.GATES)
        set_(self, "gate_support", selection.check_unit("gate_support", self.gate_support))
        set_(self, "gate_confidence", selection.check_unit("gate_confidence", self.gate_confidence))
        if self.gate_entropy_change is not None:
            set_(self, "gate_entropy_change", check_float("gate_entropy_change", self.gate_entropy_change))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' names (the keyword arguments :meth:`build` takes)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def build(cls, base: "ModeSettings | Mapping[str, Any] | None" = None, **changes: Any) -> "ModeSettings":
        """Settings from ``base`` (a ModeSettings, a mapping of settings, or None for the defaults) with
        the ``changes`` that are not None; an unknown name is a TypeError naming the known ones. A
        ``grogu tune`` file's path goes through :func:`grogu.rerank.tuned.build_settings`."""
        if base is not None and not isinstance(base, (ModeSettings, Mapping)):
            raise TypeError(
                f"settings must be a grogu.ModeSettings or a mapping of its settings, got {type(base).__name__}"
            )
        values = dict(base.as_dict() if isinstance(base, ModeSettings) else (base or {}))
        values.update({k: v for k, v in changes.items() if v is not None})
        unknown = sorted(set(values) - set(cls.names()))
        if unknown:
            raise TypeError(f"unknown rerank setting(s) {unknown}; the settings are {list(cls.names())}")
        return cls(**values)

    @classmethod
    def from_arguments(
        cls, base: "ModeSettings | Mapping[str, Any] | None", arguments: Mapping[str, Any]
    ) -> "ModeSettings":
        """:meth:`build` from the settings among a command's arguments (None: not given)."""
        return cls.build(base, **{name: arguments[name] for name in cls.names() if name in arguments})

    def for_target(self, grounded_only: bool) -> "ModeSettings":
        """These settings for a target: ``context_metric="auto"`` becomes its default metric; a target that
        cannot teacher-force (``grounded_only``) reads no entropy change at the gate."""
        out = self
        if grounded_only and self.gate_entropy_change is not None:
            out = replace(out, gate_entropy_change=None)
        if out.context_metric != "auto":
            return out
        return replace(out, context_metric=default_metric(grounded_only))

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (JSON-ready), by name."""
        return {name: getattr(self, name) for name in self.names()}

    def check_threshold(self, threshold: float | None) -> None:
        """A utility threshold needs per-document utilities, which the context mode does not compute."""
        if threshold is not None and not MODES[self.mode].per_document:
            raise ValueError(f"threshold applies to per-document utilities, which mode={self.mode!r} does not compute")


#: The rerank settings as keyword arguments of ``rerank`` / ``arerank`` (each optional; None keeps the value
#: of ``settings=``), made from :class:`ModeSettings`' fields: ``help()`` and IDEs list them, declared once.
ModeOverrides = TypedDict(
    "ModeOverrides",
    {f.name: f"{f.type} | None" for f in fields(ModeSettings)},  # type: ignore[misc]
    total=False,
)


def split_settings(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` split into (rerank settings by :meth:`ModeSettings.names`, the rest)."""
    names = set(ModeSettings.names())
    return ({k: v for k, v in options.items() if k in names}, {k: v for k, v in options.items() if k not in names})


def plan(settings: ModeSettings, base: list[int], top_n: int | None) -> list[list[int]]:
    """The contexts (lists of input indices) the mode needs scored, in one batch. ``base``: the input
    indices in retrieval order (best first)."""
    return mode_of(settings).plan(settings, base, top_n)


def plan_size(settings: ModeSettings, n_docs: int, top_n: int | None) -> tuple[int, int]:
    """(contexts, documents in them, an empty context counted as one) that :func:`plan` would return,
    computed arithmetically, before any candidate is built."""
    return mode_of(settings).size(settings, n_docs, top_n)


def grounded_choice(settings: ModeSettings) -> bool:
    """Whether the mode's choice reads the grounded answers alone (their text and a metric of the
    grounded statistics, :data:`grogu.metrics.GROUNDED_METRICS`): the context mode with such a
    ``context_metric``, under any rule. Then only the chosen context needs the ungrounded statistics
    (its reported score under the scorer's metric)."""
    return mode_of(settings).grounded_choice(settings)


def gated(settings: ModeSettings, contexts: Sequence[Sequence[int]]) -> bool:
    """Whether the retriever's context is answered first, the others only in doubt (:func:`doubt`)."""
    return mode_of(settings).gated(settings, contexts)


def decide(
    settings: ModeSettings,
    base: list[int],
    contexts: list[list[int]],
    scored: Sequence[Any],
    top_n: int | None,
    threshold: float | None,
    relevance: Sequence[float] | None,
    texts: Sequence[str] | None = None,
) -> Selection:
    """The selection from the scored contexts of :func:`plan`. ``texts``: each input document's text
    (the context mode's support reads them: the ``confidence_support`` rule and the gate need them, the
    support tie-break is skipped without them). Under a gate (:func:`gated`), ``scored`` may hold the
    first candidate alone when it is not in doubt."""
    return mode_of(settings).decide(settings, base, contexts, scored, top_n, threshold, relevance, texts)


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
]
