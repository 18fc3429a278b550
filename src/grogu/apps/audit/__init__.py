"""Audit retrieval set-ups for one target LLM, without gold answers (``grogu audit``).

>>> from grogu.apps.audit import audit, read_setup, write_report
>>> result = audit(grogu.UtilityScorer("smollm2-135m-instruct"), [read_setup("bm25.jsonl"), read_setup("dense.jsonl")],
...                top_n=3)
>>> result.ranking(), result.comparisons[0]
>>> write_report(result.as_dict(), "audit-report")

- :func:`audit`: each set-up's top-n scored as one context per query, paired comparisons between
  set-ups (:mod:`grogu.apps.audit.stats`), per-document usefulness and usefulness against rank.
- :func:`from_influence_logs`: the per-document aggregates from influence records (:mod:`grogu.observe.influence_record`).
- :func:`write_report`: ``report.html`` (charts embedded) and ``summary.json``.
"""

from ...core.exports import lazy_names

#: the public names, each imported on first use (``grogu --help`` does not load the statistics)
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "Observation": ".aggregate",
        "document_table": ".aggregate",
        "from_influence_logs": ".aggregate",
        "rank_curve": ".aggregate",
        "AuditResult": ".core",
        "audit": ".core",
        "render_html": ".report",
        "write_report": ".report",
        "Setup": ".setups",
        "from_retriever": ".setups",
        "read_queries": ".setups",
        "read_setup": ".setups",
        "PairedComparison": ".stats",
        "bootstrap_interval": ".stats",
        "compare": ".stats",
        "exact_sign_test": ".stats",
        "sign_flip_p_value": ".stats",
    },
)

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
