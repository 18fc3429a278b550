"""The audit: which retrieval set-up gives the target LLM the most useful contexts, and which documents
never help it. Reference-free: no gold answer is read.

For each query and set-up the set-up's top-n documents are scored as one context (GROGU utility under
the scorer's metric, as :meth:`grogu.UtilityScorer.score_contexts_batch` scores candidate contexts).
With ``documents=True`` each of those documents is also scored alone, and the query with no document:
a document's usefulness is its utility alone minus the utility of no document (below 0: it makes the
LLM less sure of its answer than no document at all). Every distinct context (a query and an ordered
document list) is scored once, even where several set-ups share it, in batches of ``batch_size``
contexts grouped by query (shared prompt prefixes); the scorer may be in process, a
:class:`grogu.ServerTarget`'s, or a ``grogu serve`` client (:class:`grogu.RemoteScorer`).
"""

from __future__ import annotations

import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..checks import check_positive_int
from . import aggregate, stats
from .setups import Setup, common_queries

#: one context to score: (query, document keys in order); () is the query with no document
ContextKey = tuple[str, tuple[str, ...]]


@dataclass
class AuditResult:
    """What :func:`audit` found (all JSON-ready through :meth:`as_dict`).

    ``queries``: per query, per set-up, the context given (``documents``: key, title, text, rank,
    ``usefulness``), its ``utility`` and the LLM's ``answer``; ``none``: the no-document utility.
    ``setups``: per set-up ``n``, ``mean_utility`` and its bootstrap interval. ``comparisons``: every
    pair of set-ups (:class:`grogu.audit.stats.PairedComparison`, best mean first). ``documents`` and
    ``rank_curve``: :mod:`grogu.audit.aggregate` over the documents' usefulness.
    """

    model: str
    metric: str
    top_n: int | None
    setup_names: list[str]
    queries: list[dict[str, Any]]
    setups: dict[str, dict[str, Any]]
    comparisons: list[stats.PairedComparison]
    documents: list[dict[str, Any]]
    rank_curve: dict[str, list[dict[str, Any]]]
    timing: dict[str, float] = field(default_factory=dict)

    def ranking(self) -> list[str]:
        """Set-up names, highest mean context utility first."""
        return sorted(self.setup_names, key=lambda s: -self.setups[s]["mean_utility"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "metric": self.metric,
            "top_n": self.top_n,
            "ranking": self.ranking(),
            "setups": self.setups,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "documents": self.documents,
            "rank_curve": self.rank_curve,
            "timing": self.timing,
            "queries": self.queries,
        }


def plan_contexts(
    setups: Sequence[Setup], queries: Sequence[str], top_n: int | None, documents: bool
) -> tuple[list[ContextKey], dict[str, dict[str, Any]]]:
    """(distinct contexts to score, grouped by query; every document by key)."""
    texts: dict[str, dict[str, Any]] = {}
    keys: dict[ContextKey, None] = {}
    for q in queries:
        if documents:
            keys[(q, ())] = None
        for s in setups:
            docs = s.documents(q, top_n)
            texts.update({d["key"]: d for d in docs})
            keys[(q, tuple(d["key"] for d in docs))] = None
            if documents:
                keys.update({(q, (d["key"],)): None for d in docs})
    return list(keys), texts


def score_contexts(
    scorer: Any,
    contexts: Sequence[ContextKey],
    texts: dict[str, dict[str, Any]],
    *,
    batch_size: int = 16,
    progress: bool = True,
) -> dict[ContextKey, Any]:
    """Each context's :class:`grogu.ContextScore`, ``batch_size`` contexts per scorer call."""
    from tqdm import tqdm

    out: dict[ContextKey, Any] = {}
    bar = tqdm(total=len(contexts), desc="contexts", unit="ctx", disable=not progress, file=sys.stderr)
    for start in range(0, len(contexts), batch_size):
        chunk = contexts[start : start + batch_size]
        items = [
            (q, [[_doc(texts[k]) for k in ks] for _, ks in group])
            for q, group in itertools.groupby(chunk, key=lambda c: c[0])
        ]
        scored = scorer.score_contexts_batch([(q, list(c)) for q, c in items])
        out.update(zip(chunk, itertools.chain.from_iterable(scored)))
        bar.update(len(chunk))
    bar.close()
    return out


def _doc(d: dict[str, Any]) -> Any:
    return {"text": d["text"], "title": d["title"]} if d.get("title") else d["text"]


def check_setups(setups: Sequence[Setup], queries: Sequence[str] | None = None) -> list[str]:
    """The queries to audit (:func:`common_queries`), after checking the set-ups: distinct names, and at
    least one query every set-up ran. Cheap: the command line runs it before it loads the model."""
    names = [s.name for s in setups]
    if len(set(names)) != len(names):
        raise ValueError(f"set-up names must differ, got {names}")
    qs = common_queries(setups, queries)
    if not qs:
        raise ValueError("no query was run by every set-up: check that the set-ups' files hold the same queries")
    return qs


def audit(
    scorer: Any,
    setups: Sequence[Setup],
    *,
    queries: Sequence[str] | None = None,
    top_n: int | None = None,
    documents: bool = True,
    batch_size: int = 16,
    min_count: int = 2,
    level: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
    progress: bool = True,
) -> AuditResult:
    """Audit retrieval set-ups for the target LLM behind ``scorer`` (a :class:`grogu.UtilityScorer`, or
    anything with its ``score_contexts_batch``: :class:`grogu.RemoteScorer`).

    ``queries``: the queries to audit (default: every query all set-ups ran; a query one set-up lacks is
    left out). ``top_n``: documents per context (default: all each set-up retrieved). ``documents``: also
    score each document alone and no document (per-document usefulness; k + 1 more contexts a query at
    most). ``level``, ``resamples``, ``seed``: the paired-bootstrap intervals (:mod:`grogu.audit.stats`).
    """
    if top_n is not None:
        top_n = check_positive_int("top_n", top_n)
    batch_size = check_positive_int("batch_size", batch_size)
    qs = check_setups(setups, queries)
    names = [s.name for s in setups]
    contexts, texts = plan_contexts(setups, qs, top_n, documents)
    t0 = time.perf_counter()
    scored = score_contexts(scorer, contexts, texts, batch_size=batch_size, progress=progress)
    elapsed = time.perf_counter() - t0
    rows, observations = [], []
    for q in qs:
        none = scored[(q, ())].score if documents else None
        row: dict[str, Any] = {"query": q, "none": none, "setups": {}}
        for s in setups:
            docs = s.documents(q, top_n)
            ctx = scored[(q, tuple(d["key"] for d in docs))]
            given = []
            for rank, d in enumerate(docs, 1):
                use = scored[(q, (d["key"],))].score - none if documents else None
                given.append({**d, "rank": rank, "usefulness": use})
                observations.append(
                    aggregate.Observation(
                        key=d["key"], text=d["text"], title=d["title"], query=q, setup=s.name, rank=rank, value=use
                    )
                )
            row["setups"][s.name] = {"utility": ctx.score, "answer": ctx.answer, "documents": given}
        rows.append(row)
    per_setup = {}
    for i, s in enumerate(setups):
        values = [r["setups"][s.name]["utility"] for r in rows]
        low, high = stats.bootstrap_interval(values, level=level, resamples=resamples, seed=seed + i)
        per_setup[s.name] = {"n": len(values), "mean_utility": sum(values) / len(values), "low": low, "high": high}
    order = sorted(names, key=lambda n: -per_setup[n]["mean_utility"])
    comparisons = [
        stats.compare(
            a,
            b,
            [r["setups"][a]["utility"] for r in rows],
            [r["setups"][b]["utility"] for r in rows],
            level=level,
            resamples=resamples,
            seed=seed,
        )
        for a, b in itertools.combinations(order, 2)
    ]
    model = getattr(scorer, "model_name", "?")
    return AuditResult(
        model=str(model),
        metric=str(getattr(scorer, "metric", "?")),
        top_n=top_n,
        setup_names=names,
        queries=rows,
        setups=per_setup,
        comparisons=comparisons,
        documents=aggregate.document_table(observations, min_count=min_count) if documents else [],
        rank_curve=aggregate.rank_curve(observations) if documents else {},
        timing={
            "contexts": len(contexts),
            "seconds": elapsed,
            "contexts_per_s": len(contexts) / elapsed if elapsed > 0 else float("nan"),
        },
    )
