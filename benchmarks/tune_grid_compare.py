"""Tune's small grid against the full grid, on the committed seed-8 validation records (words judge only).

The question: does ``grogu tune`` choose better on held-out questions when it tries 26 settings
(:func:`grogu.apps.tune.replay.small_grid`, the default) than when it tries about 1,200
(:func:`grogu.apps.tune.replay.grid`)? With ~50 labelled questions, more challengers mean more chances to
win the folds by luck.

Records: ``results/tune_validation_seed8/records_<data>_<prompt>_{tune,eval}.jsonl`` (SmolLM2-135M, two QA
prompts, SQuAD and NQ-open; every candidate of every question answered). They predate the dense judge,
so everything here is judged by whole words (``choose_by="words"``): recomputing the dense judge needs the
model. Each set's 150 questions are replayed once on the full grid; the small grid's outcomes are a subset.

Two comparisons, each with the rule tune ships (incumbent: the shipped default; 5 folds; no cost cap):

- **Committed split**: tune on the 50 tuning questions, judge the chosen setting on the 100 evaluation
  questions against the retriever's order (keep) and against the shipped default. Paired differences,
  90 % paired-bootstrap intervals (:func:`grogu.apps.tune.gain.paired`: 10,000 resamples, seed 0), per
  set and pooled over the four (400 questions). Also the *unguarded* pick (the rule's pick on all 50,
  with no guard), which shows what each grid's best-on-50 is worth on new questions.
- **Repeated splits**: each set's 150 questions split at random into 50 to tune and 100 to judge,
  ``SPLITS`` times (seeds 0, 1, ...), the same procedure. The splits overlap, so their spread is no
  interval; the mean and how often each grid's choice does better say how stable the committed split's
  figure is.

    OMP_NUM_THREADS=1 python benchmarks/tune_grid_compare.py        # writes results/tune_grid_compare.json
"""

from __future__ import annotations

import json
import os
import random
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDS = os.path.join(HERE, "results", "tune_validation_seed8")
OUT = os.path.join(HERE, "results", "tune_grid_compare.json")
SETS = [(d, p) for d in ("squad", "nq") for p in ("llamaindex", "readme")]
N_TUNE = 50
SPLITS = int(os.environ.get("TUNE_GRID_SPLITS", "100"))


