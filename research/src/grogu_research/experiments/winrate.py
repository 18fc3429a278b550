"""GROGU paper, Table 1: does a metric prefer the gold paragraph to a distractor and to a random one?

For each sampled SQuAD v1.1 dev question: the gold paragraph; the *distractor*, the paragraph the
retriever (BM25 or MiniLM, over all 2,067 dev paragraphs) ranks highest among those that hold no answer
string; and a *random* paragraph holding no answer string. Each is scored alone as the context (one
batched engine pass for many questions). The gold paragraph *wins* a comparison under a metric when its
utility is strictly higher; win-rate = (wins + ties / 2) / N. Metrics: PPL, KeyPPL, Entropy, KeyEntropy
(GROGU variants, one generation each) and the relevance baselines BM25 and MiniLM (query-paragraph
score). Sign tests (exact, two-sided, on the questions where the two metrics disagree): KeyEntropy
against Entropy (as in the paper) and KeyPPL against PPL. Paragraphs are given without their titles
(a SQuAD title names the article, which would favour same-article paragraphs).
"""

from __future__ import annotations

import random
from typing import Any

from grogu_research.experiments import common
from grogu_research.experiments.negatives import BM25Retriever, DenseRetriever, hard_negatives, make_retriever

OTHERS = ("distractor", "random")
DOCS = ("gold",) + OTHERS
METRICS = common.GROGU_METRICS + ("bm25", "minilm")
SIGN_TESTS = (("key_entropy", "entropy"), ("key_ppl", "ppl"))
#: Table 1 of the GROGU paper (KeyEntropy win-rates, %), as given in the paper (Hua et al.)
PAPER = {"Phi-4": {"distractor": 90.7, "random": 95.8}, "Qwen2.5-7B": {"distractor": 84.3, "random": 91.0}}


def build_items(limit: int | None, seed: int, retriever: str, device: str | None = None) -> tuple[list[dict], Any]:
    """The sampled questions with their gold, distractor and random paragraph (ids and texts)."""
    paragraphs, questions = common.squad_questions(limit, seed)
    texts = [p["text"] for p in paragraphs]
    ret = make_retriever(retriever, texts, device=device)
    items = []
    for n, q in enumerate(questions):
        exclude = {q["gold"]}
        distractor = hard_negatives(ret.scores(q["question"]), texts, q["answers"], exclude, 1)[0]
        rnd = common.random_paragraph(
            random.Random(f"{seed}-{q['id']}"), paragraphs, exclude | {distractor}, q["answers"]
        )
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "answers": q["answers"],
                "paragraph_ids": {"gold": q["gold"], "distractor": distractor, "random": rnd},
                "texts": {"gold": texts[q["gold"]], "distractor": texts[distractor], "random": texts[rnd]},
            }
        )
    return items, ret


def relevance(items: list[dict], ret: Any, device: str | None) -> None:
    """BM25 and MiniLM relevance of each item's three paragraphs to its question (in place)."""
    if isinstance(ret, BM25Retriever):
        bm25 = ret
    else:
        paragraphs, _ = common.squad_data()
        bm25 = BM25Retriever([p["text"] for p in paragraphs])
    minilm = ret if isinstance(ret, DenseRetriever) else DenseRetriever(device=device)
    queries = [it["question"] for it in items for _ in DOCS]
    texts = [it["texts"][d] for it in items for d in DOCS]
    cos = iter(minilm.pair_scores(queries, texts))
    for it in items:
        b = bm25.score_ids(it["question"], [it["paragraph_ids"][d] for d in DOCS])
        for d, s in zip(DOCS, b):
            it.setdefault("utility", {}).setdefault(d, {})["bm25"] = s
            it["utility"][d]["minilm"] = next(cos)


def summarize(items: list[dict]) -> dict:
    """Win-rates, sign tests and answer accuracy from the per-item records."""
    win = {
        o: {
            m: common.win_counts([it["utility"]["gold"][m] for it in items], [it["utility"][o][m] for it in items])
            for m in METRICS
        }
        for o in OTHERS
    }
    tests = {}
    for o in OTHERS:
        for a, b in SIGN_TESTS:
            wa = [it["utility"]["gold"][a] > it["utility"][o][a] for it in items]
            wb = [it["utility"]["gold"][b] > it["utility"][o][b] for it in items]
            tests.setdefault(o, {})[f"{a} vs {b}"] = common.sign_test(wa, wb)
    acc = {d: sum(it["correct"][d] for it in items) / len(items) for d in DOCS}
    # the same win-rates on the questions the model answers correctly from the gold paragraph
    ok = [it for it in items if it["correct"]["gold"]]
    win_ok = {
        o: {
            m: common.win_counts([it["utility"]["gold"][m] for it in ok], [it["utility"][o][m] for it in ok])
            for m in METRICS
        }
        for o in OTHERS
    }
    return {"win_rate": win, "sign_test": tests, "accuracy": acc, "win_rate_gold_answered": win_ok}


