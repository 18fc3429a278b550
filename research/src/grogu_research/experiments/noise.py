"""GROGU paper, §4.2 (noise robustness): random noise against retrieved noise around the gold paragraph.

For each sampled SQuAD v1.1 dev question two 5-paragraph contexts: **random** = the gold paragraph + 4
random paragraphs, **retrieved** = the gold paragraph + the 4 paragraphs the retriever ranks highest
among those holding no answer string (hard noise). The gold paragraph sits at the same, randomly drawn
(seeded) position in both; the noise keeps its draw / retrieval order. The model answers from each
context (greedy); an answer is correct when it contains a gold answer string (normalised, whole words).

Reported:
- accuracy under each context; outcome counts: random-only correct ("random wins"), retrieved-only
  correct ("retrieved wins"), and ties (both correct, both wrong);
- per metric (the four GROGU variants, and the relevance baselines BM25 / MiniLM = mean
  query-paragraph score of the context's paragraphs): how often it prefers each context, and Kendall's
  tau = (C - D) / (C + D) between its preference sign(u_random - u_retrieved) and the correctness
  difference sign(correct_random - correct_retrieved): C = same sign, D = opposite signs, questions
  where either is 0 (a tie) count in neither;
- the metric as a binary classifier of answer correctness (the paper's Table 3, as we read it): each
  of the 2N contexts is predicted *correct* when the metric scores it at least as high as the other
  context of its question; accuracy and F1 (positive = correct) over the 2N contexts.
"""

from __future__ import annotations

import random
from typing import Any

from grogu_research.experiments import common
from grogu_research.experiments.negatives import BM25Retriever, DenseRetriever, hard_negatives, make_retriever

CONTEXTS = ("random", "retrieved")
METRICS = common.GROGU_METRICS + ("bm25", "minilm")
N_NOISE = 4


def build_items(
    limit: int | None, seed: int, retriever: str, device: str | None = None
) -> tuple[list[dict], Any, list[str]]:
    """The sampled questions with the paragraph ids of both contexts; the retriever; all texts."""
    paragraphs, questions = common.squad_questions(limit, seed)
    texts = [p["text"] for p in paragraphs]
    ret = make_retriever(retriever, texts, device=device)
    items = []
    for q in questions:
        rng = random.Random(f"{seed}-{q['id']}")
        retrieved = hard_negatives(ret.scores(q["question"]), texts, q["answers"], {q["gold"]}, N_NOISE)
        rnd: list[int] = []
        while len(rnd) < N_NOISE:
            rnd.append(common.random_paragraph(rng, paragraphs, {q["gold"], *rnd}, q["answers"]))
        pos = rng.randrange(N_NOISE + 1)
        ids = {
            name: noise[:pos] + [q["gold"]] + noise[pos:] for name, noise in (("random", rnd), ("retrieved", retrieved))
        }
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "answers": q["answers"],
                "gold_position": pos,
                "paragraph_ids": ids,
            }
        )
    return items, ret, texts


def relevance(items: list[dict], ret: Any, texts: list[str], device: str | None) -> None:
    """Mean BM25 and MiniLM score of each context's paragraphs for the question (in place)."""
    bm25 = ret if isinstance(ret, BM25Retriever) else BM25Retriever(texts)
    minilm = ret if isinstance(ret, DenseRetriever) else DenseRetriever(device=device)
    pairs = [(it["question"], pid) for it in items for c in CONTEXTS for pid in it["paragraph_ids"][c]]
    cos = iter(minilm.pair_scores([q for q, _ in pairs], [texts[p] for _, p in pairs]))
    for it in items:
        it["utility"] = {}
        for c in CONTEXTS:
            ids = it["paragraph_ids"][c]
            it["utility"][c] = {
                "bm25": sum(bm25.score_ids(it["question"], ids)) / len(ids),
                "minilm": sum(next(cos) for _ in ids) / len(ids),
            }


