"""Outputs of the harness: JSON-safe results, Markdown tables, the <name>.json / .md / .png files and
bar plots. matplotlib (the ``eval`` extra) is imported on first use."""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Callable, Sequence

from grogu.core.extras import require

METRIC_LABELS = {
    "ppl": "PPL",
    "key_ppl": "KeyPPL",
    "entropy": "Entropy",
    "key_entropy": "KeyEntropy",
    "bm25": "BM25 (relevance)",
    "minilm": "MiniLM (relevance)",
}


def clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, tuples -> lists, numpy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fmt(value: Any, digits: int = 3, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if pct:
        return f"{100 * value:.1f}"
    return f"{value:.{digits}f}"


def fmt_p(p: Any) -> str:
    if p is None or (isinstance(p, float) and not math.isfinite(p)):
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def model_names(scorers_or_engines: Sequence[Any]) -> list[str]:
    out = []
    for s in scorers_or_engines:
        engine = getattr(s, "target", s)  # a scorer holds its target LLM
        out.append(str(getattr(engine, "model_name", type(engine).__name__)))
    return out


def header(result: dict, title: str) -> str:
    cfg = result["config"]
    lines = [
        f"### {title}",
        "",
        f"- model: {', '.join(result['models'])}; N = {result['n']} {result.get('unit', 'items')}",
        f"- wall time: {result['wall_s']:.0f} s",
    ]
    if cfg.get("command"):
        lines.append(f"- command: `{cfg['command']}`")
    shown = {k: v for k, v in cfg.items() if k not in ("command", "model")}
    lines.append("- settings: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    return "\n".join(lines) + "\n"


def finish(result: dict, out_dir: str | None, write: bool, markdown: str, plot: Callable[[dict, str], None]) -> dict:
    """Add the Markdown table to the result and write <name>.json / .md / .png to out_dir."""
    result["markdown"] = markdown
    if not write:
        return result
    out = out_dir or os.path.join("runs", "eval", result["experiment"])
    os.makedirs(out, exist_ok=True)
    name = result["experiment"]
    files = {
        "json": os.path.join(out, f"{name}.json"),
        "md": os.path.join(out, f"{name}.md"),
        "png": os.path.join(out, f"{name}.png"),
    }
    result["files"] = files
    with open(files["md"], "w", encoding="utf-8") as f:
        f.write(markdown.rstrip() + "\n")
    matplotlib = require("matplotlib", "the evaluation harness's plots")
    matplotlib.use("Agg")
    plot(result, files["png"])
    with open(files["json"], "w", encoding="utf-8") as f:
        json.dump(clean(result), f, ensure_ascii=False, indent=1)
    return result


class Clock:
    """Wall time since construction, in seconds."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start


def bar_plot(
    path: str,
    groups: dict[str, dict[str, float]],
    title: str,
    ylabel: str,
    ylim: tuple[float, float] | None = (0, 1),
    hline: float | None = None,
) -> None:
    """Grouped bar chart: groups = {group: {bar: value}} (NaN bars are left empty)."""
    plt = require("matplotlib.pyplot", "the evaluation harness's plots")

    bars = list(dict.fromkeys(b for g in groups.values() for b in g))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(bars) * max(1, len(groups)) / 2 + 2), 4))
    width = 0.8 / max(1, len(groups))
    for gi, (gname, values) in enumerate(groups.items()):
        xs = [i + gi * width - 0.4 + width / 2 for i in range(len(bars))]
        ys = [values.get(b, float("nan")) for b in bars]
        ys = [y if y is not None and math.isfinite(y) else 0.0 for y in ys]
        ax.bar(xs, ys, width, label=gname)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([METRIC_LABELS.get(b, b) for b in bars], rotation=20, ha="right")
    if ylim:
        ax.set_ylim(*ylim)
    if hline is not None:
        ax.axhline(hline, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if len(groups) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["METRIC_LABELS", "clean", "fmt", "fmt_p", "md_table", "model_names", "header", "finish", "Clock", "bar_plot"]
