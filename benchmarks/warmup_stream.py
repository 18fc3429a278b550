"""Warm-up on a stream of queries whose document counts vary: the same stream run twice.

``--queries`` queries, each with k SQuAD paragraphs, k drawn from 1..``--max-k`` (seeded), scored one
query at a time (``UtilityScorer.score``), as a service sees them. The second pass runs the identical
stream on the same engine: whatever the first pass paid once per new batch shape (CUDA graph capture,
kernel selection, allocation) it does not pay again. Graphs captured in each pass are counted (the
engine keeps them: the second pass should capture none) with the arenas kept at the end. Each query's
seconds are split into the decode prefill, the decode loop and the rest (the ungrounded teacher forcing,
tokenising, scoring), synchronised around each part on a GPU. Reports each pass's mean, p90 and max seconds a
query, the ratio of the means (first / second; the bar: at most 1.2) and the first pass's slowest queries
with their k.

  python benchmarks/warmup_stream.py --random-arch qwen2.5-7b --device cuda --dtype bfloat16 --json out.json
  OMP_NUM_THREADS=1 python benchmarks/warmup_stream.py --queries 6 --max-k 4          # a dry run on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import torch
from grogu_research.testing import squad_paragraphs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_counts import counts, verdict  # noqa: E402
from record_meta import meta  # noqa: E402
from sampled_decode import _engine  # noqa: E402

from grogu import Document, UtilityScorer  # noqa: E402


def summary(times: list[float]) -> dict:
    t = sorted(times)
    return {"mean_s": statistics.mean(t), "p90_s": t[min(len(t) - 1, round(0.9 * (len(t) - 1)))], "max_s": t[-1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=40)
    p.add_argument("--max-k", type=int, default=20)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--random-arch", default=None)
    p.add_argument("--tokenizer", default=None, help="with --random-arch: a saved tokenizer's folder")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    rng = random.Random(args.seed)
    ks = [rng.randint(1, args.max_k) for _ in range(args.queries)]
    paragraphs = squad_paragraphs(args.queries + args.max_k, seed=args.seed)
    stream = [
        (paragraphs[i]["question"], [Document(d["text"], d["title"]) for d in paragraphs[i : i + k]])
        for i, k in enumerate(ks)
    ]
    scorer = UtilityScorer(_engine(args), max_new_tokens=args.max_new_tokens)
    cuda = args.device.startswith("cuda")

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    parts = {"prefill_s": 0.0, "decode_s": 0.0}  # where a query's seconds go: the decode prefill, the loop

    def timed(name, fn):
        def run(*a, **kw):
            sync()
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            sync()
            parts[name] += time.perf_counter() - t0
            return out

        return run

    engine = scorer.target
    engine.prefill.for_decoding = timed("prefill_s", engine.prefill.for_decoding)
    engine.decoder.decode = timed("decode_s", engine.decoder.decode)

    def run() -> tuple[list[float], list[dict]]:
        times, split = [], []
        for query, docs in stream:
            sync()
            parts.update(prefill_s=0.0, decode_s=0.0)
            t0 = time.perf_counter()
            scorer.score(query, docs)
            sync()
            times.append(time.perf_counter() - t0)
            split.append(dict(parts, rest_s=times[-1] - sum(parts.values())))
        return times, split

    decoder = scorer.target.decoder
    captured = [decoder.graphs]
    first, first_split = run()
    captured.append(decoder.graphs)
    second, second_split = run()
    captured.append(decoder.graphs)
    slowest = sorted(range(len(ks)), key=lambda i: -first[i])[:5]
    figures = {
        "model": args.random_arch or "smollm2-135m-instruct (packaged)",
        "device": args.device,
        "dtype": str(scorer.target.dtype).removeprefix("torch."),
        "queries": args.queries,
        "ks": ks,
        "distinct_k": len(set(ks)),
        "first_pass": summary(first),
        "second_pass": summary(second),
        "ratio_of_means": statistics.mean(first) / statistics.mean(second),
        "first_pass_slowest": [
            {"k": ks[i], "first_s": first[i], "second_s": second[i], "first": first_split[i], "second": second_split[i]}
            for i in slowest
        ],
        "split_means": {
            name: {part: statistics.mean(q[part] for q in split) for part in split[0]}
            for name, split in (("first", first_split), ("second", second_split))
        },
        "graphs_captured": {"first_pass": captured[1] - captured[0], "second_pass": captured[2] - captured[1]},
        "arenas_kept": [
            {"span": key[0], "width": key[1], "rows": a.rows, "graphs": sorted(a.graphs)}
            for key, a in decoder.kept.arenas.items()
        ],
        "graph_failure": decoder.graphs_failed,
        "graphs": counts(engine),
        "times": {"first": first, "second": second},
        "command": "python " + " ".join(sys.argv),
    }
    print(json.dumps({k: v for k, v in figures.items() if k not in ("times", "ks")}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**figures, "meta": meta(settings=settings)}, f, indent=1)
    verdict(figures["graphs"], args.device)


if __name__ == "__main__":
    main()
