"""Is the audit's reference-free verdict right? Its ranking of retrieval set-ups against the ranking by
the target LLM's gold-answer accuracy, on SQuAD, NQ-open (or the MuSiQue sample), and its speed.

Set-ups over one pool of paragraphs (SQuAD dev: all 2,067; NQ-open: every question's gold passage;
MuSiQue: its 1,890), differing in a known way: ``random-3`` (3 paragraphs drawn at random, seeded),
``bm25-3`` (grogu BM25), ``minilm-1`` / ``minilm-3`` / ``minilm-5`` (the packaged all-MiniLM-L6-v2, top
1 / 3 / 5), ``minilm-2to4`` (its ranks 2-4: related passages, the top one left out) and, with
``--chunk-words N``, ``minilm-3-chunkN`` (MiniLM top 3 over chunks of about N words, cut at sentence ends).
``records_*.jsonl``: per question, each set-up's answer, whether it is right and every signal the audit
read (``benchmarks/audit_signals.py`` judges the signals from them).

The audit (:func:`grogu.apps.audit.audit`, contexts only) scores each set-up's context per query. The answer
the target LLM generates while a context is scored is its answer from that context, so the gold accuracy
is read from the same run: a question is answered when a gold answer's normalised words occur, whole, in
the normalised answer (short answer style: the answer is cut at its first sentence, so length cannot buy
accuracy). For every pair of set-ups: the accuracy difference with McNemar's exact test on the discordant
questions, and the audit's verdict (the sign of the mean difference of its headline signal) with its sign-flip p-value.
Agreement = the share of pairs with a significant accuracy difference (p < 0.05) where the audit's
verdict has the same sign; Kendall's tau between the set-ups' mean signal and their accuracy.

Speed: the first ``--speed-contexts`` contexts of the audit, in this run, computed naively (``grogu_research.naive``:
generate, then two forward passes, one context at a time), scored one at a time
(``UtilityScorer.score_context`` in a loop) and batched as the audit scores them.

    OMP_NUM_THREADS=1 python benchmarks/audit_validation.py --questions 100 --out runs/audit_validation
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(__file__))
from record_meta import meta, write_sidecar  # noqa: E402


def whole_words(answer: str, golds: list[str]) -> bool:
    from pipeline_accuracy import normalize

    out = f" {normalize(answer)} "
    return any(normalize(g) and f" {normalize(g)} " in out for g in golds)


def chunks(pool: list[dict], words: int) -> list[dict]:
    """Each paragraph cut into chunks of about ``words`` words at sentence ends."""
    out = []
    for p in pool:
        sentences, cur = re.split(r"(?<=[.!?])\s+", p["text"]), []
        for s in sentences:
            cur.append(s)
            if sum(len(x.split()) for x in cur) >= words:
                out.append({"title": p["title"], "text": " ".join(cur)})
                cur = []
        if cur:
            out.append({"title": p["title"], "text": " ".join(cur)})
    return out


def build_setups(pool: list[dict], questions: list[dict], seed: int, chunk_words: int | None) -> list:
    from grogu.apps.audit import Setup
    from grogu.apps.audit.setups import document
    from grogu.rerank.retrieval import BM25Retriever, DenseRetriever, retrieve_all

    qs = [q["question"] for q in questions]
    by_text = {p["text"]: p for p in pool}
    doc = lambda t, src=by_text: document({"text": t, "title": src[t]["title"]})  # noqa: E731
    setups = {}
    rng = random.Random(seed)
    setups["random-3"] = {
        q: [document({"text": p["text"], "title": p["title"]}) for p in rng.sample(pool, 3)] for q in qs
    }
    texts = [p["text"] for p in pool]
    setups["bm25-3"] = {q: [doc(t) for t in r] for q, r in zip(qs, retrieve_all(BM25Retriever(texts), qs, 3))}
    dense = retrieve_all(DenseRetriever(texts, cache=True), qs, 5)
    for k in (1, 3, 5):
        setups[f"minilm-{k}"] = {q: [doc(t) for t in r[:k]] for q, r in zip(qs, dense)}
    setups["minilm-2to4"] = {q: [doc(t) for t in r[1:4]] for q, r in zip(qs, dense)}  # the top one left out
    if chunk_words:
        cpool = chunks(pool, chunk_words)
        ctext = {c["text"]: c for c in cpool}
        got = retrieve_all(DenseRetriever([c["text"] for c in cpool], cache=True), qs, 3)
        setups[f"minilm-3-chunk{chunk_words}"] = {q: [doc(t, ctext) for t in r] for q, r in zip(qs, got)}
    return [Setup(name, runs) for name, runs in setups.items()]


def records(summary: dict, questions: list[dict], data: str, model: str) -> list[dict]:
    """One record per question: each set-up's (and no document's) answer, whether it holds a gold answer,
    and every signal the audit read from it."""
    by_q = {q["question"]: q for q in questions}
    out = []
    for r in summary["queries"]:
        q = by_q[r["query"]]
        cells = {"no documents": r["baseline"], **r["setups"]}
        out.append(
            {
                "data": data,
                "model": model,
                "qid": q["qid"],
                "question": q["question"],
                "answers": q["answers"],
                "setups": {
                    s: {
                        "answer": c["answer"],
                        "correct": whole_words(c["answer"], q["answers"]),
                        "signals": c["signals"],
                    }
                    for s, c in cells.items()
                },
            }
        )
    return out


def pairwise(summary: dict, questions: list[dict]) -> tuple[list[dict], dict]:
    """Each pair of set-ups: gold accuracy (McNemar exact) against the audit's verdict, from ``summary.json``."""
    from scipy.stats import kendalltau

    from grogu.apps.audit import exact_sign_test

    golds = {q["question"]: q["answers"] for q in questions}
    names = list(summary["setups"])
    correct = {s: [whole_words(r["setups"][s]["answer"], golds[r["query"]]) for r in summary["queries"]] for s in names}
    acc = {s: sum(v) / len(v) for s, v in correct.items()}
    util = {s: summary["setups"][s]["mean"] for s in names}
    comps = {(c["a"], c["b"]): c for c in summary["comparisons"]}
    pairs = []
    for a, b in itertools.combinations(names, 2):
        c = comps.get((a, b)) or comps[(b, a)]
        diff = c["mean_diff"] if (c["a"], c["b"]) == (a, b) else -c["mean_diff"]
        wins = sum(x and not y for x, y in zip(correct[a], correct[b]))
        losses = sum(y and not x for x, y in zip(correct[a], correct[b]))
        pairs.append(
            {
                "a": a,
                "b": b,
                "n": len(correct[a]),
                "acc_a": acc[a],
                "acc_b": acc[b],
                "acc_only_a": wins,
                "acc_only_b": losses,
                "acc_p": exact_sign_test(wins, losses),
                "utility_diff": diff,
                "utility_p": c["p_value"],
                "agree": (diff > 0) == (acc[a] > acc[b]) if acc[a] != acc[b] else None,
            }
        )
    sig = [p for p in pairs if p["acc_p"] < 0.05]
    tau = kendalltau([util[s] for s in names], [acc[s] for s in names])
    result = {
        "accuracy": acc,
        "mean_utility": util,
        "kendall_tau": float(tau.statistic),
        "tau_p": float(tau.pvalue),
        "significant_pairs": len(sig),
        "agree_significant": sum(bool(p["agree"]) for p in sig),
        "all_pairs": len(pairs),
        "agree_all": sum(bool(p["agree"]) for p in pairs),
        "disagree_significant": [(p["a"], p["b"]) for p in sig if not p["agree"]],
    }
    return pairs, result


