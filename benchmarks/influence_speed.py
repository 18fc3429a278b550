"""Influence Score speed: the batched InfluenceScorer against the naive 2k+1 loop, same inputs, one run.

For k in {3, 5, 10} real SQuAD dev paragraphs per query and the packaged SmolLM2 (+ MiniLM embedder):
- naive: 2k+1 separate greedy generations (full, each leave-one-out, each single document), each
  answer embedded on its own, then the formula;
- engine: ``InfluenceScorer.score`` (all 2k+1 generations in one batched engine call, one embed call).

  python benchmarks/influence_speed.py [--ks 3,5,10] [--queries 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch

from grogu import Document
from grogu.influence import InfluenceScorer
from grogu.testing import squad_paragraphs


def naive(scorer: InfluenceScorer, query: str, docs: list[Document]) -> list[float]:
    gen = lambda ctx: scorer.engine.generate([scorer._prompt(query, ctx)], scorer.max_new_tokens)[0].text  # noqa: E731
    emb = lambda t: scorer.embedder.encode(t, convert_to_tensor=True)  # noqa: E731
    f = emb(gen(docs))
    cos = lambda t: float(torch.nn.functional.cosine_similarity(emb(t), f, dim=0))  # noqa: E731
    return [cos(gen([d])) - cos(gen(docs[:i] + docs[i + 1:])) for i, d in enumerate(docs)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="3,5,10")
    ap.add_argument("--queries", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    scorer = InfluenceScorer("smollm2-135m-instruct", max_new_tokens=args.max_new_tokens, device="cpu")
    ks = [int(k) for k in args.ks.split(",")]
    paras = squad_paragraphs(max(ks) + args.queries, seed=7)
    scorer.score(paras[0]["question"], [paras[1]["text"]])  # warm-up
    print(f"SmolLM2-135M-Instruct, CPU {torch.get_num_threads()} threads, max_new_tokens={args.max_new_tokens}")
    print("| k | generations | naive loop (s/query) | engine (s/query) | naive / engine | max |IS diff| |")
    print("|---|---|---|---|---|---|")
    for k in ks:
        t_n, t_e, diff = [], [], 0.0
        for q in range(args.queries):
            query = paras[q]["question"]
            docs = [Document(p["text"], p["title"]) for p in paras[q + 1: q + 1 + k]]
            t = time.perf_counter()
            res = scorer.score(query, docs)
            t_e.append(time.perf_counter() - t)
            t = time.perf_counter()
            ref = naive(scorer, query, docs)
            t_n.append(time.perf_counter() - t)
            diff = max(diff, max(abs(a - b) for a, b in zip(res.scores, ref)))
        n, e = statistics.median(t_n), statistics.median(t_e)
        print(f"| {k} | {2 * k + 1} | {n:.2f} | {e:.2f} | {n / e:.1f}× | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
