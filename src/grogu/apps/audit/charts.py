"""The report's charts, drawn with matplotlib (Agg backend) and returned as base64 PNG data, so the HTML
page embeds them and opens without a network."""

from __future__ import annotations

import base64
import io
from typing import Any, Sequence

PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#718096", "#b7791f")


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", alpha=0.3)
    return fig, ax


#: the no-document baseline's colour in every chart
BASELINE_COLOUR = "#718096"


def colours(names: Sequence[str]) -> dict[str, str]:
    """One colour per set-up, from its position in ``names`` (the set-ups as given), so a set-up keeps its
    colour in every chart; the baseline is grey."""
    palette = [c for c in PALETTE if c != BASELINE_COLOUR]
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def setup_chart(
    rows: dict[str, dict[str, Any]], order: Sequence[str], label: str, colour: dict[str, str], baseline: str
) -> str:
    """Mean signal per set-up (best on top) with its bootstrap interval; the baseline last, grey, with
    a dashed line at its mean."""
    fig, ax = _figure(7.0, 0.5 + 0.45 * len(order))
    names = list(reversed(order))
    for n in names:
        r = rows[n]
        ax.errorbar(
            [r["mean"]],
            [n],
            xerr=[[r["mean"] - r["low"]], [r["high"] - r["mean"]]],
            fmt="o",
            markersize=8,
            capsize=5,
            color=colour.get(n, BASELINE_COLOUR),
        )
    if baseline in rows:
        ax.axvline(rows[baseline]["mean"], color=BASELINE_COLOUR, lw=1, ls="--")
    ax.set_xlabel(label)
    ax.set_title("Set-ups: mean per query, 95% bootstrap interval")
    ax.margins(y=0.3)
    return _png(fig)


def difference_chart(comparisons: Sequence[dict[str, Any]], lead: str, colour: dict[str, str]) -> str:
    """The leading set-up's paired mean difference over each other set-up, with its interval; filled
    where the pair differs (Holm-corrected p and interval agree), hollow where it does not."""
    rows = []
    for c in comparisons:
        if lead in (c["a"], c["b"]):
            flip = c["b"] == lead
            other = c["a"] if flip else c["b"]
            d, lo, hi = (-c["mean_diff"], -c["high"], -c["low"]) if flip else (c["mean_diff"], c["low"], c["high"])
            rows.append((f"{lead} − {other}", d, lo, hi, bool(c.get("differs")), colour.get(other, BASELINE_COLOUR)))
    fig, ax = _figure(7.0, 0.6 + 0.45 * max(1, len(rows)))
    for label, d, lo, hi, differs, col in rows:
        ax.errorbar(
            [d], [label], xerr=[[d - lo], [hi - d]], fmt="o", color=col, capsize=4, mfc=col if differs else "white"
        )
    ax.axvline(0.0, color="#444", lw=1, ls="--")
    ax.set_xlabel("paired mean difference (filled: a difference the statistics support)")
    ax.set_title(f"{lead} against each other set-up, query by query")
    return _png(fig)


def rank_chart(curve: dict[str, list[dict[str, Any]]], value_label: str, colour: dict[str, str]) -> str:
    """Mean usefulness of the document at each retrieval rank, one line per set-up."""
    fig, ax = _figure(7.0, 3.6)
    ax.grid(axis="y", alpha=0.3)
    for setup, points in curve.items():
        ax.plot(
            [p["rank"] for p in points],
            [p["mean_value"] for p in points],
            marker="o",
            color=colour.get(setup, BASELINE_COLOUR),
            label=setup,
        )
    ax.axhline(0.0, color="#444", lw=1, ls="--")
    ax.set_xlabel("retrieval rank")
    ax.set_xticks(sorted({p["rank"] for points in curve.values() for p in points}))
    ax.set_ylabel(value_label)
    ax.set_title("Document alone against no document, by retrieval rank")
    ax.legend(frameon=False, fontsize=8)
    return _png(fig)


def distribution_chart(columns: dict[str, Sequence[float]], order: Sequence[str], label: str) -> str:
    """Each set-up's per-query values, as box plots (best on top)."""
    fig, ax = _figure(7.0, 0.6 + 0.5 * len(order))
    names = list(reversed(order))
    import matplotlib

    new = tuple(int(x) for x in matplotlib.__version__.split(".")[:2]) >= (3, 10)
    ax.boxplot(
        [columns[n] for n in names], showmeans=True, **({"orientation": "horizontal"} if new else {"vert": False})
    )
    ax.set_yticks(range(1, len(names) + 1), names)
    ax.set_xlabel(label)
    ax.set_title("Spread over queries")
    return _png(fig)
