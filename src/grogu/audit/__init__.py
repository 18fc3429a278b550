"""Audit retrieval set-ups for one target LLM, without gold answers (``grogu audit``).

>>> from grogu.audit import audit, read_setup, write_report
>>> result = audit(grogu.UtilityScorer("smollm2-135m-instruct"), [read_setup("bm25.jsonl"), read_setup("dense.jsonl")],
...                top_n=3)
>>> result.ranking(), result.comparisons[0]
>>> write_report(result.as_dict(), "audit-report")

- :func:`audit`: each set-up's top-n scored as one context per query, paired comparisons between
  set-ups (:mod:`grogu.audit.stats`), per-document usefulness and usefulness against rank.
- :func:`from_influence_logs`: the per-document aggregates from influence records (:mod:`grogu.influence_record`).
- :func:`write_report`: ``report.html`` (charts embedded) and ``summary.json``.
"""

from .aggregate import Observation, document_table, from_influence_logs, rank_curve
from .core import AuditResult, audit
from .report import render_html, write_report
from .setups import Setup, from_retriever, read_queries, read_setup
from .stats import PairedComparison, bootstrap_interval, compare, exact_sign_test, sign_flip_p_value

__all__ = [
    "audit",
    "AuditResult",
    "Setup",
    "read_setup",
    "read_queries",
    "from_retriever",
    "from_influence_logs",
    "document_table",
    "rank_curve",
    "Observation",
    "write_report",
    "render_html",
    "PairedComparison",
    "compare",
    "bootstrap_interval",
    "sign_flip_p_value",
    "exact_sign_test",
]
