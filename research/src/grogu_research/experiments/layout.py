"""GROGU paper, §4.3 (context layout): where should the gold paragraph go, for *this* model?

For each sampled SQuAD v1.1 dev question a 10-paragraph context: the gold paragraph and the 9 paragraphs
the retriever ranks highest among those holding no answer string (in retrieval order). Three layouts
put the gold paragraph **first**, **fifth** or **last**. Each model scores all three (one batched engine
pass per chunk of questions) and answers from each (greedy; correct = contains a gold answer string).

Reported per model: accuracy with each fixed layout; with the layout the model itself picks by GROGU
(the highest utility; ties go to the earlier layout; KeyEntropy, and the other variants for comparison);
with a random layout (one seeded draw per question, shared by all models, and its expectation = the mean
of the three fixed-layout accuracies); the oracle (any layout correct). With two or more models, each
model's accuracy when it uses another model's KeyEntropy choice.
"""

from __future__ import annotations

import random
from typing import Any

from grogu.rerank.selection import argmax
from grogu_research.experiments import common
from grogu_research.experiments.negatives import hard_negatives, make_retriever

LAYOUTS = {"first": 0, "fifth": 4, "last": 9}
N_PARAGRAPHS = 10


def build_items(
    limit: int | None, seed: int, retriever: str, device: str | None = None
) -> tuple[list[dict], list[str]]:
    paragraphs, questions = common.squad_questions(limit, seed)
    texts = [p["text"] for p in paragraphs]
    ret = make_retriever(retriever, texts, device=device)
    items = []
    for q in questions:
        noise = hard_negatives(ret.scores(q["question"]), texts, q["answers"], {q["gold"]}, N_PARAGRAPHS - 1)
        layouts = {name: noise[:pos] + [q["gold"]] + noise[pos:] for name, pos in LAYOUTS.items()}
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "answers": q["answers"],
                "paragraph_ids": layouts,
                "random_layout": random.Random(f"{seed}-{q['id']}-layout").choice(list(LAYOUTS)),
                "models": {},
            }
        )
    return items, texts


def choose(utility: dict[str, dict[str, float]], metric: str) -> str:
    """The layout with the highest utility under ``metric``; ties go to the earlier layout."""
    names = list(LAYOUTS)
    return names[argmax([utility[n][metric] for n in names])]


def summarize(items: list[dict], models: list[str]) -> dict:
    n = len(items)
    out: dict[str, Any] = {}
    for key in models:
        recs = [it["models"][key] for it in items]
        acc = {name: sum(r["correct"][name] for r in recs) / n for name in LAYOUTS}
        own = {m: sum(r["correct"][r["choice"][m]] for r in recs) / n for m in common.GROGU_METRICS}
        out[key] = {
            "fixed": acc,
            "own_choice": own,
            "random_layout": sum(r["correct"][it["random_layout"]] for it, r in zip(items, recs)) / n,
            "random_expected": sum(acc.values()) / len(acc),
            "oracle": sum(any(r["correct"].values()) for r in recs) / n,
            "choices": {name: sum(r["choice"]["key_entropy"] == name for r in recs) for name in LAYOUTS},
            "other_choice": {
                other: sum(r["correct"][it["models"][other]["choice"]["key_entropy"]] for it, r in zip(items, recs)) / n
                for other in models
                if other != key
            },
        }
    return out


