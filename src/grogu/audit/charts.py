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


def setup_chart(setups: dict[str, dict[str, Any]], order: Sequence[str], metric: str) -> str:
    """Mean context utility per set-up (best on top) with its bootstrap interval."""
    fig, ax = _figure(7.0, 0.5 + 0.45 * len(order))
    names = list(reversed(order))
    means = [setups[n]["mean_utility"] for n in names]
    err = [[m - setups[n]["low"] for n, m in zip(names, means)], [setups[n]["high"] - m for n, m in zip(names, means)]]
    for i, n in enumerate(names):
        ax.errorbar(
            [means[i]],
            [n],
            xerr=[[err[0][i]], [err[1][i]]],
            fmt="o",
            markersize=8,
            capsize=5,
            color=PALETTE[order.index(n) % len(PALETTE)],
        )
    ax.set_xlabel(f"mean context utility ({metric}; higher = more useful to the LLM)")
    ax.set_title("Retrieval set-ups: mean utility of the context, 95% bootstrap interval")
    ax.margins(y=0.3)
    return _png(fig)


def difference_chart(comparisons: Sequence[dict[str, Any]], best: str) -> str:
    """The best set-up's paired mean difference over each other set-up, with its interval."""
    rows = [c for c in comparisons if c["a"] == best]
    fig, ax = _figure(7.0, 0.6 + 0.45 * max(1, len(rows)))
    labels = [f"{c['a']} − {c['b']}" for c in rows]
    means = [c["mean_diff"] for c in rows]
    err = [[c["mean_diff"] - c["low"] for c in rows], [c["high"] - c["mean_diff"] for c in rows]]
    ax.errorbar(means, labels, xerr=err, fmt="o", color=PALETTE[0], capsize=4)
    ax.axvline(0.0, color="#444", lw=1, ls="--")
    ax.set_xlabel("paired mean difference of context utility (interval excludes 0: a clear difference)")
    ax.set_title(f"How much better {best} is, query by query")
    return _png(fig)


def rank_chart(curve: dict[str, list[dict[str, Any]]], value_label: str) -> str:
    """Mean usefulness of the document at each retrieval rank, one line per set-up."""
    fig, ax = _figure(7.0, 3.6)
    ax.grid(axis="y", alpha=0.3)
    for i, (setup, points) in enumerate(curve.items()):
        ax.plot(
            [p["rank"] for p in points],
            [p["mean_value"] for p in points],
            marker="o",
            color=PALETTE[i % len(PALETTE)],
            label=setup,
        )
    ax.axhline(0.0, color="#444", lw=1, ls="--")
    ax.set_xlabel("retrieval rank")
    ax.set_xticks(sorted({p["rank"] for points in curve.values() for p in points}))
    ax.set_ylabel(value_label)
    ax.set_title("Usefulness against retrieval rank")
    ax.legend(frameon=False, fontsize=8)
    return _png(fig)


def distribution_chart(queries: Sequence[dict[str, Any]], order: Sequence[str]) -> str:
    """Per-query context utility of each set-up, as box plots."""
    fig, ax = _figure(7.0, 0.6 + 0.5 * len(order))
    names = list(reversed(order))
    data = [[q["setups"][n]["utility"] for q in queries] for n in names]
    import matplotlib

    new = tuple(int(x) for x in matplotlib.__version__.split(".")[:2]) >= (3, 10)
    ax.boxplot(data, showmeans=True, **({"orientation": "horizontal"} if new else {"vert": False}))
    ax.set_yticks(range(1, len(names) + 1), names)
    ax.set_xlabel("context utility per query")
    ax.set_title("Spread over queries")
    return _png(fig)
