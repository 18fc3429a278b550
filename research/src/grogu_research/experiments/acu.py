"""ACU on SufficientFacts: sufficient against insufficient evidence for the same claims.

Claims of ``sufficient-facts/fever_sufficient_facts.jsonl`` (or another file) whose evidence became
insufficient after a span was removed (``label_after`` = NOT ENOUGH, ``label_before`` = SUPPORTS or
REFUTES), in file order. Each claim is scored twice with :class:`grogu.metrics.acu.ACUScorer`: the original
evidence (``text_orig`` with the removed span put back; stance = label_before, raising True / False)
and the evidence with information removed (stance NOT ENOUGH, raising None). Reported: both mean ACUs
and the fraction of claims whose sufficient evidence has the higher ACU, overall and per label_before.
This is ``benchmarks/acu_sufficient_facts.py`` as an experiment (same evidence texts and prompts).
"""

from __future__ import annotations

import json
import re
from typing import Any

from grogu_research.experiments import common
from grogu_research.testing import shared_data_path

LABELS = ("SUPPORTS", "REFUTES")


def original_evidence(text_orig: str) -> str:
    """``text_orig`` with the removed span kept and the markup dropped: '[[Title]] s' -> 'Title: s'."""
    text = re.sub(r"<span[^>]*>|</span>", "", text_orig)
    text = re.sub(r"\[\[([^\]]+)\]\]", r"\1:", text)
    return " ".join(text.split())


def insufficient_evidence(evidence: list) -> str:
    """The evidence sentences left after the removal, as 'Title: sentence' joined by spaces."""
    return " ".join(f"{title}: {sent}" for title, sent in evidence)


def load_items(limit: int | None, file: str) -> list[dict]:
    with open(shared_data_path("sufficient-facts", file), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    rows = [r for r in rows if r["label_after"] == "NOT ENOUGH" and r["label_before"] in LABELS]
    rows = rows[:limit] if limit is not None else rows
    return [
        {
            "claim": r["claim"],
            "label_before": r["label_before"],
            "type": r.get("type"),
            "sufficient_evidence": original_evidence(r["text_orig"]),
            "insufficient_evidence": insufficient_evidence(r["evidence"]),
        }
        for r in rows
    ]


def _stats(items: list[dict]) -> dict:
    n = len(items)
    if not n:
        return {
            "n": 0,
            "mean_sufficient": float("nan"),
            "mean_insufficient": float("nan"),
            "sufficient_higher": float("nan"),
            "sign_test_p": float("nan"),
        }
    higher = [it["acu_sufficient"] > it["acu_insufficient"] for it in items]
    lower = [it["acu_sufficient"] < it["acu_insufficient"] for it in items]
    return {
        "n": n,
        "mean_sufficient": sum(it["acu_sufficient"] for it in items) / n,
        "mean_insufficient": sum(it["acu_insufficient"] for it in items) / n,
        "sufficient_higher": sum(higher) / n,
        "sign_test_p": common.sign_test(higher, lower)["p"],
    }


def summarize(items: list[dict]) -> dict:
    return {"all": _stats(items), **{lab: _stats([it for it in items if it["label_before"] == lab]) for lab in LABELS}}


def run(
    *,
    model: Any = common.DEFAULT_MODEL,
    limit: int | None = 300,
    seed: int = 0,
    file: str = "fever_sufficient_facts.jsonl",
    device: str | None = None,
    dtype: str | None = None,
    batch: int = 32,
    threads: int | None = None,
    max_new_tokens: int | None = None,
    retriever: str | None = None,
    out_dir: str | None = None,
    write: bool = True,
    command: str | None = None,
) -> dict:
    """ACU of sufficient vs insufficient evidence for the first ``limit`` claims (file order; ``seed``,
    ``max_new_tokens`` and ``retriever`` are accepted and unused: ACU reads next-token probabilities)."""
    from grogu.metrics.acu import ACUScorer

    clock = common.Clock()
    common.set_threads(threads)
    scorer = ACUScorer(common.one_model(model, "acu"), device=device, dtype=dtype)
    items = load_items(limit, file)
    bar = common.progress(len(items), "acu", unit="claim")
    for chunk in common.chunks(items, batch):
        triples = [(it["claim"], it["sufficient_evidence"], it["label_before"]) for it in chunk]
        triples += [(it["claim"], it["insufficient_evidence"], "NOT ENOUGH") for it in chunk]
        res = scorer.score_batch(triples)
        for it, suff, insuff in zip(chunk, res[: len(chunk)], res[len(chunk) :]):
            it["acu_sufficient"], it["acu_insufficient"] = suff.acu, insuff.acu
            it["p_sufficient"] = {"with": suff.p_with, "without": suff.p_without, "raised": suff.raised}
            it["p_insufficient"] = {"with": insuff.p_with, "without": insuff.p_without, "raised": insuff.raised}
        bar.update(len(chunk))
    bar.close()
    result = {
        "experiment": "acu",
        "models": common.model_names([scorer]),
        "n": len(items),
        "unit": "claims",
        "config": {
            "limit": limit,
            "file": file,
            "labels": "/".join(scorer.labels),
            "batch": batch,
            "device": str(scorer.target.device),
            "command": command,
        },
        "summary": summarize(items),
        "items": items,
        "wall_s": clock(),
    }
    return common.finish(result, out_dir, write, markdown(result), plot)


def markdown(result: dict) -> str:
    s = result["summary"]
    rows = [
        [
            name,
            v["n"],
            common.fmt(v["mean_sufficient"], 4),
            common.fmt(v["mean_insufficient"], 4),
            common.fmt(v["sufficient_higher"]),
            common.fmt_p(v["sign_test_p"]),
        ]
        for name, v in (("all", s["all"]), *((lab, s[lab]) for lab in LABELS))
    ]
    table = common.md_table(
        [
            "claims (label_before)",
            "n",
            "mean ACU, sufficient evidence (raises True/False)",
            "mean ACU, insufficient evidence (NOT ENOUGH, raises None)",
            "fraction with sufficient ACU higher",
            "sign-test p (higher vs lower)",
        ],
        rows,
    )
    return (
        common.header(
            result, f"ACU of sufficient vs insufficient evidence (SufficientFacts, {result['config']['file']})"
        )
        + "\n"
        + table
        + "\n"
    )


def plot(result: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    items = result["items"]
    fig, ax = plt.subplots(figsize=(7, 4))
    bins = [i / 20 - 1 for i in range(41)]
    ax.hist([it["acu_sufficient"] for it in items], bins=bins, alpha=0.6, label="sufficient (label_before)")
    ax.hist([it["acu_insufficient"] for it in items], bins=bins, alpha=0.6, label="insufficient (NOT ENOUGH)")
    ax.set_xlabel("ACU")
    ax.set_ylabel("claims")
    ax.legend(fontsize=8)
    ax.set_title(f"ACU on SufficientFacts — {', '.join(result['models'])}, N={result['n']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