def run(
    *,
    model: Any = common.DEFAULT_MODEL,
    limit: int | None = 30,
    seed: int = 0,
    retriever: str = "bm25",
    max_new_tokens: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    batch: int = 2,
    threads: int | None = None,
    out_dir: str | None = None,
    write: bool = True,
    command: str | None = None,
) -> dict:
    """§4.3 on ``limit`` SQuAD dev questions; ``model`` may be a list of models (each scores every
    layout; their choices are swapped in the summary)."""
    clock = common.Clock()
    common.set_threads(threads)
    scorers = [common.build_scorer(m, max_new_tokens, device, dtype) for m in common.model_list(model)]
    names = common.model_names(scorers)
    keys = [f"{i}:{name}" if names.count(name) > 1 else name for i, name in enumerate(names)]
    items, texts = build_items(limit, seed, retriever, device)
    bar = common.progress(len(items) * len(scorers), "layout")
    for key, scorer in zip(keys, scorers):
        for chunk in common.chunks(items, batch):
            jobs = [(it["question"], [texts[p] for p in it["paragraph_ids"][name]]) for it in chunk for name in LAYOUTS]
            scored = iter(common.score_contexts(scorer, jobs))
            for it in chunk:
                rec = {"utility": {}, "answer": {}, "correct": {}}
                for name in LAYOUTS:
                    r = next(scored)
                    rec["utility"][name], rec["answer"][name] = dict(r.variants), r.answer
                    rec["correct"][name] = common.is_correct(r.answer, it["answers"])
                rec["choice"] = {m: choose(rec["utility"], m) for m in common.GROGU_METRICS}
                it["models"][key] = rec
            bar.update(len(chunk))
    bar.close()
    result = {
        "experiment": "layout",
        "models": keys,
        "n": len(items),
        "unit": "SQuAD dev questions",
        "config": {
            "limit": limit,
            "seed": seed,
            "retriever": retriever,
            "paragraphs": N_PARAGRAPHS,
            "layouts": "gold at position " + ", ".join(f"{p + 1} ({n})" for n, p in LAYOUTS.items()),
            "max_new_tokens": max_new_tokens,
            "batch": batch,
            "device": str(scorers[0].target.device),
            "command": command,
        },
        "summary": summarize(items, keys),
        "items": items,
        "wall_s": clock(),
    }
    return common.finish(result, out_dir, write, markdown(result), plot)


def markdown(result: dict) -> str:
    s = result["summary"]
    rows = []
    for key, v in s.items():
        row = [key] + [common.fmt(v["fixed"][n], pct=True) for n in LAYOUTS]
        row += [
            common.fmt(v["random_layout"], pct=True),
            common.fmt(v["random_expected"], pct=True),
            common.fmt(v["own_choice"]["key_entropy"], pct=True),
        ]
        row += [common.fmt(v["own_choice"][m], pct=True) for m in ("entropy", "ppl", "key_ppl")]
        row += [common.fmt(v["oracle"], pct=True), " / ".join(str(v["choices"][n]) for n in LAYOUTS)]
        rows.append(row)
    table = common.md_table(
        [
            "model",
            "gold first (%)",
            "gold fifth (%)",
            "gold last (%)",
            "random layout (%)",
            "random, expected (%)",
            "own GROGU choice, KeyEntropy (%)",
            "own choice, Entropy (%)",
            "own choice, PPL (%)",
            "own choice, KeyPPL (%)",
            "oracle (%)",
            "KeyEntropy picks first / fifth / last",
        ],
        rows,
    )
    text = (
        common.header(result, "Context layout: gold paragraph first, fifth or last of 10 (GROGU paper §4.3)")
        + "\n"
        + table
        + "\n"
    )
    cross = [
        [key, other, common.fmt(acc, pct=True), common.fmt(v["own_choice"]["key_entropy"], pct=True)]
        for key, v in s.items()
        for other, acc in v["other_choice"].items()
    ]
    if cross:
        text += (
            "\n"
            + common.md_table(["model", "using the choice of", "accuracy (%)", "with its own choice (%)"], cross)
            + "\n"
        )
    return text


def plot(result: dict, path: str) -> None:
    groups = {}
    for key, v in result["summary"].items():
        bars = {f"gold {n}": v["fixed"][n] for n in LAYOUTS}
        bars.update(
            {
                "random layout": v["random_layout"],
                "own choice (KeyEntropy)": v["own_choice"]["key_entropy"],
                "oracle": v["oracle"],
            }
        )
        bars.update({f"{o}'s choice": acc for o, acc in v["other_choice"].items()})
        groups[key] = bars
    common.bar_plot(path, groups, f"Answer accuracy by layout — N={result['n']}", "accuracy")
