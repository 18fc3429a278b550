"""The one rerank pipeline: plan, engine work, finish. Every way in runs it.

- :func:`plan` checks a call's inputs and lists its candidate contexts (:class:`RerankPlan`).
- :func:`steps` walks one plan. It yields engine work (:class:`Answer`, :class:`Force`), receives each
  step's results, and returns the ranked documents. Under the gate it answers the retriever's context
  first, and the other candidates only when that answer is in doubt.
- :func:`run` drives many plans in process: each wave of every plan goes in one engine batch.
  ``UtilityScorer.rerank`` / ``arerank`` call it. The scoring service drives the same generator through
  its scheduler, one step at a time (:mod:`grogu.apps.serve.replica_work`), so ``/rerank`` does the same work.

A step's results depend on its own rows only, never on the batch, so any driver gives the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Generator, Sequence

from ..core.checks import check_documents, check_query, check_relevance, check_threshold, check_top_n
from ..core.prompts import Document
from ..core.results import ContextScore, DocumentScore, ScoreResult
from ..runtime.engine import Generation
from . import selection
from . import settings as rerank
from .modes import needs_forced_first

#: one context: a query and the ordered documents given with it
QueryContext = tuple[str, list[Document]]
#: an answered context: the context, its grounded prompt's token ids and its greedy answer
Answered = tuple[QueryContext, list[int], Generation]


@dataclass
class Answer:
    """Engine work: each context's grounded prompt and greedy answer (``UtilityScorer.answer_contexts``)."""

    contexts: list[QueryContext]


@dataclass
class Force:
    """Engine work: each answered context's answer teacher-forced under the ungrounded prompt and scored
    under the scorer's metric (``UtilityScorer.force_answers``)."""

    rows: list[Answered]
    details: bool


#: a step of engine work, and what a driver sends back for it: one result per context or row
Step = Answer | Force


@dataclass
class RerankPlan:
    """A rerank call before its engine work: the checked inputs, the retrieval order ``base`` (input
    positions, best first) and the candidate ``contexts`` (input positions) to answer."""

    query: str
    settings: rerank.ModeSettings
    documents: list[Document]  # checked grogu Documents, input order
    originals: list[Any]  # what the caller passed, returned on each result
    relevance: list[float] | None
    base: list[int]
    contexts: list[list[int]] = field(default_factory=list)
    top_n: int | None = None
    threshold: float | None = None

    def context_documents(self, contexts: Sequence[Sequence[int]] | None = None) -> list[QueryContext]:
        """The (query, documents) of each candidate context (default: all), in context order."""
        chosen = self.contexts if contexts is None else contexts
        return [(self.query, [self.documents[i] for i in c]) for c in chosen]

    def support_texts(self) -> list[str]:
        """Each input document's text as the context mode's support (rule and gate) reads it."""
        return [f"{d.title or ''} {d.text}" for d in self.documents]


def plan(
    query: str,
    documents: Sequence[Any],
    top_n: int | None,
    threshold: float | None,
    settings: rerank.ModeSettings | None,
    relevance: Sequence[float] | None,
    grounded_only: bool,
) -> RerankPlan:
    """A checked rerank call and its candidate contexts. Without ``relevance`` the documents are taken
    as given in retrieval order (best first), as a retriever returns them."""
    top_n, threshold = check_top_n(top_n), check_threshold(threshold)
    settings = rerank.ModeSettings.build(settings).for_target(grounded_only)
    settings.check_threshold(threshold)
    query, docs = check_query(query), check_documents(documents)
    if relevance is not None:
        relevance = check_relevance(relevance, len(docs))
    elif rerank.mode_of(settings).needs_relevance:  # the retrieval order as ranks: the first the most relevant
        relevance = [float(len(docs) - i) for i in range(len(docs))]
    base = list(range(len(docs))) if relevance is None else selection.order_by(relevance)
    return RerankPlan(
        query=query,
        settings=settings,
        documents=docs,
        originals=list(documents),
        relevance=relevance,
        base=base,
        contexts=rerank.plan(settings, base, top_n),
        top_n=top_n,
        threshold=threshold,
    )


