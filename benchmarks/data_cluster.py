"""``grogu score --ray`` on a two-node Ray cluster: throughput with one node and with two, and a run
that loses the worker node halfway.

  python benchmarks/data_cluster.py --queries 1000 --json results/serve_cluster/data_tiny.json

A head and a worker node of 1 CPU each on this machine (grogu_research.cluster). ``--queries`` queries
of 2 documents each (2,000 (question, document) pairs by default) on the tiny random test model
(``--model smollm2`` for the embedded default; slow on a CPU). Three runs on the same input:
1. one engine (``--workers 1``: one node works), timed;
2. two engines (``--workers 2``: one per node), timed;
3. two engines, the worker node killed when half the records are written, a new node 5 s later; a
   failed run is run again and resumes.
Every output is compared with the sequential command's, record for record (the same bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from grogu_research import testing
    from grogu_research.cluster import score_with_node_loss, two_node_cluster

    import grogu
    from grogu.apps.cli import main as grogu_main

    tmp = tempfile.mkdtemp()
    model = grogu.DEFAULT_MODEL if args.model == "smollm2" else testing.save_tiny_model(os.path.join(tmp, "m"))
    words = ["river", "castle", "engine", "harbour", "violin", "desert", "comet", "garden"]
    queries = os.path.join(tmp, "q.jsonl")
    with open(queries, "w") as f:
        for i in range(args.queries):
            a, b = words[i % 8], words[(i * 3 + 1) % 8]
            docs = [f"The {a} is near the {b}.", {"text": f"{i} {b}s of the {a}", "title": a}]
            f.write(json.dumps({"query": f"Where is the {a} number {i}?", "documents": docs}) + "\n")
    common = ["score", "--queries", queries, "--model", model, "--device", "cpu"]
    common += ["--max-new-tokens", str(args.max_new_tokens)]
    t = time.perf_counter()
    assert grogu_main([*common, "--out", os.path.join(tmp, "seq.jsonl")]) == 0
    out = {"sequential_s": round(time.perf_counter() - t, 1)}
    want = open(os.path.join(tmp, "seq.jsonl")).read().splitlines()

    def same(path: str) -> bool:
        return open(path).read().splitlines() == want

    with two_node_cluster() as nodes:
        for workers in (1, 2):
            path = os.path.join(tmp, f"ray{workers}.jsonl")
            t = time.perf_counter()
            assert grogu_main([*common, "--out", path, "--ray", "--workers", str(workers)]) == 0
            seconds = time.perf_counter() - t
            out[f"workers_{workers}"] = {
                "seconds": round(seconds, 1),
                "pairs_per_s": round(2 * args.queries / seconds, 1),
                "equal_to_sequential": same(path),
            }
        path = os.path.join(tmp, "killed.jsonl")
        run = score_with_node_loss(
            nodes,
            [*common, "--out", path, "--ray", "--workers", "2"],
            path,
            kill_after_records=args.queries // 2,
            on_event=lambda line: print(line, file=sys.stderr, flush=True),
        )
        out["node_lost"] = run | {"equal_to_sequential": same(path)}
    out |= {
        "queries": args.queries,
        "pairs": 2 * args.queries,
        "model": args.model,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; 2 nodes of 1 CPU",
        "two_over_one_node_throughput": round(out["workers_1"]["seconds"] / out["workers_2"]["seconds"], 2),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != ap.get_default(k)}
            json.dump({**out, "meta": meta(settings=settings)}, f, indent=1)


if __name__ == "__main__":
    main()
