"""Rerank modes: their settings, the contexts a mode scores (:func:`plan`) and what it keeps (:func:`decide`).

The one pipeline that runs them on a target, in process or in the service, is :mod:`grogu.rerank_pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Sequence

from typing_extensions import TypedDict

from . import selection
from .checks import check_choice, check_float, check_int
from .metrics import GROUNDED_METRICS, default_metric, metric_name
from .results import GateVerdict

#: the mode used when none is given (see README, "Which rerank mode")
DEFAULT_MODE = "context"
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

    mode: str = _setting(DEFAULT_MODE, "rerank mode (see the README, 'Which rerank mode')", selection.RERANK_MODES)
    weight: float = _setting(DEFAULT_WEIGHT, "fusion: weight of the utility rank (1 - weight: retrieval rank)")
    family: str = _setting(
        DEFAULT_FAMILY,
        "context: the candidate contexts (grogu.selection.context_candidates)",
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
        "context: how the candidate is chosen (grogu.selection.selection_scores)",
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
        "documents hold it (grogu.selection.prefer_supported)",
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

    def __post_init__(self) -> None:
        selection.check_mode(self.mode)
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

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings' names (the keyword arguments :meth:`build` takes)."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def build(cls, base: "ModeSettings | Mapping[str, Any] | None" = None, **changes: Any) -> "ModeSettings":
        """Settings from ``base`` (a ModeSettings, a mapping of settings, or None for the defaults) with
        the ``changes`` that are not None; an unknown name is a TypeError naming the known ones."""
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
        """These settings for a target: ``context_metric="auto"`` becomes its default metric."""
        if self.context_metric != "auto":
            return self
        return replace(self, context_metric=default_metric(grounded_only))

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain values (JSON-ready), by name."""
        return {name: getattr(self, name) for name in self.names()}

    def check_threshold(self, threshold: float | None) -> None:
        """A utility threshold needs per-document utilities, which the context mode does not compute."""
        if threshold is not None and self.mode == "context":
            raise ValueError("threshold applies to per-document utilities, which mode='context' does not compute")


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


@dataclass(kw_only=True)
class Selection:
    """What a rerank mode chose.

    order: input indices of the documents to give the LLM, in that order. scores: per-document utility
    (input order) where the mode scored documents alone, else None. fused: the fused score (fusion).
    none: utility of no document at all (prune). candidates / candidate_scores: the contexts scored
    (context mode), ``chosen`` the index of the one used, ``rule_scores`` each candidate's score under the
    selection rule. context: the chosen context's score, with the answer the LLM gave while it was scored
    (the pipeline's answer when the scoring prompt is its own). doubt: under ``gate="doubt"``, whether
    the retriever's context was in doubt (False: only it was scored and it is kept); None without a gate.
    gate: the verdict on the retriever's context (:class:`grogu.GateVerdict`), under either gate, where
    the documents' texts were given.
    """

    mode: str
    order: list[int]
    scores: list[Any] | None = None
    fused: list[float] | None = None
    none: Any | None = None
    candidates: list[list[int]] = field(default_factory=list)
    candidate_scores: list[Any] = field(default_factory=list)
    chosen: int | None = None
    rule_scores: list[float] = field(default_factory=list)
    doubt: bool | None = None
    gate: GateVerdict | None = None

    @property
    def context(self) -> Any | None:
        return self.candidate_scores[self.chosen] if self.chosen is not None else None


def plan(settings: ModeSettings, base: list[int], top_n: int | None) -> list[list[int]]:
    """The contexts (lists of input indices) the mode needs scored, in one batch. ``base``: the input
    indices in retrieval order (best first)."""
    if settings.mode == "context":
        n = len(base) if top_n is None else top_n
        return [
            [base[i] for i in c] for c in selection.context_candidates(len(base), n, settings.family, settings.swaps)
        ]
    singles = [[i] for i in range(len(base))]
    return singles + [[]] if settings.mode == "prune" else singles


def plan_size(settings: ModeSettings, n_docs: int, top_n: int | None) -> tuple[int, int]:
    """(contexts, documents in them, an empty context counted as one) that :func:`plan` would return,
    computed arithmetically, before any candidate is built."""
    if settings.mode == "context":
        n = n_docs if top_n is None else top_n
        count = selection.candidate_count(n_docs, n, settings.family, settings.swaps)
        return count, count * max(min(n, n_docs), 1)
    extra = 1 if settings.mode == "prune" else 0
    return n_docs + extra, n_docs + extra


def grounded_choice(settings: ModeSettings) -> bool:
    """Whether the mode's choice reads the grounded answers alone (their text and a metric of the
    grounded statistics, :data:`grogu.metrics.GROUNDED_METRICS`): the context mode with such a
    ``context_metric``, under any rule. Then only the chosen context needs the ungrounded statistics
    (its reported score under the scorer's metric)."""
    return settings.mode == "context" and settings.context_metric in GROUNDED_METRICS


def gated(settings: ModeSettings, contexts: Sequence[Sequence[int]]) -> bool:
    """Whether the retriever's context is answered first, the others only in doubt (:func:`doubt`)."""
    return settings.mode == "context" and settings.gate == "doubt" and len(contexts) > 1


