"""The rerank modes as registered strategies. Each mode says which contexts it scores (:meth:`RerankMode.plan`),
how many before any is built (:meth:`RerankMode.size`) and what it keeps (:meth:`RerankMode.decide`).

:data:`MODES` maps a mode's name to its strategy, and :func:`register_mode` adds one. Every front end
takes the modes from there: ``ModeSettings``' choices, the command line's ``--mode``, the service and
both integrations. The settings the modes read are :class:`grogu.rerank.ModeSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..core.results import GateVerdict
from ..metrics.defaults import GROUNDED_METRICS
from . import selection


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


class RerankMode:
    """A rerank mode. This base scores each document alone and keeps them in the order of :meth:`order`;
    a subclass that scores other contexts overrides :meth:`plan`, :meth:`size` and :meth:`decide`.

    ``base`` is always the input indices in retrieval order (best first); ``scored`` holds one result per
    planned context, in plan order.
    """

    name: str = ""
    #: whether it scores each document alone, so that per-document utilities (and a threshold) exist
    per_document: bool = True
    #: whether it reads the retriever's relevance (without it, the retrieval order gives ranks)
    needs_relevance: bool = False

    def plan(self, settings: Any, base: list[int], top_n: int | None) -> list[list[int]]:
        """The contexts (lists of input indices) to score, in one batch."""
        return [[i] for i in range(len(base))]

    def size(self, settings: Any, n_docs: int, top_n: int | None) -> tuple[int, int]:
        """(contexts, documents in them, an empty context counted as one) that :meth:`plan` would return,
        computed arithmetically, before any candidate is built."""
        return n_docs, n_docs

    def grounded_choice(self, settings: Any) -> bool:
        """Whether the choice reads the grounded answers alone (then only the chosen context needs the
        ungrounded statistics)."""
        return False

    def gated(self, settings: Any, contexts: Sequence[Sequence[int]]) -> bool:
        """Whether the retriever's context is answered first, the others only in doubt."""
        return False

    def order(
        self, settings: Any, base: list[int], utility: list[float], scored: Sequence[Any], relevance: Any
    ) -> tuple[list[int], dict[str, Any]]:
        """The documents kept, best first, from their utilities (input order); and the extra fields of the
        :class:`Selection` (``fused``, ``none``)."""
        return selection.order_by(utility), {}

    def decide(
        self,
        settings: Any,
        base: list[int],
        contexts: list[list[int]],
        scored: Sequence[Any],
        top_n: int | None,
        threshold: float | None,
        relevance: Sequence[float] | None,
        texts: Sequence[str] | None = None,
    ) -> Selection:
        """The selection from the scored contexts of :meth:`plan`."""
        per_doc = list(scored[: len(base)])
        utility = [s.score for s in per_doc]
        order, extra = self.order(settings, base, utility, scored, relevance)
        if threshold is not None:
            order = [i for i in order if utility[i] >= threshold]
        if top_n is not None:
            order = order[:top_n]
        return Selection(mode=self.name, order=order, scores=per_doc, **extra)


#: every rerank mode by name (:func:`register_mode` adds one)
MODES: dict[str, RerankMode] = {}


def register_mode(mode: RerankMode) -> RerankMode:
    """Add ``mode`` to :data:`MODES` under its ``name``; every front end then accepts ``mode=<name>``."""
    if not isinstance(mode, RerankMode) or not isinstance(mode.name, str) or not mode.name:
        raise TypeError("register a RerankMode instance with a non-empty name")
    MODES[mode.name] = mode
    return mode


def mode_of(settings: Any) -> RerankMode:
    """The strategy of ``settings.mode``."""
    return MODES[settings.mode]


class DocumentMode(RerankMode):
    """Each document scored alone, sorted by utility."""

    name = "document"


class FusionMode(RerankMode):
    """Each document scored alone; its utility rank fused with its retrieval rank (``weight`` on utility)."""

    name = "fusion"
    needs_relevance = True

    def order(self, settings, base, utility, scored, relevance):
        if relevance is None:
            raise ValueError("fusion needs the retriever's relevance scores of the documents")
        fused = selection.fuse(utility, relevance, settings.weight)
        return selection.order_by(fused), {"fused": fused}


class PruneMode(RerankMode):
    """Each document scored alone, and no document at all: documents at least as useful as none, in
    retrieval order."""

    name = "prune"

    def plan(self, settings, base, top_n):
        return super().plan(settings, base, top_n) + [[]]

    def size(self, settings, n_docs, top_n):
        return n_docs + 1, n_docs + 1

    def order(self, settings, base, utility, scored, relevance):
        none = scored[len(base)]
        kept = selection.kept_relative_to_none(utility, none.score)
        return [i for i in base if kept[i]], {"none": none}


def utility(scored: Any, metric: str) -> float:
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


