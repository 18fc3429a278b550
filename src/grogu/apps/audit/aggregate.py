"""Per-document aggregates over the queries a document was retrieved for, and value against rank.

Both the audit (:mod:`grogu.apps.audit.core`) and logged influence records (:func:`from_influence_logs`)
reduce to :class:`Observation` s: one document, retrieved for one query by one set-up at one rank,
with its ``value`` (how much it helped the target LLM). The tables here only average and count.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence


@dataclass(frozen=True)
class Observation:
    """One retrieval of a document. ``rank``: 1 for the first document. ``value``: its usefulness
    (audit: the utility of the document alone minus that of no document; logs: its Influence Score).
    ``utility``: a GROGU utility where one is known (logs: the reranker's), else None."""

    key: str
    text: str
    title: str | None
    query: str
    setup: str
    rank: int
    value: float | None
    utility: float | None = None


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def document_table(
    observations: Iterable[Observation], *, min_count: int = 2, level: float = 0.95, seed: int = 0
) -> list[dict[str, Any]]:
    """One row per document, seen for the most queries first.

    A document scored alone for a query has one value, however many set-ups retrieved it; so its values
    are counted over distinct queries. ``n_retrieved``: (query, set-up) retrievals; ``n_queries``: distinct
    queries; ``mean_value``: the mean over those queries; ``low`` / ``high``: its bootstrap interval, given
    only from ``min_count`` queries on (else None). ``n_positive`` / ``n_negative``: queries where the
    value is above / below 0. Flags, only from ``min_count`` queries on: ``never_positive`` (never above
    0) and ``negative`` (the whole interval below 0)."""
    from .stats import bootstrap_interval

    groups: dict[str, list[Observation]] = defaultdict(list)
    for o in observations:
        groups[o.key].append(o)
    rows = []
    for key, obs in groups.items():
        per_query: dict[str, list[float]] = defaultdict(list)
        for o in obs:
            if o.value is not None and math.isfinite(o.value):
                per_query[o.query].append(o.value)
        values = [sum(v) / len(v) for v in per_query.values()]
        utilities = [o.utility for o in obs if o.utility is not None]
        counted = len(values) >= min_count
        low, high = bootstrap_interval(values, level=level, seed=seed) if counted else (None, None)
        rows.append(
            {
                "key": key,
                "title": obs[0].title,
                "text": obs[0].text,
                "n_retrieved": len(obs),
                "n_queries": len({o.query for o in obs}),
                "setups": sorted({o.setup for o in obs}),
                "mean_rank": _mean([float(o.rank) for o in obs]),
                "mean_value": _mean(values),
                "low": low,
                "high": high,
                "n_positive": sum(v > 0 for v in values),
                "n_negative": sum(v < 0 for v in values),
                "mean_utility": _mean(utilities),
                "never_positive": counted and all(v <= 0 for v in values),
                "negative": counted and high is not None and high < 0,
            }
        )
    rows.sort(key=lambda r: (-r["n_queries"], -r["n_retrieved"], r["key"]))
    return rows


def rank_curve(observations: Iterable[Observation]) -> dict[str, list[dict[str, Any]]]:
    """Per set-up, per rank (1, 2, ...): ``n`` documents seen there, their ``mean_value`` and the share
    of them with value > 0 (``useful_share``)."""
    cells: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for o in observations:
        if o.value is not None and math.isfinite(o.value):
            cells[o.setup][o.rank].append(o.value)
    return {
        setup: [
            {"rank": r, "n": len(v), "mean_value": sum(v) / len(v), "useful_share": sum(x > 0 for x in v) / len(v)}
            for r, v in sorted(ranks.items())
        ]
        for setup, ranks in sorted(cells.items())
    }


def _log_key(doc: dict[str, Any]) -> str:
    if doc.get("id") is not None:
        return str(doc["id"])
    return hashlib.sha1(f"\x00{doc.get('page_content') or ''}".encode()).hexdigest()[:12]


def observations_from_records(
    records: Iterable[dict[str, Any]], *, setup_field: str | None = None
) -> list[Observation]:
    """Observations from influence records (:mod:`grogu.observe.influence_record`; dicts): each document of each record
    without an ``error``, its value its ``influence`` (None where it has none). ``setup_field``: a key of
    the record's ``metadata`` (or a record field, e.g. ``run_name``) naming the set-up; default "log"."""
    out = []
    for rec in records:
        if rec.get("event") != "grogu_influence" or rec.get("error"):
            continue
        setup = "log"
        if setup_field:
            setup = str((rec.get("metadata") or {}).get(setup_field, rec.get(setup_field, "log")))
        for doc in rec.get("documents") or []:
            title = (doc.get("metadata") or {}).get("title")
            out.append(
                Observation(
                    key=_log_key(doc),
                    text=doc.get("page_content") or "",
                    title=title if isinstance(title, str) else None,
                    query=rec.get("query") or "",
                    setup=setup,
                    rank=int(doc.get("index", 0)) + 1,
                    value=doc.get("influence"),
                    utility=doc.get("utility"),
                )
            )
    return out


def read_records(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The JSON records of JSONL files (a JSONL sink's output); blank lines skipped."""
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def from_influence_logs(
    paths_or_records: Sequence[Any], *, setup_field: str | None = None, min_count: int = 2
) -> dict[str, Any]:
    """The audit's per-document aggregates from influence logs: JSONL paths or record dicts. Returns
    ``{"documents": document_table(...), "rank_curve": rank_curve(...), "n_records", "n_observations"}``;
    the value is the Influence Score (how much the answer rested on the document)."""
    records = [r for r in paths_or_records if isinstance(r, dict)]
    records += read_records([p for p in paths_or_records if isinstance(p, str)])
    obs = observations_from_records(records, setup_field=setup_field)
    return {
        "documents": document_table(obs, min_count=min_count),
        "rank_curve": rank_curve(obs),
        "n_records": len(records),
        "n_observations": len(obs),
        "value": "influence",
    }
