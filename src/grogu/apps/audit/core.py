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
from datetime import datetime, timezone
from typing import Any, Sequence

from ...core.checks import check_float, check_positive_int
from ...core.version import __version__
from . import aggregate, signals, stats
from .setups import Setup, common_queries

#: one context to score: (query, document keys in order); () is the query with no document
ContextKey = tuple[str, tuple[str, ...]]

#: the name the no-document baseline goes by in tables, charts and comparisons
BASELINE = "no documents"


@dataclass
class AuditResult:
    """What :func:`audit` found (all JSON-ready through :meth:`as_dict`).

    ``queries``: per query, per set-up, the context given (``documents``: key, title, text, rank,
    ``usefulness``), its headline ``value``, every signal, its ``utility`` and the LLM's ``answer``;
    ``baseline``: the same for no document (``none``: its utility). ``setups``: per set-up ``n``, ``mean``
    of the headline ``signal`` and its bootstrap interval, every signal's mean, documents and prompt
    tokens per context. ``baseline``: the no-document row. ``comparisons``: every pair of set-ups
    (:class:`grogu.apps.audit.stats.PairedComparison`, Holm-adjusted); ``against_none``: each set-up against
    no documents. ``verdict``: what the statistics support (:func:`grogu.apps.audit.stats.verdict`).
    ``settings``: the run's settings and warnings. ``documents`` and ``rank_curve``:
    :mod:`grogu.apps.audit.aggregate` over the documents' usefulness.
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
    signal: str = signals.DEFAULT_SIGNAL
    baseline: dict[str, Any] = field(default_factory=dict)
    against_none: list[stats.PairedComparison] = field(default_factory=list)
    verdict: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def ranking(self) -> list[str]:
        """Set-up names, highest mean of the headline signal first."""
        return sorted(self.setup_names, key=lambda s: -self.setups[s]["mean"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "metric": self.metric,
            "top_n": self.top_n,
            "signal": self.signal,
            "signal_meaning": signals.SIGNALS[self.signal].meaning,
            "signal_unit": signals.SIGNALS[self.signal].unit,
            "signals": {k: s.meaning for k, s in signals.SIGNALS.items()},
            "settings": self.settings,
            "verdict": self.verdict,
            "ranking": self.ranking(),
            "setups": self.setups,
            "baseline": self.baseline,
            "comparisons": [c.as_dict() for c in self.comparisons],
            "against_none": [c.as_dict() for c in self.against_none],
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
        keys[(q, ())] = None  # the baseline
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


def warnings_for(setups: Sequence[Setup], queries: Sequence[str], top_n: int | None) -> list[str]:
    """What a reader of the report should know about its input: one set-up only, queries a set-up
    retrieved nothing for, a ``top_n`` above what any set-up retrieved."""
    out = []
    if len(setups) == 1:
        out.append("one set-up only: it is compared with no documents, not with another set-up")
    for s in setups:
        empty = sum(not s.runs[q] for q in queries)
        if empty:
            out.append(f"{s.name}: no document for {empty} of {len(queries)} queries (scored as no documents)")
    most = max((len(s.runs[q]) for s in setups for q in queries), default=0)
    if top_n is not None and top_n > most:
        out.append(f"top-n {top_n} is more than any set-up retrieved ({most}): every retrieved document is scored")
    return out


def prompt_tokens(scorer: Any, query: str, docs: Sequence[Any]) -> int | None:
    """Tokens of the grounded prompt the LLM reads for ``docs`` (None where the scorer does not say: a
    remote one)."""
    prompts = getattr(scorer, "prompts", None)
    if prompts is None or not hasattr(prompts, "grounded_ids"):
        return None
    from ...core.checks import check_documents

    ids = prompts.grounded_ids(query, check_documents(list(docs)))
    return len(ids) if isinstance(ids, list) else None


def _mean_or_none(xs: Sequence[Any]) -> float | None:
    return sum(xs) / len(xs) if xs and all(x is not None for x in xs) else None


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
    signal: str = signals.DEFAULT_SIGNAL,
    batch_size: int = 16,
    min_count: int = 2,
    level: float = 0.95,
    alpha: float = 0.05,
    resamples: int = 4000,
    seed: int = 0,
    progress: bool = True,
) -> AuditResult:
    """Audit retrieval set-ups for the target LLM behind ``scorer`` (a :class:`grogu.UtilityScorer`, or
    anything with its ``score_contexts_batch``: :class:`grogu.RemoteScorer`).

    ``queries``: the queries to audit (default: every query all set-ups ran; a query one set-up lacks is
    left out). ``top_n``: documents per context (default: all each set-up retrieved). ``documents``: also
    score each document alone (per-document usefulness; k more contexts a query at most). The query with
    no document is always scored: it is the baseline every set-up is shown against. ``signal``: the
    headline (:data:`grogu.apps.audit.signals.SIGNALS`); every signal's mean is reported beside it.
    ``level``, ``resamples``, ``seed``: the paired-bootstrap intervals; ``alpha``: the family-wise level of
    the verdict (Holm's correction over all pairs; :func:`grogu.apps.audit.stats.verdict`).
    """
    if top_n is not None:
        top_n = check_positive_int("top_n", top_n)
    batch_size = check_positive_int("batch_size", batch_size)
    signal = signals.check_signal(signal)
    alpha = check_float("alpha", alpha, minimum=0.0, maximum=1.0, min_inclusive=False, max_inclusive=False)
    qs = check_setups(setups, queries)
    names = [s.name for s in setups]
    contexts, texts = plan_contexts(setups, qs, top_n, documents)
    t0 = time.perf_counter()
    scored = score_contexts(scorer, contexts, texts, batch_size=batch_size, progress=progress)
    elapsed = time.perf_counter() - t0

    def read(q: str, keys: tuple[str, ...]) -> tuple[Any, dict[str, float]]:
        ctx = scored[(q, keys)]
        return ctx, signals.signal_values(signals.readings(ctx, [texts[k]["text"] for k in keys]))

    rows, observations = [], []
    for q in qs:
        none_ctx, none_signals = read(q, ())
        row: dict[str, Any] = {
            "query": q,
            "none": none_ctx.score,
            "baseline": {"value": none_signals[signal], "signals": none_signals, "answer": none_ctx.answer},
            "setups": {},
        }
        for s in setups:
            docs = s.documents(q, top_n)
            ctx, values = read(q, tuple(d["key"] for d in docs))
            given = []
            for rank, d in enumerate(docs, 1):
                use = scored[(q, (d["key"],))].score - none_ctx.score if documents else None
                given.append({**d, "rank": rank, "usefulness": use})
                observations.append(
                    aggregate.Observation(
                        key=d["key"], text=d["text"], title=d["title"], query=q, setup=s.name, rank=rank, value=use
                    )
                )
            row["setups"][s.name] = {
                "value": values[signal],
                "utility": ctx.score,
                "signals": values,
                "answer": ctx.answer,
                "documents": given,
                "prompt_tokens": prompt_tokens(scorer, q, [_doc(d) for d in docs]),
            }
        rows.append(row)

    def summarise(i: int, cells: list[dict[str, Any]]) -> dict[str, Any]:
        values = [c["value"] for c in cells]
        low, high = stats.bootstrap_interval(values, level=level, resamples=resamples, seed=seed + i)
        return {
            "n": len(values),
            "mean": sum(values) / len(values),
            "low": low,
            "high": high,
            "signals": {k: sum(c["signals"][k] for c in cells) / len(cells) for k in signals.SIGNALS},
        }

    per_setup = {}
    for i, s in enumerate(setups):
        cells = [r["setups"][s.name] for r in rows]
        per_setup[s.name] = {
            **summarise(i, cells),
            "mean_utility": sum(c["utility"] for c in cells) / len(cells),
            "documents_per_context": sum(len(c["documents"]) for c in cells) / len(cells),
            "prompt_tokens": _mean_or_none([c["prompt_tokens"] for c in cells]),
        }
    baseline = {**summarise(len(setups), [r["baseline"] for r in rows]), "documents_per_context": 0.0}
    order = sorted(names, key=lambda n: -per_setup[n]["mean"])
    column = lambda name: [r["setups"][name]["value"] for r in rows]  # noqa: E731
    opts = {"level": level, "resamples": resamples, "seed": seed}
    comparisons = stats.judge(
        [stats.compare(a, b, column(a), column(b), **opts) for a, b in itertools.combinations(order, 2)], alpha=alpha
    )
    against_none = [
        stats.compare(s, BASELINE, column(s), [r["baseline"]["value"] for r in rows], **opts) for s in order
    ]
    model = getattr(scorer, "model_name", "?")
    settings = {
        "model": str(model),
        "signal": signal,
        "setups": names,
        "metric": str(getattr(scorer, "metric", "?")),
        "answer_style": getattr(scorer, "answer_style", None),
        "top_n": top_n,
        "documents_per_context": {n: per_setup[n]["documents_per_context"] for n in names},
        "per_document": documents,
        "queries": len(qs),
        "seed": seed,
        "level": level,
        "alpha": alpha,
        "min_count": min_count,
        "grogu_version": __version__,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "scoring_seconds": elapsed,
        "warnings": warnings_for(setups, qs, top_n),
    }
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
        signal=signal,
        baseline=baseline,
        against_none=against_none,
        settings=settings,
        verdict=stats.verdict(names, {n: per_setup[n]["mean"] for n in names}, comparisons, alpha=alpha),
    )