def gate_reading(settings: Any, first: Any, texts: Sequence[str] | None, context: Sequence[int]):
    """(support, confidence) of the retriever's own context (``context``, scored as ``first``): the share of
    its answer's words found in its documents (``texts``: each input document's text) and the answer's mean
    token probability (1 / its perplexity). The gate (:func:`doubt`) compares them with its thresholds."""
    if texts is None:
        raise ValueError("gate 'doubt' reads the documents' texts; pass texts=")
    [support] = selection.support_scores([first.answer], [" ".join(texts[i] for i in context)])
    return float(support), -1.0 / utility(first, "ppl")  # the ppl variant's utility is -perplexity


def needs_forced_first(settings: Any) -> bool:
    """Whether the gate reads the first answer's entropy change (``gate_entropy_change``): that answer is then
    teacher-forced without its documents before the gate decides."""
    return settings.gate == "doubt" and getattr(settings, "gate_entropy_change", None) is not None


def _readings(settings: Any, first: Any, texts: Sequence[str] | None, context: Sequence[int]):
    support, confidence = gate_reading(settings, first, texts, context)
    change = None
    if needs_forced_first(settings):
        if "entropy_change" not in (getattr(first, "variants", None) or {}):
            raise ValueError(
                "gate_entropy_change reads the first answer teacher-forced without its documents (the "
                "entropy_change variant): score it on a target that can teacher-force"
            )
        change = utility(first, "entropy_change")
    return support, confidence, change


def _reasons(settings: Any, support: float, confidence: float, change: float | None) -> tuple[str, ...]:
    floor = getattr(settings, "gate_entropy_change", None)
    return selection.doubt_reasons(support, confidence, settings.gate_support, settings.gate_confidence, change, floor)


def doubt(settings: Any, first: Any, texts: Sequence[str] | None, context: Sequence[int]) -> bool:
    """Whether the retriever's context is in doubt (:func:`grogu.rerank.selection.doubtful` of its readings:
    :func:`gate_reading`, and the ``entropy_change`` variant where ``gate_entropy_change`` is set)."""
    return bool(_reasons(settings, *_readings(settings, first, texts, context)))


def verdict(
    settings: Any, scored: Sequence[Any], texts: Sequence[str], contexts: Sequence[Sequence[int]], chosen: int
) -> GateVerdict:
    """The verdict on the retriever's context (``contexts[0]``, ``scored[0]``) once ``chosen`` is known."""
    support, confidence, change = _readings(settings, scored[0], texts, contexts[0])
    reasons = _reasons(settings, support, confidence, change)
    return GateVerdict(
        in_doubt=bool(reasons),
        reasons=reasons,
        support=support,
        confidence=confidence,
        entropy_change=change,
        candidates=len(scored),
        changed=list(contexts[chosen]) != list(contexts[0]),
        answer=scored[0].answer,
    )


class ContextMode(RerankMode):
    """Whole candidate contexts scored (by default the retriever's top-n and reorderings of it), the
    chosen one kept; under ``gate="doubt"`` the others are answered only when the retriever's is in doubt."""

    name = "context"
    per_document = False

    def plan(self, settings, base, top_n):
        n = len(base) if top_n is None else top_n
        candidates = selection.context_candidates(len(base), n, settings.family, settings.swaps)
        return [[base[i] for i in c] for c in candidates]

    def size(self, settings, n_docs, top_n):
        n = n_docs if top_n is None else top_n
        count = selection.candidate_count(n_docs, n, settings.family, settings.swaps)
        return count, count * max(min(n, n_docs), 1)

    def grounded_choice(self, settings):
        return settings.context_metric in GROUNDED_METRICS

    def gated(self, settings, contexts):
        return settings.gate == "doubt" and len(contexts) > 1

    def decide(self, settings, base, contexts, scored, top_n, threshold, relevance, texts=None):
        if settings.context_metric == "auto":
            raise ValueError("context_metric='auto' is chosen per target: decide on ModeSettings.for_target(...)")
        if not contexts:
            return Selection(mode=self.name, order=[])
        in_doubt = None
        if self.gated(settings, contexts):
            in_doubt = doubt(settings, scored[0], texts, contexts[0])
            if not in_doubt:
                return Selection(
                    mode=self.name,
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
        utilities = [utility(s, settings.context_metric) for s in scored]
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
            mode=self.name,
            order=list(contexts[chosen]),
            candidates=contexts,
            candidate_scores=list(scored),
            chosen=chosen,
            rule_scores=rule_scores,
            doubt=in_doubt,
            gate=None if texts is None else verdict(settings, scored, texts, contexts, chosen),
        )


for _mode in (DocumentMode(), FusionMode(), ContextMode(), PruneMode()):  # the order of the --help choices
    register_mode(_mode)

__all__ = [
    "Selection",
    "RerankMode",
    "MODES",
    "register_mode",
    "mode_of",
    "DocumentMode",
    "FusionMode",
    "PruneMode",
    "ContextMode",
    "gate_reading",
    "needs_forced_first",
    "doubt",
    "verdict",
    "utility",
]