def steps(scorer: Any, p: RerankPlan, details: bool) -> Generator[Step, list, list[DocumentScore]]:
    """The engine work of one plan, as steps; returns the ranked documents (``UtilityScorer.rerank``).

    1. Answer the candidates: under the gate (:func:`grogu.rerank.gated`) the retriever's own context
       alone, then the others only when its answer is in doubt (:func:`grogu.rerank.doubt`).
    2. Where the mode chooses on the grounded answers alone (:func:`grogu.rerank.grounded_choice`),
       choose, and teacher-force the chosen answer only; else teacher-force every answer.
    3. Decide (:func:`grogu.rerank.decide`) and build the results, with the gate's verdict.
    ``scorer``: its ``grounded_score`` turns an answer into its grounded-only result (no engine work).
    """
    s, texts = p.settings, p.support_texts()
    gated = rerank.gated(s, p.contexts)
    answered: list[Answered] = []
    if p.contexts:
        wanted = p.contexts[:1] if gated else p.contexts
        answered = _rows(p, wanted, (yield Answer(p.context_documents(wanted))))
    forced_first = None  # the gate reads the entropy change: the first answer teacher-forced first
    if gated and needs_forced_first(s):
        [forced_first] = yield Force(answered[:1], details)
    reading = forced_first
    if gated and reading is None:
        reading = scorer.grounded_score(answered[0][2], "ppl")
    if gated and rerank.doubt(s, reading, texts, p.contexts[0]):
        answered += _rows(p, p.contexts[1:], (yield Answer(p.context_documents(p.contexts[1:]))))
    out: list[ScoreResult | None] = [None] * len(answered)  # None: to be teacher-forced
    if rerank.grounded_choice(s) and answered:
        first = [scorer.grounded_score(gen, s.context_metric, details) for _, _, gen in answered]
        if forced_first is not None:  # the decision reads the gate again: on the forced first answer
            first[0] = forced_first
        chosen = rerank.decide(s, p.base, p.contexts, first, p.top_n, p.threshold, p.relevance, texts).chosen
        out = [None if i == chosen else r for i, r in enumerate(first)]
    if forced_first is not None:
        out[0] = forced_first
    todo = [i for i, r in enumerate(out) if r is None]
    if todo:
        for i, r in zip(todo, (yield Force([answered[i] for i in todo], details))):
            out[i] = r
    scored = [ContextScore(documents=row[0][1], **vars(r)) for row, r in zip(answered, out)]
    return finish(p, scored)


def finish(p: RerankPlan, scored: Sequence[ContextScore]) -> list[DocumentScore]:
    """The ranked documents from the scores of the plan's answered contexts (all, or the first alone
    where the gate was calm)."""
    sel = rerank.decide(p.settings, p.base, p.contexts, scored, p.top_n, p.threshold, p.relevance, p.support_texts())
    if not rerank.mode_of(p.settings).per_document:  # one context chosen: every document carries its score
        ctx = sel.context
        fields = {k: v for k, v in vars(ctx).items() if k != "documents"} if ctx is not None else {}
        return [
            DocumentScore(index=i, document=p.originals[i], context=ctx, gate=sel.gate, **fields) for i in sel.order
        ]
    return [
        DocumentScore(
            index=i,
            document=p.originals[i],
            rank_score=None if sel.fused is None else sel.fused[i],
            **{k: v for k, v in vars(sel.scores[i]).items() if k != "documents"},
        )
        for i in sel.order
    ]


def _rows(p: RerankPlan, wanted: Sequence[Sequence[int]], results: Sequence[Any]) -> list[Answered]:
    """The answered rows of ``wanted`` contexts from an :class:`Answer` step's (grounded ids, answer) pairs."""
    return [(ctx, grounded, gen) for ctx, (grounded, gen) in zip(p.context_documents(wanted), results, strict=True)]


def work(scorer: Any, batch: Sequence[Step]) -> list[list[Any]]:
    """Steps of one kind done in one engine call on ``scorer``, the results split back per step."""
    if isinstance(batch[0], Answer):
        flat = scorer.answer_contexts([c for st in batch for c in st.contexts])
        sizes = [len(st.contexts) for st in batch]
    else:
        flat = scorer.force_answers([r for st in batch for r in st.rows], any(st.details for st in batch))
        sizes = [len(st.rows) for st in batch]
    it = iter(flat)
    out = [[next(it) for _ in range(n)] for n in sizes]
    if isinstance(batch[0], Force):  # details only where a step asked for them
        out = [rs if st.details else [replace(r, details=None) for r in rs] for st, rs in zip(batch, out)]
    return out


def run(scorer: Any, plans: Sequence[RerankPlan], details: bool, do: Callable[..., Any] = work) -> list[Any]:
    """Each plan's ranked documents, the plans driven together: the pending steps of one kind run in one
    engine call (``do(scorer, steps)``), answers before teacher forcing."""
    walks = [steps(scorer, p, details) for p in plans]
    results: list[Any] = [None] * len(walks)
    pending = {}
    for i, w in enumerate(walks):
        _advance(w, None, i, pending, results)
    while pending:  # answers first: a plan's teacher forcing waits for the other plans' second waves
        kind = Answer if any(isinstance(st, Answer) for st in pending.values()) else Force
        ids = [i for i, st in pending.items() if isinstance(st, kind)]
        for i, res in zip(ids, do(scorer, [pending.pop(i) for i in ids])):
            _advance(walks[i], res, i, pending, results)
    return results


def _advance(walk: Generator, sent: Any, i: int, pending: dict, results: list) -> None:
    try:
        pending[i] = walk.send(sent)
    except StopIteration as stop:
        results[i] = stop.value


def without_details(ranked: list[DocumentScore]) -> list[DocumentScore]:
    """``ranked`` with no per-token details (on the documents and on the chosen context)."""
    out = []
    for r in ranked:
        ctx = None if r.context is None else replace(r.context, details=None)
        out.append(replace(r, details=None, context=ctx))
    return out


__all__ = ["Answer", "Force", "Step", "RerankPlan", "plan", "steps", "finish", "work", "run", "without_details"]
