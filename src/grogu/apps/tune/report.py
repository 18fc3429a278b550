"""Tune's report: ``report.txt`` and a self-contained ``report.html`` (Jinja2, ``templates/report.html.j2``).

It compares the arms on the judged questions: the retriever's order (keep), the shipped default, the chosen
setting (picked on these very questions: an optimistic figure), and the cross-validated tune (each question
answered by the setting picked without it: the honest figure). Per arm: accuracy, token F1, the dense judge
(the gold answers' mean log-probability per token under the chosen context; "n/a" in records without it),
answer words (so a longer answer cannot buy accuracy unseen), how often the context changed, and the cost
relative to the plain answer (the ratio of the means, and the 90th percentile of the per-question ratios).
Then each fold. The gain's line (:mod:`.gain`) comes second in the summary, and first in the HTML.
"""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

from .choose import TuneResult
from .replay import SHIPPED, setting_name


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else float("nan")


def arms(result: TuneResult) -> list[dict[str, Any]]:
    """One row per arm (module docstring), each a dict of plain values."""
    out, rows = result.outcomes, result.rows
    pick = {
        "retriever's order (keep)": lambda r: 0,
        "shipped default": (lambda r: out.settings.index(SHIPPED)) if SHIPPED in out.settings else None,
        "chosen (fitted on these questions)": lambda r: result.chosen,
        "tuned, cross-validated": lambda r: result.held_out[r],
    }
    table = []
    for name, which in pick.items():
        if which is None:
            continue
        sel = [(r, which(r)) for r in rows]
        n = len(sel)
        ratios = [out.seconds[s][r] / out.plain[r] for r, s in sel if out.plain[r] > 0]
        table.append(
            {
                "arm": name,
                "accuracy": sum(out.correct[s][r] for r, s in sel) / n,
                "f1": sum(out.f1[s][r] for r, s in sel) / n,
                "loglik": sum(out.loglik[s][r] for r, s in sel) / n if out.loglik is not None else None,
                "words": sum(out.words[s][r] for r, s in sel) / n,
                "changed": sum(out.changed[s][r] for r, s in sel) / n,
                "cost": sum(out.seconds[s][r] for r, s in sel) / max(sum(out.plain[r] for r, _ in sel), 1e-12),
                "cost_p90": _p90(ratios),
            }
        )
    return table


def render_text(result: TuneResult, tuned: Any) -> str:
    lines = [
        result.summary(),
        "",
        f"{'arm':38} {'acc':>6} {'F1':>6} {'loglik':>7} {'words':>6} {'changed':>8} {'cost':>6} {'p90':>6}",
    ]
    for a in arms(result):
        ll = "n/a" if a["loglik"] is None else f"{a['loglik']:.3f}"
        lines.append(
            f"{a['arm']:38} {a['accuracy']:6.3f} {a['f1']:6.3f} {ll:>7} {a['words']:6.1f} {a['changed']:8.1%} "
            f"{a['cost']:5.2f}x {a['cost_p90']:5.2f}x"
        )
    lines += ["", "folds (each: the setting picked on the other folds, judged on this one against the incumbent):"]
    for f in result.folds:
        lines.append(
            f"  fold {f.index}: {len(f.rows)} questions, {setting_name(result.outcomes.settings[f.chosen])}: "
            f"{f.wins} wins / {f.losses} losses vs the incumbent"
            + ("" if f.dense is None else f" (dense {f.dense:+.4f})")
            + f"; shipped vs keep {f.shipped_wins} / {f.shipped_losses}"
        )
    lines += [
        "",
        f"rule: {result.evidence['rule']}",
        f"gain: {result.evidence['gain']['method']}",
        f"settings file: model {tuned.model}, prompt {tuned.prompt_hash}",
    ]
    return "\n".join(lines) + "\n"


def render_html(result: TuneResult, tuned: Any) -> str:
    import jinja2

    source = resources.files("grogu.apps.tune").joinpath("templates/report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    folds = [
        {
            "index": f.index,
            "questions": len(f.rows),
            "setting": setting_name(result.outcomes.settings[f.chosen]),
            "wins": f.wins,
            "losses": f.losses,
            "shipped_wins": f.shipped_wins,
            "shipped_losses": f.shipped_losses,
            "dense": None if f.dense is None else f"{f.dense:+.4f}",
        }
        for f in result.folds
    ]
    return env.from_string(source).render(
        summary=result.summary(), arms=arms(result), folds=folds, evidence=result.evidence, tuned=tuned
    )


def write_report(result: TuneResult, tuned: Any, out: str) -> None:
    """``report.txt`` and ``report.html`` in the folder ``out``."""
    with open(os.path.join(out, "report.txt"), "w", encoding="utf-8") as f:
        f.write(render_text(result, tuned))
    with open(os.path.join(out, "report.html"), "w", encoding="utf-8") as f:
        f.write(render_html(result, tuned))


__all__ = ["arms", "render_text", "render_html", "write_report"]