def summarize(items: list[dict]) -> dict:
    ca = [it["correct"]["random"] for it in items]
    cb = [it["correct"]["retrieved"] for it in items]
    outcome = [int(a) - int(b) for a, b in zip(ca, cb)]
    counts = {
        "random_wins": sum(o > 0 for o in outcome),
        "retrieved_wins": sum(o < 0 for o in outcome),
        "ties_both_correct": sum(a and b for a, b in zip(ca, cb)),
        "ties_both_wrong": sum(not a and not b for a, b in zip(ca, cb)),
    }
    metrics = {}
    for m in METRICS:
        ua = [it["utility"]["random"][m] for it in items]
        ub = [it["utility"]["retrieved"][m] for it in items]
        pref = [a - b for a, b in zip(ua, ub)]
        predicted = [a >= b for a, b in zip(ua, ub)] + [b >= a for a, b in zip(ua, ub)]
        metrics[m] = {
            "prefers_random": sum(p > 0 for p in pref),
            "prefers_retrieved": sum(p < 0 for p in pref),
            "prefers_neither": sum(p == 0 for p in pref),
            **common.kendall_tau(pref, outcome),
            "classifier": common.binary_scores(predicted, ca + cb),
        }
    n = len(items)
    return {"accuracy": {"random": sum(ca) / n, "retrieved": sum(cb) / n}, "outcomes": counts, "metrics": metrics}


def run(
    *,
    model: Any = common.DEFAULT_MODEL,
    limit: int | None = 100,
    seed: int = 0,
    retriever: str = "bm25",
    max_new_tokens: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    batch: int = 4,
    threads: int | None = None,
    out_dir: str | None = None,
    write: bool = True,
    command: str | None = None,
) -> dict:
    """§4.2 on ``limit`` SQuAD dev questions (sampled with ``seed``); see the module docstring."""
    clock = common.Clock()
    common.set_threads(threads)
    scorer = common.build_scorer(common.one_model(model, "noise"), max_new_tokens, device, dtype)
    items, ret, texts = build_items(limit, seed, retriever, device)
    relevance(items, ret, texts, device)
    bar = common.progress(len(items), "noise")
    for chunk in common.chunks(items, batch):
        jobs = [(it["question"], [texts[p] for p in it["paragraph_ids"][c]]) for it in chunk for c in CONTEXTS]
        scored = iter(common.score_contexts(scorer, jobs))
        for it in chunk:
            for c in CONTEXTS:
                r = next(scored)
                it["utility"][c].update(r.variants)
                it.setdefault("answer", {})[c] = r.answer
                it.setdefault("correct", {})[c] = common.is_correct(r.answer, it["answers"])
        bar.update(len(chunk))
    bar.close()
    result = {
        "experiment": "noise",
        "models": common.model_names([scorer]),
        "n": len(items),
        "unit": "SQuAD dev questions",
        "config": {
            "limit": limit,
            "seed": seed,
            "retriever": retriever,
            "noise_paragraphs": N_NOISE,
            "max_new_tokens": max_new_tokens,
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
    o = s["outcomes"]
    acc = common.md_table(
        ["context", "answer accuracy (%)"],
        [
            ["gold + 4 random", common.fmt(s["accuracy"]["random"], pct=True)],
            ["gold + 4 retrieved", common.fmt(s["accuracy"]["retrieved"], pct=True)],
        ],
    )
    outcomes = common.md_table(
        [
            "random wins (only random correct)",
            "retrieved wins (only retrieved correct)",
            "ties: both correct",
            "ties: both wrong",
        ],
        [[o["random_wins"], o["retrieved_wins"], o["ties_both_correct"], o["ties_both_wrong"]]],
    )
    rows = [
        [
            common.METRIC_LABELS[m],
            v["prefers_random"],
            v["prefers_retrieved"],
            v["prefers_neither"],
            v["C"],
            v["D"],
            common.fmt(v["tau"]),
            common.fmt(v["classifier"]["accuracy"]),
            common.fmt(v["classifier"]["f1"]),
        ]
        for m, v in s["metrics"].items()
    ]
    table = common.md_table(
        [
            "metric",
            "prefers random",
            "prefers retrieved",
            "no preference",
            "C",
            "D",
            "Kendall τ",
            "classifier acc.",
            "classifier F1",
        ],
        rows,
    )
    return (
        common.header(result, "Noise robustness: gold + 4 random vs gold + 4 retrieved (GROGU paper §4.2)")
        + "\n"
        + acc
        + "\n\n"
        + outcomes
        + "\n\n"
        + table
        + "\n"
    )


def plot(result: dict, path: str) -> None:
    m = result["summary"]["metrics"]
    common.bar_plot(
        path,
        {
            "Kendall τ": {k: v["tau"] for k, v in m.items()},
            "classifier accuracy": {k: v["classifier"]["accuracy"] for k, v in m.items()},
        },
        f"Noise robustness — {', '.join(result['models'])}, N={result['n']}",
        "value",
        ylim=(-1, 1),
        hline=0,
    )
