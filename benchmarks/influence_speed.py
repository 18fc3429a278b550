"""Influence Score speed: the batched InfluenceScorer against the naive 2k+1 loop, same inputs, one run.

For k in {3, 5, 10} real SQuAD dev paragraphs per query (the question's own paragraph plus k - 1
random others, whole) and the packaged SmolLM2 (+ MiniLM embedder), exact Influence Score:
- naive: 2k+1 separate greedy generations (full, each leave-one-out, each single document), each
  answer embedded on its own, then the formula;
- engine: ``InfluenceScorer.score`` (all 2k+1 generations in one batched engine call, one embed call).
Both run on the same inputs, alternating which goes first; the table gives medians over the queries
of wall and CPU (process) seconds; on a shared machine the CPU time is the steadier figure. The last
column checks that both give the same scores.

A second table sets each influence method's cost against GROGU-scoring the same k documents
(``UtilityScorer.score`` at its defaults, what GroguRerank computes per document), same queries, same
run: exact with the answer generated, exact given that answer (the integrations' logging case: 2k
generations), and the forward-only methods given the answer (no generation at all):
leave_one_out_logprob (k + 1 passes) and contextcite (``--ablations`` passes). Each cell: median wall
seconds per query, its ratio to GROGU, and the prompt tokens the engine encoded (``prefill_tokens``,
after prefix sharing), which is what the cost follows on a CPU.

  OMP_NUM_THREADS=1 python benchmarks/influence_speed.py [--ks 3,5,10] [--queries 2] [--ablations 64] [--no-naive]
      [--json OUT.json]

``--json`` writes every query's times (both tables) with the run's meta (``record_meta``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings

import torch
from grogu_research.testing import squad_paragraphs

from grogu import Document, UtilityScorer
from grogu.metrics.influence import InfluenceScorer
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

#: every query's times, for --json
RECORD: dict[str, list[dict]] = {"naive_vs_engine": [], "against_grogu": []}


def naive(scorer: InfluenceScorer, query: str, docs: list[Document]) -> list[float]:
    def gen(ctx: list[Document]) -> str:
        prompt = scorer.prompts.grounded_ids(query, ctx) if ctx else scorer.prompts.ungrounded_ids(query)
        return scorer.target.generate([prompt], scorer.max_new_tokens)[0].text

    emb = lambda t: scorer.embedder.encode(t, convert_to_tensor=True)  # noqa: E731
    f = emb(gen(docs))
    cos = lambda t: float(torch.nn.functional.cosine_similarity(emb(t), f, dim=0))  # noqa: E731
    return [cos(gen([d])) - cos(gen(docs[:i] + docs[i + 1 :])) for i, d in enumerate(docs)]


def timed(fn):
    """(fn(), (wall seconds, CPU seconds of this process))."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - wall, time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="3,5,10")
    ap.add_argument("--queries", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--ablations", type=int, default=64, help="m of contextcite (ContextCite's default: 64)")
    ap.add_argument("--no-naive", action="store_true", help="only the table against GROGU-scoring")
    ap.add_argument("--json", help="write every query's times here, with the run's meta")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    scorer = InfluenceScorer(DEFAULT_MODEL, max_new_tokens=args.max_new_tokens, device="cpu")
    ks = [int(k) for k in args.ks.split(",")]
    paras = squad_paragraphs(max(ks) + args.queries, seed=7)
    query0, docs0 = paras[0]["question"], [Document(p["text"], p["title"]) for p in paras[:2]]
    scorer.score(query0, docs0), naive(scorer, query0, docs0)  # warm-up of both paths
    print(
        f"SmolLM2-135M-Instruct, CPU {torch.get_num_threads()} threads, max_new_tokens={args.max_new_tokens}, "
        f"{args.queries} SQuAD dev questions per k (median)"
    )
    print(
        "| k | generations | naive loop (s/query, wall / cpu) | engine (s/query, wall / cpu) "
        "| naive / engine (wall, cpu) | max |IS diff| |"
    )
    print("|---|---|---|---|---|---|")
    for k in [] if args.no_naive else ks:
        t_n, t_e, diff = [], [], 0.0
        for q in range(args.queries):
            query = paras[q]["question"]
            others = [p for i, p in enumerate(paras) if i != q][q : q + k - 1]
            docs = [Document(p["text"], p["title"]) for p in [paras[q]] + others]
            runs = [("engine", lambda: scorer.score(query, docs).scores), ("naive", lambda: naive(scorer, query, docs))]
            out = {}
            for name, fn in runs if q % 2 == 0 else runs[::-1]:
                out[name] = timed(fn)
            (res, te), (ref, tn) = out["engine"], out["naive"]
            t_e.append(te)
            t_n.append(tn)
            diff = max(diff, max(abs(a - b) for a, b in zip(res, ref)))
            RECORD["naive_vs_engine"].append(
                {
                    "k": k,
                    "q": q,
                    "naive_wall_s": tn[0],
                    "naive_cpu_s": tn[1],
                    "engine_wall_s": te[0],
                    "engine_cpu_s": te[1],
                    "max_is_diff": max(abs(a - b) for a, b in zip(res, ref)),
                }
            )
            print(f"  k={k} q{q}: naive {tn[0]:.1f} / {tn[1]:.1f} s, engine {te[0]:.1f} / {te[1]:.1f} s", flush=True)
        nw, nc = statistics.median(t[0] for t in t_n), statistics.median(t[1] for t in t_n)
        ew, ec = statistics.median(t[0] for t in t_e), statistics.median(t[1] for t in t_e)
        print(
            f"| {k} | {2 * k + 1} | {nw:.1f} / {nc:.1f} | {ew:.1f} / {ec:.1f} | {nw / ew:.1f}×, {nc / ec:.1f}× "
            f"| {diff:.1e} |",
            flush=True,
        )
    against_grogu(scorer, paras, ks, args)
    if args.json:
        settings = {k: v for k, v in vars(args).items() if v != ap.get_default(k) and k != "json"}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"meta": meta(settings=settings), "max_new_tokens": args.max_new_tokens, **RECORD}, f, indent=1)
            f.write("\n")