def speed(scorer, setups, queries, n: int, batch_size: int) -> dict:
    """Seconds for the same n contexts: the naive computation (grogu_research.naive: transformers' generate, then a
    grounded and an ungrounded forward pass, one context at a time), the scorer one context at a time
    (``score_context`` in a loop) and batched as the audit scores them; and their agreement."""
    from grogu_research.naive import naive_grogu_stats

    from grogu.apps.audit.core import plan_contexts, score_contexts
    from grogu.core.checks import check_documents

    contexts, texts = plan_contexts(setups, queries, None, False)
    contexts = contexts[:n]
    as_docs = lambda ks: [{"text": texts[k]["text"], "title": texts[k]["title"]} for k in ks]  # noqa: E731
    engine = scorer.target
    t0 = time.perf_counter()
    with engine.kernels():
        for q, ks in contexts:
            naive_grogu_stats(
                engine.model,
                [scorer.prompts.grounded_ids(q, check_documents(as_docs(ks)))],
                scorer.prompts.ungrounded_ids(q),
                scorer.max_new_tokens,
                engine.stop_token_ids,
                engine.pad_token_id,
            )
    t1 = time.perf_counter()
    one = [scorer.score_context(q, as_docs(ks)) for q, ks in contexts]
    t2 = time.perf_counter()
    batched = score_contexts(scorer, contexts, texts, batch_size=batch_size, progress=False)
    t3 = time.perf_counter()
    gaps = [abs(o.score - batched[c].score) for o, c in zip(one, contexts)]
    same_answer = sum(o.answer == batched[c].answer for o, c in zip(one, contexts))
    m = len(contexts)
    return {
        "contexts": m,
        "naive_s": t1 - t0,
        "one_at_a_time_s": t2 - t1,
        "batched_s": t3 - t2,
        "naive_per_s": m / (t1 - t0),
        "one_at_a_time_per_s": m / (t2 - t1),
        "batched_per_s": m / (t3 - t2),
        "ratio": (t2 - t1) / (t3 - t2),
        "ratio_naive": (t1 - t0) / (t3 - t2),
        "max_score_gap": max(gaps),
        "same_answers": same_answer,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default="squad", choices=("squad", "nq", "musique"))
    p.add_argument("--split", default="held", choices=("tune", "held"))
    p.add_argument("--data-file", default=None, help="nq: the nq-open-oracle.jsonl.gz file")
    p.add_argument("--exclude", nargs="*", default=[], help="earlier samples' records (qid): left out")
    p.add_argument("--answer-style", default="short", choices=("short", "long"))
    p.add_argument("--signal", default=None, help="the audit's headline signal (default: its default)")
    p.add_argument("--questions", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--chunk-words", type=int, default=None)
    p.add_argument("--speed-contexts", type=int, default=48)
    p.add_argument("--speed-only", action="store_true", help="time the speed arms only (no audit run)")
    p.add_argument("--out", default="runs/audit_validation")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    from pipeline_accuracy import excluded_ids, musique_questions, nq_questions, squad_questions

    import grogu
    from grogu.apps import cli

    exclude = excluded_ids(args.exclude)
    if args.data == "squad":
        pool, questions = squad_questions(args.split, args.questions, args.seed, exclude)
    elif args.data == "nq":
        pool, questions = nq_questions(args.split, args.questions, args.seed, args.data_file, exclude)
    else:
        pool, questions = musique_questions(args.split, args.questions)
    setups = build_setups(pool, questions, args.seed, args.chunk_words)
    os.makedirs(args.out, exist_ok=True)
    for s in setups:  # the set-ups as grogu audit reads them
        with open(os.path.join(args.out, f"{s.name}.jsonl"), "w", encoding="utf-8") as f:
            for q, docs in s.runs.items():
                f.write(
                    json.dumps(
                        {"query": q, "documents": [{k: d[k] for k in ("text", "title")} for d in docs]},
                        ensure_ascii=False,
                    )
                    + "\n"
                )
    queries = [q["question"] for q in questions]
    spd = None
    if args.speed_contexts:
        scorer = grogu.UtilityScorer(args.model, device="cpu", answer_style="short")
        spd = speed(scorer, setups, queries, args.speed_contexts, args.batch_size)
        print(json.dumps(spd, indent=1))
        if args.speed_only:
            return
    # the audit itself, through the command line, on the set-up files just written
    report = os.path.join(args.out, "report")
    cli.main(
        [
            "audit",
            *[f"--setup={s.name}={os.path.join(args.out, s.name + '.jsonl')}" for s in setups],
            "--no-documents",
            "--answer-style",
            args.answer_style,
            "--model",
            args.model,
            "--device",
            "cpu",
            "--batch-size",
            str(args.batch_size),
            "--seed",
            str(args.seed),
            "--out",
            report,
            *(["--signal", args.signal] if args.signal else []),
            "--title",
            f"grogu audit: {args.data}, {len(queries)} questions",
        ]
    )
    with open(os.path.join(report, "summary.json"), encoding="utf-8") as f:
        audited = json.load(f)
    pairs, summary = pairwise(audited, questions)
    tag = f"{args.data}_{args.split}_{os.path.basename(args.model)}" + ("_long" if args.answer_style == "long" else "")
    with open(os.path.join(args.out, f"records_{tag}.jsonl"), "w", encoding="utf-8") as f:
        model_tag = audited["model"] + ("-long" if args.answer_style == "long" else "")
        for rec in records(audited, questions, args.data, model_tag):
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
    write_sidecar(os.path.join(args.out, f"records_{tag}.jsonl"), settings)
    out = {
        "data": args.data,
        "split": args.split,
        "model": audited["model"],
        "n": len(queries),
        "summary": summary,
        "pairs": pairs,
        "speed": spd,
        "timing": audited["timing"],
        "args": vars(args),
        "meta": meta(settings=settings),
    }
    with open(os.path.join(args.out, f"validation_{tag}.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"{args.data}, {audited['model']}, n = {len(queries)}")
    print(f"{'set-up':<22}{'mean signal':>14}{'accuracy':>10}")
    for s in audited["ranking"]:
        print(f"{s:<22}{summary['mean_utility'][s]:>+14.4f}{summary['accuracy'][s]:>10.3f}")
    print(f"{'a':<20}{'b':<20}{'acc a':>7}{'acc b':>7}{'only a/b':>9}{'acc p':>8}{'util a-b':>10}{'util p':>8}  agree")
    for r in pairs:
        print(
            f"{r['a']:<20}{r['b']:<20}{r['acc_a']:>7.3f}{r['acc_b']:>7.3f}{r['acc_only_a']:>5}/{r['acc_only_b']:<3}"
            f"{r['acc_p']:>8.3g}{r['utility_diff']:>+10.4f}{r['utility_p']:>8.3g}  {r['agree']}"
        )
    print(
        f"significant pairs (accuracy, p < 0.05): {summary['agree_significant']}/{summary['significant_pairs']} agree; "
        f"all pairs: {summary['agree_all']}/{summary['all_pairs']}; Kendall tau {summary['kendall_tau']:+.3f} "
        f"(p = {summary['tau_p']:.3g}); disagreeing: {summary['disagree_significant']}"
    )
    if spd:
        print(
            f"speed: {spd['contexts']} contexts, naive {spd.get('naive_per_s', float('nan')):.2f}/s, one at a time "
            f"{spd['one_at_a_time_per_s']:.2f}/s, batched {spd['batched_per_s']:.2f}/s, ratio {spd['ratio']:.2f}x "
            f"(naive: {spd.get('ratio_naive', float('nan')):.2f}x); max score gap {spd['max_score_gap']:.2e}, "
            f"same answers {spd['same_answers']}/{spd['contexts']}"
        )


if __name__ == "__main__":
    main()