def run(
    *,
    model: Any = common.DEFAULT_MODEL,
    limit: int | None = 100,
    seed: int = 0,
    retriever: str = "bm25",
    max_new_tokens: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    batch: int = 8,
    threads: int | None = None,
    out_dir: str | None = None,
    write: bool = True,
    command: str | None = None,
) -> dict:
    """Table 1 on ``limit`` SQuAD dev questions (sampled with ``seed``); see the module docstring."""
    clock = common.Clock()
    common.set_threads(threads)
    scorer = common.build_scorer(common.one_model(model, "winrate"), max_new_tokens, device, dtype)
    items, ret = build_items(limit, seed, retriever, device)
    relevance(items, ret, device)
    bar = common.progress(len(items), "winrate")
    for chunk in common.chunks(items, batch):
        scored = scorer.score_batch([(it["question"], [it["texts"][d] for d in DOCS]) for it in chunk])
        for it, results in zip(chunk, scored):
            for d, r in zip(DOCS, results):
                it["utility"][d].update(r.variants)
                it.setdefault("answer", {})[d] = r.answer
                it.setdefault("correct", {})[d] = common.is_correct(r.answer, it["answers"])
        bar.update(len(chunk))
    bar.close()
    result = {
        "experiment": "winrate",
        "models": common.model_names([scorer]),
        "n": len(items),
        "unit": "SQuAD dev questions",
        "config": {
            "limit": limit,
            "seed": seed,
            "retriever": retriever,
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


def _rate_ci(w: dict) -> str:
    lo, hi = common.proportion_ci(w["rate"], w["n"])
    return f"{common.fmt(w['rate'], pct=True)} [{common.fmt(lo, pct=True)}–{common.fmt(hi, pct=True)}]"


def markdown(result: dict) -> str:
    s = result["summary"]
    rows = []
    for m in METRICS:
        paper = [f"{PAPER[k]['distractor']} / {PAPER[k]['random']}" if m == "key_entropy" else "n/a" for k in PAPER]
        ok = s["win_rate_gold_answered"]
        rows.append(
            [common.METRIC_LABELS[m]]
            + [_rate_ci(s["win_rate"][o][m]) for o in OTHERS]
            + [f"{s['win_rate']['distractor'][m]['ties']} / {s['win_rate']['random'][m]['ties']}"]
            + [" / ".join(common.fmt(ok[o][m]["rate"], pct=True) for o in OTHERS)]
            + paper
        )
    n_ok = s["win_rate_gold_answered"]["distractor"]["key_entropy"]["n"]
    table = common.md_table(
        [
            "metric",
            "win-rate vs distractor (%) [95% CI]",
            "win-rate vs random (%) [95% CI]",
            "ties (dist. / rand.)",
            f"same, questions answered from gold (n={n_ok}; dist. / rand., %)",
        ]
        + [f"paper {k}, SQuAD (dist. / rand., %)" for k in PAPER],
        rows,
    )
    tests = common.md_table(
        ["comparison", "vs", "n10 (first only)", "n01 (second only)", "sign-test p"],
        [[k, o, t["n10"], t["n01"], common.fmt_p(t["p"])] for o in OTHERS for k, t in s["sign_test"][o].items()],
    )
    acc = "answer accuracy of the model with each paragraph alone: " + ", ".join(
        f"{d} {common.fmt(v, pct=True)} %" for d, v in s["accuracy"].items()
    )
    return (
        common.header(result, "Win-rate of the gold paragraph (GROGU paper, Table 1 protocol, SQuAD v1.1 dev)")
        + "\n"
        + table
        + "\n\n"
        + tests
        + "\n\n"
        + acc
        + "\n"
    )


def plot(result: dict, path: str) -> None:
    s = result["summary"]["win_rate"]
    common.bar_plot(
        path,
        {f"gold vs {o}": {m: s[o][m]["rate"] for m in METRICS} for o in OTHERS},
        f"Win-rate of the gold paragraph — {', '.join(result['models'])}, N={result['n']}",
        "win-rate",
        hline=0.5,
    )