def gate_reading(settings: ModeSettings, first: Any, texts: Sequence[str] | None, context: Sequence[int]):
    """(support, confidence) of the retriever's own context (``context``, scored as ``first``): the share of
    its answer's words found in its documents (``texts``: each input document's text) and the answer's mean
    token probability (1 / its perplexity). The gate (:func:`doubt`) compares them with its thresholds."""
    if texts is None:
        raise ValueError("gate 'doubt' reads the documents' texts; pass texts=")
    [support] = selection.support_scores([first.answer], [" ".join(texts[i] for i in context)])
    return float(support), -1.0 / _utility(first, "ppl")  # the ppl variant's utility is -perplexity


def doubt(settings: ModeSettings, first: Any, texts: Sequence[str] | None, context: Sequence[int]) -> bool:
    """Whether the retriever's context is in doubt (:func:`grogu.selection.doubtful` of :func:`gate_reading`)."""
    support, confidence = gate_reading(settings, first, texts, context)
    return selection.doubtful(support, confidence, settings.gate_support, settings.gate_confidence)


def verdict(
    settings: ModeSettings, scored: Sequence[Any], texts: Sequence[str], contexts: Sequence[Sequence[int]], chosen: int
) -> GateVerdict:
    """The verdict on the retriever's context (``contexts[0]``, ``scored[0]``) once ``chosen`` is known."""
    support, confidence = gate_reading(settings, scored[0], texts, contexts[0])
    reasons = selection.doubt_reasons(support, confidence, settings.gate_support, settings.gate_confidence)
    return GateVerdict(
        in_doubt=bool(reasons),
        reasons=reasons,
        support=support,
        confidence=confidence,
        candidates=len(scored),
        changed=list(contexts[chosen]) != list(contexts[0]),
    )


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
    mode = settings.mode
    if mode == "context":
        if settings.context_metric == "auto":
            raise ValueError("context_metric='auto' is chosen per target: decide on ModeSettings.for_target(...)")
        if not contexts:
            return Selection(mode=mode, order=[])
        in_doubt = None
        if gated(settings, contexts):
            in_doubt = doubt(settings, scored[0], texts, contexts[0])
            if not in_doubt:
                return Selection(
                    mode=mode,
                    order=list(contexts[0]),
                    candidates=[contexts[0]],
                    candidate_scores=[scored[0]],
                    chosen=0,
                    doubt=False,
                    gate=verdict(settings, scored[:1], texts, contexts, 0),
                )
        if len(scored) != len(contexts):
            raise ValueError(f"{len(contexts)} candidate contexts but {len(scored)} scores")
        answers = [s.answer for s in scored]
        utilities = [_utility(s, settings.context_metric) for s in scored]
        support = (
            None
            if texts is None
            else selection.support_scores(answers, [" ".join(texts[i] for i in c) for c in contexts])
        )
        if support is None and settings.rule == "confidence_support":
            raise ValueError("rule 'confidence_support' reads the documents' texts; pass texts=")
        rule_scores = selection.selection_scores(
            settings.rule,
            utilities,
            answers,
            settings.context_metric,
            settings.confidence_weight,
            support,
            settings.support_weight,
        )
        chosen = selection.choose_context(rule_scores, settings.margin)
        if settings.supported and support is not None:
            chosen = selection.prefer_supported(chosen, answers, support)
        return Selection(
            mode=mode,
            order=list(contexts[chosen]),
            candidates=contexts,
            candidate_scores=list(scored),
            chosen=chosen,
            rule_scores=rule_scores,
            doubt=in_doubt,
            gate=None if texts is None else verdict(settings, scored, texts, contexts, chosen),
        )
    n_docs = len(base)
    per_doc = list(scored[:n_docs])
    utility = [s.score for s in per_doc]
    fused = none = None
    if mode == "document":
        order = selection.order_by(utility)
    elif mode == "fusion":
        if relevance is None:
            raise ValueError("fusion needs the retriever's relevance scores of the documents")
        fused = selection.fuse(utility, relevance, settings.weight)
        order = selection.order_by(fused)
    else:  # prune: documents at least as useful as none, in retrieval order
        none = scored[n_docs]
        kept = selection.kept_relative_to_none(utility, none.score)
        order = [i for i in base if kept[i]]
    if threshold is not None:
        order = [i for i in order if utility[i] >= threshold]
    if top_n is not None:
        order = order[:top_n]
    return Selection(mode=mode, order=order, scores=per_doc, fused=fused, none=none)


def _utility(scored: Any, metric: str) -> float:
    """A scored context's utility under ``metric`` (its variants hold every metric the target gives)."""
    variants = getattr(scored, "variants", None) or {}
    if metric in variants:
        return float(variants[metric])
    if getattr(scored, "metric", None) == metric:
        return float(scored.score)
    raise ValueError(
        f"the context mode compares candidates by context_metric={metric!r}, which this target does "
        f"not give (it gives {sorted(variants) or [scored.metric]}); choose one of those"
    )


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
    "DEFAULT_MODE",
]
