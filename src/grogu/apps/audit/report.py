"""The audit's report: one self-contained HTML page (Jinja2 template ``templates/report.html.j2``, charts
from :mod:`grogu.apps.audit.charts` embedded as base64 PNG) and a JSON summary."""

from __future__ import annotations

import json
import math
import os
from importlib import resources
from typing import Any

from ...core.extras import require
from . import charts
from .core import BASELINE

AUDIT_INSTALL = 'pip install "grogu[audit]"'

#: per-query drill-down rows shown in the page (the JSON summary holds them all)
MAX_DRILLDOWN = 200
#: documents listed in each document table
MAX_DOCUMENTS = 15


def _clean(value: Any) -> Any:
    """NaN and infinities as None, so that the JSON is standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:+.{digits}f}" if isinstance(value, float) else str(value)


def page_data(summary: dict[str, Any]) -> dict[str, Any]:
    """What the template shows, from an audit summary (:meth:`AuditResult.as_dict`) or a log summary
    (:func:`grogu.apps.audit.aggregate.from_influence_logs`, which has no set-ups)."""
    docs = summary.get("documents", [])
    counted = [d for d in docs if d.get("low") is not None]  # seen for enough queries to have an interval
    logs = summary.get("value") == "influence"
    data: dict[str, Any] = {
        "summary": summary,
        "value_label": "influence score" if logs else "utility alone − no document",
        "up_label": "answer rested on it" if logs else "LLM surer with it",
        "down_label": "below 0" if logs else "LLM less sure with it",
        "charts": {},
        # a document with a mean below 0 is never listed among the most useful
        "most_useful": sorted([d for d in counted if d["mean_value"] > 0], key=lambda d: -d["mean_value"])[
            :MAX_DOCUMENTS
        ],
        "least_useful": sorted([d for d in counted if d["mean_value"] < 0], key=lambda d: d["mean_value"])[
            :MAX_DOCUMENTS
        ],
        "never_positive": [d for d in docs if d["never_positive"]][:MAX_DOCUMENTS],
        "n_never_positive": sum(d["never_positive"] for d in docs),
        "n_negative": sum(d["negative"] for d in docs),
        "n_documents": len(docs),
        "n_counted": len(counted),
        "queries": summary.get("queries", [])[:MAX_DRILLDOWN],
    }
    if summary.get("setups"):
        order = summary["ranking"]
        baseline = BASELINE
        colour = charts.colours(summary.get("settings", {}).get("setups") or sorted(summary["setups"]))
        rows = {**summary["setups"], baseline: summary["baseline"]}
        label = f"{summary['signal']} ({summary['signal_unit']}); higher is better"
        data["baseline_name"] = baseline
        data["charts"]["setups"] = charts.setup_chart(rows, [*order, baseline], label, colour, baseline)
        columns = {n: [q["setups"][n]["value"] for q in summary["queries"]] for n in order}
        columns[baseline] = [q["baseline"]["value"] for q in summary["queries"]]
        data["charts"]["spread"] = charts.distribution_chart(columns, [*order, baseline], label)
        if len(order) > 1:
            data["charts"]["differences"] = charts.difference_chart(summary["comparisons"], order[0], colour)
        data["colour"] = colour
    if summary.get("rank_curve"):
        colour = data.get("colour") or charts.colours(sorted(summary["rank_curve"]))
        data["charts"]["rank"] = charts.rank_chart(summary["rank_curve"], data["value_label"], colour)
    return data


def render_html(summary: dict[str, Any], title: str = "grogu audit") -> str:
    """The report page as a string."""
    jinja2 = require("jinja2", "the audit report", AUDIT_INSTALL)
    require("matplotlib", "the audit report's charts", AUDIT_INSTALL)
    env = jinja2.Environment(autoescape=jinja2.select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = _fmt
    template = env.from_string(
        resources.files("grogu.apps.audit").joinpath("templates/report.html.j2").read_text("utf-8")
    )
    return template.render(title=title, **page_data(summary))


def write_report(summary: dict[str, Any], out_dir: str, title: str = "grogu audit") -> tuple[str, str]:
    """Write ``report.html`` and ``summary.json`` into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    summary = _clean(summary)
    html_path, json_path = os.path.join(out_dir, "report.html"), os.path.join(out_dir, "summary.json")
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump(summary, f, ensure_ascii=False, indent=1)
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(render_html(summary, title))
    return html_path, json_path
