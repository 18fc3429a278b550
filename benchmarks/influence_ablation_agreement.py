"""Influence Score: the ablation estimate (m random ablations + LASSO, ContextCite-style) against the
exact score (2k + 1 generations), on real SQuAD dev questions with k = 16 documents each.

Per question: the gold paragraph plus 15 other paragraphs of the same Wikipedia article (so several
are on topic), in a seeded random order; the packaged SmolLM2-135M-Instruct and all-MiniLM-L6-v2.
Every paragraph is cut to its leading sentences of at most ``--doc-words`` words (default 40: one or
two sentences), and the question is one whose answer lies in the kept part of the gold paragraph:
whole paragraphs (about 160 tokens each, 2.6k per context) make the exact score alone take well over
ten minutes per question on one CPU thread.
- exact: ``InfluenceScorer(method="exact")``, 2k + 1 = 33 generations in one batched engine call;
- ablation: ``InfluenceScorer(method="ablation", n_ablations=m)`` for each m, m + 1 generations.
Reported per m: mean (and median) Spearman rho between the estimate and the exact scores across
questions (scipy.stats.spearmanr, ties averaged), how often each ranks the gold paragraph first and
how often both put the same document first (ties broken at random: expected counts), and the median
time per question.

The masks of n_ablations=m are the first m rows of those of a larger m with the same seed, so the
largest m is generated once and the smaller ones are fitted on its first rows (their answers are the
same greedy generations); the smaller m are timed by running them for real on the first
``--time-questions`` questions.

Times are wall and CPU (process) seconds; on a shared machine the CPU time is the steadier figure.

  OMP_NUM_THREADS=1 python benchmarks/influence_ablation_agreement.py [--questions 4] [--ms 16,32]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import sys
import time
import warnings
from collections import defaultdict

import numpy as np
import torch
from grogu_research.testing import squad_paragraphs
from scipy.stats import spearmanr

from grogu import Document
from grogu.metrics.influence import InfluenceScorer, fit_ablation_surrogate
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import write_sidecar  # noqa: E402


def lead(text: str, words: int) -> str:
    """The leading sentences of ``text`` with at most ``words`` words (the first ``words`` words when
    the first sentence alone is longer)."""
    out: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", text.strip()):
        if len(" ".join(out + [sentence]).split()) > words:
            break
        out.append(sentence)
    return " ".join(out) if out else " ".join(text.split()[:words])


def questions(n: int, k: int, seed: int, words: int) -> list[tuple[str, list[Document], int]]:
    """n (question, k documents, index of the gold one), one per article with >= k paragraphs: a
    random paragraph with a question answerable from its lead (``lead(text, words)``), that lead and
    the leads of k - 1 other paragraphs of the article, shuffled."""
    by_title: dict[str, list[dict]] = defaultdict(list)
    for p in squad_paragraphs():
        by_title[p["title"]].append(p)
    rng = random.Random(seed)
    titles = sorted(t for t, ps in by_title.items() if len(ps) >= k)
    rng.shuffle(titles)
    out = []
    for title in titles:
        paras = by_title[title]
        leads = [lead(p["text"], words) for p in paras]
        answerable = [
            (i, qa["question"])
            for i, p in enumerate(paras)
            for qa in p["qas"]
            if qa["answers"][0]["answer_start"] + len(qa["answers"][0]["text"]) <= len(leads[i])
        ]
        if not answerable:
            continue
        gold, question = rng.choice(answerable)
        order = [gold] + rng.sample([i for i in range(len(paras)) if i != gold], k - 1)
        rng.shuffle(order)
        out.append((question, [Document(leads[i], paras[i]["title"]) for i in order], order.index(gold)))
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} articles have >= {k} paragraphs and an answerable lead")


def timed(fn):
    """(fn(), (wall seconds, CPU seconds of this process))."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, (time.perf_counter() - wall, time.process_time() - cpu)


def top(scores) -> set[int]:
    """Indices of the (tied) best scores."""
    best = max(scores)
    return {i for i, x in enumerate(scores) if x >= best - 1e-9}


def same_first(a, b) -> float:
    """Chance that a and b put the same document first, ties broken at random: |A & B| / (|A| |B|)."""
    ta, tb = top(a), top(b)
    return len(ta & tb) / (len(ta) * len(tb))


def first_share(scores, index: int) -> float:
    """Chance that document ``index`` is ranked first, ties broken at random."""
    t = top(scores)
    return (index in t) / len(t)


