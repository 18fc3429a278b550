"""The dense judge added to earlier tune validations' records, and what it would have said there.

The tuning records of seeds 7 and 8 (``results/tune_validation*/records_*.jsonl``) were collected before tune
had a dense judge. Their candidates' answers are kept, so the judge can be added without answering
again: each candidate's gold answers are teacher-forced after its grounded prompt, through
``grogu.apps.tune.judging.gold_logliks``, the function collection calls. A candidate's prompt is rebuilt
from the record's documents and candidate order exactly as collection builds it (checked on the seed-9
records, which collection scored itself: ``check``).

These questions are not fresh: seeds 7 and 8 were judged before. The figures answer a narrower question:
on 50 tuning questions, how wide is each judge's interval of the shipped default's gain over the
retriever's order, and what would tune's current rule have chosen.

    OMP_NUM_THREADS=1 python benchmarks/tune_dense_rescore.py rescore --seed 8 --data squad --prompt readme
    python benchmarks/tune_dense_rescore.py check        # the rebuilt prompts give collection's values
    python benchmarks/tune_dense_rescore.py report       # results/tune_dense_rescore/report.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "tune_dense_rescore")
SEEDS = {7: "tune_validation", 8: "tune_validation_seed8"}
DATA, PROMPTS = ("squad", "nq"), ("llamaindex", "readme")
TOP_N, MAX_NEW_TOKENS = 3, 48


def records_path(folder: str, data: str, prompt: str, split: str) -> str:
    return os.path.join(HERE, "results", folder, f"records_{data}_{prompt}_{split}.jsonl")


def read(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scorer_for(prompt: str):
    """SmolLM2 on the CPU with the prompt's template and the validations' answer budget."""
    import torch
    from tune_validation import template

    import grogu
    from grogu.rerank.scorer import UtilityScorer

    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.get_engine((model, tokenizer))
    return UtilityScorer(engine, max_new_tokens=MAX_NEW_TOKENS, template=template(prompt, model, tokenizer))


def dense_values(scorer, rec: dict) -> list[float | None]:
    """Each candidate's dense judge, its grounded prompt rebuilt as collection builds it."""
    from grogu.apps.tune.collect import COLLECT_SETTINGS
    from grogu.apps.tune.judging import gold_logliks
    from grogu.rerank import pipeline as rerank_pipeline

    plan = rerank_pipeline.plan(
        rec["question"], list(rec["texts"]), TOP_N, None, COLLECT_SETTINGS, None, scorer.grounded_only
    )
    if [list(c) for c in plan.contexts] != [list(c) for c in rec["candidates"]]:
        raise ValueError(f"{rec['id']}: the plan's candidates differ from the record's")
    prompts = [scorer.prompts.grounded_ids(q, docs) for q, docs in plan.context_documents(plan.contexts)]
    return gold_logliks(scorer, prompts, [rec["answers"]] * len(prompts))


def rescore(args) -> None:
    warnings.filterwarnings("ignore")
    scorer = scorer_for(args.prompt)
    os.makedirs(OUT, exist_ok=True)
    for split in ("tune",):  # the 50 the intervals and tune's choice read; the 100 are judged by words
        src = records_path(SEEDS[args.seed], args.data, args.prompt, split)
        dst = os.path.join(OUT, f"seed{args.seed}_{args.data}_{args.prompt}_{split}.jsonl")
        done = {r["id"] for r in read(dst)} if os.path.exists(dst) else set()
        with open(dst, "a", encoding="utf-8") as f:
            for rec in read(src):
                if rec["id"] in done:
                    continue
                values = dense_values(scorer, rec)
                rec["scored"] = [{**row, "gold_loglik": v} for row, v in zip(rec["scored"], values)]
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                f.flush()
        print(f"seed {args.seed} {args.data}/{args.prompt}/{split}: {dst}", flush=True)


def check(args) -> None:
    """The rebuilt prompts give the values collection stored on the seed-9 records (first ``--n``)."""
    warnings.filterwarnings("ignore")
    worst = 0.0
    for prompt in PROMPTS:
        path = records_path("tune_validation_seed9", "squad", prompt, "tune")
        scorer = scorer_for(prompt)
        for rec in read(path)[: args.n]:
            got = dense_values(scorer, rec)
            want = [row["gold_loglik"] for row in rec["scored"]]
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want) if a is not None and b is not None))
    print(json.dumps({"records": 2 * args.n, "max_abs_diff": worst}))
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "check.json"), "w") as f:
        json.dump({"records": 2 * args.n, "max_abs_diff": worst}, f, indent=1)


def report(args) -> None:
    """Per set: each judge's 90 % interval of the default's gain over keep on the 50 tuning questions, and
    what tune's current rule chooses from them, judged on the 100 (whole words)."""
    from tune_validation import compare, interval_of

    from grogu.apps.tune.choose import choose
    from grogu.apps.tune.judging import answered_words, judgeable
    from grogu.apps.tune.replay import KEEP, SHIPPED, outcomes

    sets = []
    for seed in SEEDS:
        for data in DATA:
            for prompt in PROMPTS:
                path = os.path.join(OUT, f"seed{seed}_{data}_{prompt}_tune.jsonl")
                if not os.path.exists(path):
                    continue
                tune_recs, eval_recs = read(path), read(records_path(SEEDS[seed], data, prompt, "eval"))
                t = outcomes(tune_recs, answered_words, [KEEP, SHIPPED])
                rows = [r for r, rec in enumerate(tune_recs) if judgeable(rec["answers"])]
                words = interval_of([int(t.correct[1][r]) - int(t.correct[0][r]) for r in rows])
                dense = interval_of([t.loglik[1][r] - t.loglik[0][r] for r in rows])
                chosen = choose(tune_recs)
                e = outcomes(eval_recs, answered_words, [KEEP, SHIPPED, chosen.settings])
                e_rows = [r for r, rec in enumerate(eval_recs) if judgeable(rec["answers"])]
                acc = {i: sum(e.correct[i][r] for r in e_rows) for i in (0, 1)}
                best = [i for i in (0, 1) if acc[i] == max(acc.values())]
                sets.append(
                    {
                        "seed": seed,
                        "data": data,
                        "prompt": prompt,
                        "default_vs_keep_on_50": {"words": words, "dense": dense},
                        "tune_decision": chosen.decision,
                        "tune_setting": chosen.evidence["chosen"],
                        "tune_line": (chosen.evidence.get("gain") or {}).get("line"),
                        "on_100": {
                            "tuned_vs_keep": compare(e, e_rows, 2, 0),
                            "tuned_vs_shipped": compare(e, e_rows, 2, 1),
                            "shipped_vs_keep": compare(e, e_rows, 1, 0),
                            "better": [("keep", "shipped")[i] for i in best],
                            "tuned_never_loses_to_better": all(
                                compare(e, e_rows, 2, i)["wins"] >= compare(e, e_rows, 2, i)["losses"] for i in best
                            ),
                        },
                    }
                )
                print(json.dumps({k: sets[-1][k] for k in ("seed", "data", "prompt", "tune_decision")}), flush=True)
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump({"sets": sets}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rescore")
    r.add_argument("--seed", type=int, choices=list(SEEDS), required=True)
    r.add_argument("--data", choices=DATA, required=True)
    r.add_argument("--prompt", choices=PROMPTS, required=True)
    c = sub.add_parser("check")
    c.add_argument("--n", type=int, default=5)
    sub.add_parser("report")
    args = ap.parse_args()
    {"rescore": rescore, "check": check, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