def against_grogu(scorer: InfluenceScorer, paras: list[dict], ks: list[int], args) -> None:
    """Each method's wall seconds and encoded prompt tokens per query against GROGU-scoring the same
    documents, all on one engine, alternating the order of the methods between queries."""
    engine = scorer.target
    grogu = UtilityScorer(engine)
    forward = {
        m: InfluenceScorer(
            engine,
            method=m,
            max_new_tokens=args.max_new_tokens,
            seed=0,
            n_ablations=args.ablations if m == "contextcite" else None,
        )
        for m in ("leave_one_out_logprob", "contextcite")
    }
    names = [
        "GROGU score",
        "exact",
        "exact, answer given",
        "leave_one_out_logprob, answer given",
        f"contextcite m={args.ablations}, answer given",
    ]
    print(
        f"\nAgainst GROGU-scoring the same documents (UtilityScorer defaults: {grogu.metric}, "
        f"max_new_tokens={grogu.max_new_tokens}); median s/query (x GROGU), prompt tokens encoded"
    )
    print("| k | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in ks:
        cells: dict[str, list[tuple[float, int]]] = {n: [] for n in names}
        for q in range(args.queries):
            query = paras[q]["question"]
            others = [p for i, p in enumerate(paras) if i != q][q : q + k - 1]
            docs = [Document(p["text"], p["title"]) for p in [paras[q]] + others]
            answer = engine.generate([scorer.prompts.grounded_ids(query, docs)], args.max_new_tokens)[0].text
            runs = [
                (names[0], lambda: grogu.score(query, docs)),
                (names[1], lambda: scorer.score(query, docs)),
                (names[2], lambda: scorer.score(query, docs, answer=answer)),
                (names[3], lambda: forward["leave_one_out_logprob"].score(query, docs, answer=answer)),
                (names[4], lambda: forward["contextcite"].score(query, docs, answer=answer)),
            ]
            for name, fn in runs if q % 2 == 0 else runs[::-1]:
                engine.prefill_tokens = 0
                _, (wall, _) = timed(fn)
                cells[name].append((wall, engine.prefill_tokens))
                RECORD["against_grogu"].append(
                    {"k": k, "q": q, "method": name, "wall_s": wall, "prefill_tokens": engine.prefill_tokens}
                )
            print(f"  k={k} q{q}: " + ", ".join(f"{n} {c[-1][0]:.1f} s" for n, c in cells.items()), flush=True)
        base = statistics.median(w for w, _ in cells[names[0]])
        row = []
        for n in names:
            wall = statistics.median(w for w, _ in cells[n])
            row.append(f"{wall:.1f} ({wall / base:.1f}x), {statistics.median(t for _, t in cells[n]):.0f}")
        print(f"| {k} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