def read(name: str) -> list[dict]:
    with open(os.path.join(RECORDS, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def diffs(out, a: list[int], b: list[int], rows: list[int]) -> list[float]:
    """Per question: arm a right minus arm b right (a[r], b[r]: each arm's setting on record r)."""
    return [int(out.correct[a[r]][r]) - int(out.correct[b[r]][r]) for r in rows]


def run_rule(out, tune_rows: list[int], judge_rows: list[int]) -> dict:
    """Tune on ``tune_rows`` (the shipped rule, words), then the chosen and the unguarded pick on ``judge_rows``."""
    from grogu.apps.tune.choose import decide, pick
    from grogu.apps.tune.replay import SHIPPED, setting_name

    result = decide(out, tune_rows, max_cost=None, folds=5, incumbent="shipped", choose_by="words")
    shipped = out.settings.index(SHIPPED)
    unguarded = pick(out, tune_rows, None, shipped, "words")
    n = len(out.ids)
    keep, ship = [0] * n, [shipped] * n
    cv = result.evidence["cross_validation"]
    return {
        "decision": result.decision,
        "setting": setting_name(out.settings[result.chosen]),
        "cv": {"wins": cv["wins"], "losses": cv["losses"], "p_one_sided": cv["p_one_sided"]},
        "unguarded_setting": setting_name(out.settings[unguarded]),
        "_chosen": result.chosen,
        "_unguarded": unguarded,
        "_vs_keep": diffs(out, [result.chosen] * n, keep, judge_rows),
        "_vs_shipped": diffs(out, [result.chosen] * n, ship, judge_rows),
        "_unguarded_vs_keep": diffs(out, [unguarded] * n, keep, judge_rows),
        "_unguarded_vs_shipped": diffs(out, [unguarded] * n, ship, judge_rows),
    }


def summarise(d: list[float]) -> dict:
    from grogu.apps.tune.gain import paired

    g = paired(d)
    wins, losses = sum(x > 0 for x in d), sum(x < 0 for x in d)
    return {k: g[k] for k in ("n", "mean", "low", "high")} | {"wins": wins, "losses": losses}


def public(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def main() -> None:
    from grogu.apps.tune.judging import answered_words, judgeable
    from grogu.apps.tune.replay import grid, outcomes, small_grid

    t0 = time.perf_counter()
    small, full = small_grid(), grid()
    report: dict = {
        "question": "held-out effect of tune's choice with the small grid against the full grid (words judge)",
        "records": os.path.relpath(RECORDS, HERE),
        "rule": "incumbent: the shipped default; 5 folds; no cost cap; choose_by='words' (the records lack the "
        "dense judge)",
        "grids": {"small": len(small), "full": len(full)},
        "method": "paired differences per question (right = 1, wrong = 0); 90 % paired-bootstrap percentile "
        "intervals, 10,000 resamples, seed 0 (grogu.apps.tune.gain.paired)",
        "committed_split": {"sets": []},
        "repeated_splits": {"splits": SPLITS, "sets": []},
    }
    pooled = {
        g: {k: [] for k in ("vs_keep", "vs_shipped", "unguarded_vs_keep", "unguarded_vs_shipped")}
        for g in ("small", "full")
    }
    pooled_small_minus_full: list[float] = []
    rep_pooled = {
        g: {"adopted": 0, "vs_keep": [], "vs_shipped": [], "unguarded_vs_shipped": []} for g in ("small", "full")
    }
    rep_cmp = {"small_better": 0, "full_better": 0, "equal": 0, "diffs": []}
    for data, prompt in SETS:
        tune_recs = read(f"records_{data}_{prompt}_tune.jsonl")
        eval_recs = read(f"records_{data}_{prompt}_eval.jsonl")
        recs = tune_recs + eval_recs
        out_full = outcomes(recs, answered_words, full)
        outs = {"small": out_full.only(small), "full": out_full}
        judged = [r for r, rec in enumerate(recs) if judgeable(rec["answers"])]
        tune_rows = [r for r in judged if r < len(tune_recs)]
        eval_rows = [r for r in judged if r >= len(tune_recs)]
        entry = {"data": data, "prompt": prompt, "tune": len(tune_rows), "judge": len(eval_rows)}
        chosen_cols = {}
        for g, out in outs.items():
            res = run_rule(out, tune_rows, eval_rows)
            chosen_cols[g] = (out, res["_chosen"])
            for k in pooled[g]:
                pooled[g][k] += res[f"_{k}"]
            entry[g] = public(res) | {
                "held_out_vs_keep": summarise(res["_vs_keep"]),
                "held_out_vs_shipped": summarise(res["_vs_shipped"]),
                "unguarded_vs_keep": summarise(res["_unguarded_vs_keep"]),
                "unguarded_vs_shipped": summarise(res["_unguarded_vs_shipped"]),
            }
        (o_s, c_s), (o_f, c_f) = chosen_cols["small"], chosen_cols["full"]
        smf = [int(o_s.correct[c_s][r]) - int(o_f.correct[c_f][r]) for r in eval_rows]
        pooled_small_minus_full += smf
        entry["small_minus_full"] = summarise(smf)
        report["committed_split"]["sets"].append(entry)
        print(json.dumps({k: entry[k] for k in ("data", "prompt", "small_minus_full")}), flush=True)

        # repeated random splits of the same 150 questions
        rep = {"data": data, "prompt": prompt, "small": {"adopted": 0}, "full": {"adopted": 0}}
        per = {g: {"vs_keep": [], "vs_shipped": []} for g in outs}
        set_cmp = []
        for seed in range(SPLITS):
            order = judged[:]
            random.Random(seed).shuffle(order)
            t_rows, j_rows = sorted(order[:N_TUNE]), sorted(order[N_TUNE:])
            means = {}
            for g, out in outs.items():
                res = run_rule(out, t_rows, j_rows)
                adopted = res["decision"] != "default"
                rep[g]["adopted"] += adopted
                rep_pooled[g]["adopted"] += adopted
                for k in ("vs_keep", "vs_shipped"):
                    m = sum(res[f"_{k}"]) / len(j_rows)
                    per[g][k].append(m)
                    rep_pooled[g][k].append(m)
                rep_pooled[g]["unguarded_vs_shipped"].append(sum(res["_unguarded_vs_shipped"]) / len(j_rows))
                means[g] = sum(res["_vs_keep"]) / len(j_rows)
            d = means["small"] - means["full"]
            set_cmp.append(d)
            rep_cmp["diffs"].append(d)
            key = "small_better" if d > 1e-12 else "full_better" if d < -1e-12 else "equal"
            rep_cmp[key] += 1
        for g in outs:
            rep[g] |= {k: sum(v) / len(v) for k, v in per[g].items()}
        rep["small_minus_full_mean"] = sum(set_cmp) / len(set_cmp)
        report["repeated_splits"]["sets"].append(rep)
    report["committed_split"]["pooled"] = {g: {k: summarise(v) for k, v in pooled[g].items()} for g in pooled} | {
        "small_minus_full": summarise(pooled_small_minus_full)
    }
    n_runs = SPLITS * len(SETS)
    report["repeated_splits"]["pooled"] = {
        g: {
            "adopted_share": rep_pooled[g]["adopted"] / n_runs,
            "vs_keep_mean": sum(rep_pooled[g]["vs_keep"]) / n_runs,
            "vs_shipped_mean": sum(rep_pooled[g]["vs_shipped"]) / n_runs,
            "unguarded_vs_shipped_mean": sum(rep_pooled[g]["unguarded_vs_shipped"]) / n_runs,
        }
        for g in rep_pooled
    } | {
        "small_minus_full": {
            "mean": sum(rep_cmp["diffs"]) / n_runs,
            "small_better": rep_cmp["small_better"],
            "full_better": rep_cmp["full_better"],
            "equal": rep_cmp["equal"],
        }
    }
    report["seconds"] = round(time.perf_counter() - t0, 1)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(
        json.dumps(
            {"committed_split": report["committed_split"]["pooled"], "repeated": report["repeated_splits"]["pooled"]},
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