def rho(a: list[float], b: list[float]) -> float:
    return float(spearmanr(a, b).statistic) if len(set(a)) > 1 and len(set(b)) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--ms", default="16,32")
    ap.add_argument("--alphas", default="0.01,0.001", help="LASSO penalties; the first is the scorer's")
    ap.add_argument("--time-questions", type=int, default=2, help="questions on which the smaller m are timed")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--doc-words", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dump", help="write each question's scores, answers and ablation data to this JSON file")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    ms = sorted(int(m) for m in args.ms.split(","))
    alphas = [float(a) for a in args.alphas.split(",")]
    exact = InfluenceScorer(DEFAULT_MODEL, max_new_tokens=args.max_new_tokens, device=args.device, method="exact")
    abl = {
        m: InfluenceScorer(
            exact.target,
            embedder=exact.embedder,
            max_new_tokens=args.max_new_tokens,
            method="ablation",
            n_ablations=m,
            seed=args.seed,
            lasso_alpha=alphas[0],
        )
        for m in ms
    }
    qs = questions(args.questions, args.k, args.seed, args.doc_words)
    exact.score("Warm-up?", [qs[0][1][0]])
    print(
        f"SmolLM2-135M-Instruct + all-MiniLM-L6-v2, {args.device}, {torch.get_num_threads()} threads, "
        f"k={args.k}, max_new_tokens={args.max_new_tokens}, {len(qs)} SQuAD dev questions, documents: leads "
        f"of <= {args.doc_words} words (mean {statistics.mean(len(d.text.split()) for _, ds, _ in qs for d in ds):.0f})",
        flush=True,
    )

    t_exact: list[tuple[float, float]] = []  # (wall, cpu) seconds per question
    t_abl: dict[int, list[tuple[float, float]]] = defaultdict(list)
    rhos: dict[tuple[int, float], list[float]] = defaultdict(list)
    top1: dict[tuple[int, float], list[float]] = defaultdict(list)  # estimate's first == exact's first
    gold1: dict[tuple[int, float], list[float]] = defaultdict(list)
    exact_gold1: list[float] = []
    dump = []
    for qi, (query, docs, gold) in enumerate(qs):
        full, t = timed(lambda: exact.score(query, docs))
        ref = full.scores
        t_exact.append(t)
        exact_gold1.append(first_share(ref, gold))
        big, t = timed(lambda: abl[ms[-1]].score(query, docs, return_ablations=True))
        t_abl[ms[-1]].append(t)
        masks, sims = np.array(big.ablations.masks), np.array(big.ablations.similarities)
        for m in ms:
            if m != ms[-1] and qi < args.time_questions:  # timed for real; same masks, same answers
                small, t = timed(lambda: abl[m].score(query, docs, return_ablations=True))
                t_abl[m].append(t)
                assert small.ablations.masks == masks[:m].tolist()
            for alpha in alphas:
                est, _ = fit_ablation_surrogate(masks[:m], sims[:m], alpha)
                if alpha == alphas[0] and m == ms[-1]:
                    assert np.allclose(est, big.scores)
                rhos[m, alpha].append(rho(est, ref))
                top1[m, alpha].append(same_first(est, ref))
                gold1[m, alpha].append(first_share(est, gold))
        if args.dump:
            dump.append(
                dict(
                    query=query,
                    documents=[d.text for d in docs],
                    gold=gold,
                    exact=ref,
                    answer=full.answer,
                    leave_one_out_answers=full.leave_one_out_answers,
                    single_answers=full.single_answers,
                    ablation=big.scores,
                    **vars(big.ablations),
                )
            )
            with open(args.dump, "w") as f:
                json.dump(dump, f, indent=1)
            if qi == 0:  # the dump is a list: its meta beside it
                write_sidecar(args.dump, {k: v for k, v in vars(args).items() if v != ap.get_default(k)})
        line = ", ".join(f"m={m}: {rhos[m, alphas[0]][-1]:+.2f}" for m in ms)
        print(
            f"q{qi}: exact {t_exact[-1][0]:.0f} s wall / {t_exact[-1][1]:.0f} s cpu, m={ms[-1]} "
            f"{t_abl[ms[-1]][-1][0]:.0f} / {t_abl[ms[-1]][-1][1]:.0f} s; gold first by exact: {exact_gold1[-1]:.2f}; "
            f"rho {line}  {query[:50]!r}",
            flush=True,
        )

    wall, cpu = (statistics.median(t[i] for t in t_exact) for i in (0, 1))
    print(
        f"\nexact (2k+1 = {2 * args.k + 1} generations): median {wall:.1f} s wall, {cpu:.1f} s cpu per question; "
        f"gold paragraph ranked first in {sum(exact_gold1):.1f}/{len(qs)}"
    )
    print(
        "| m | LASSO alpha | generations | mean Spearman ρ ± s.e. (median) | same top-1 as exact | gold first "
        "| s/question wall, cpu (median) | exact / ablation cpu time |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for m in ms:
        for alpha in alphas:
            r = [x for x in rhos[m, alpha] if x == x]
            se = statistics.stdev(r) / len(r) ** 0.5 if len(r) > 1 else float("nan")
            n_t = len(t_abl[m])
            a_wall, a_cpu = (statistics.median(t[i] for t in t_abl[m]) for i in (0, 1))
            e_cpu = statistics.median(t[1] for t in t_exact[:n_t])
            nan = f" ({len(rhos[m, alpha]) - len(r)} undefined)" if len(r) < len(rhos[m, alpha]) else ""
            print(
                f"| {m} | {alpha:g} | {m + 1} | {statistics.mean(r):.2f} ± {se:.2f} ({statistics.median(r):.2f}){nan} "
                f"| {sum(top1[m, alpha]):.1f}/{len(qs)} | {sum(gold1[m, alpha]):.1f}/{len(qs)} "
                f"| {a_wall:.1f}, {a_cpu:.1f} (n={n_t}) | {e_cpu / a_cpu:.2f}× |",
                flush=True,
            )


if __name__ == "__main__":
    main()
