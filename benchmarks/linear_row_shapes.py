"""What bounding oneDNN's input shapes costs: the engine's calls with the rows cut into a bounded set of
shapes (``grogu.runtime.engine.kernels.row_shapes``, the default) against every row count passed as it
comes (what the engine did before, and what grew a long-lived process's memory).

The workload of ``memory_growth.py`` (SQuAD items; /score-like calls with 2 documents and /rerank-like
calls with 8; 8 answer tokens) through one ``UtilityScorer`` on oneDNN linear layers. Each call runs
twice, once per arm, the arm first in turn alternating, on the same inputs in one process. Reports
seconds per call (mean, p90, max) per arm, the ratio of the means, and whether the arms agree (same
answers, scores within 1e-4).

    GROGU_SHARED_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/linear_row_shapes.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    from serve_load import work_items

    import grogu
    from grogu.runtime.engine import kernels

    torch.set_num_threads(1)
    items = work_items(40, 2)
    large = [(q, d + [x for _, o in items[i + 1 : i + 4] for x in o]) for i, (q, d) in enumerate(items)]
    model = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.Engine(model, device="cpu", config=grogu.EngineConfig(cpu_linear="onednn"))
    scorer = grogu.UtilityScorer(engine, max_new_tokens=8)
    bounded = kernels.EXACT_ROWS
    arms = {"bounded": bounded, "any": 10**9}
    times = {a: [] for a in arms}
    agree = 0
    scorer.score(*items[0])  # warm-up
    for j in range(args.calls):
        query, docs = large[j % len(items)] if (j // 3) % 2 else items[j % len(items)]
        order = list(arms) if j % 2 == 0 else list(arms)[::-1]
        out = {}
        for arm in order:
            kernels.EXACT_ROWS = arms[arm]
            t = time.perf_counter()
            out[arm] = scorer.score(query, docs)
            times[arm].append(time.perf_counter() - t)
        a, b = out["bounded"], out["any"]
        agree += [r.answer for r in a] == [r.answer for r in b] and all(
            abs(x.score - y.score) <= 1e-4 for x, y in zip(a, b)
        )
    kernels.EXACT_ROWS = bounded

    def summary(ts):
        q = statistics.quantiles(ts, n=10)
        return {"mean_s": statistics.mean(ts), "p90_s": q[-1], "max_s": max(ts)}

    result = {
        "calls": args.calls,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, 1 torch thread",
        "arms": {a: summary(ts) for a, ts in times.items()},
        "bounded_over_any_mean": statistics.mean(times["bounded"]) / statistics.mean(times["any"]),
        "bounded_over_any_p90": summary(times["bounded"])["p90_s"] / summary(times["any"])["p90_s"],
        "calls_that_agree": agree,
    }
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != ap.get_default(k)}
            json.dump({**result, "meta": meta(settings=settings)}, f, indent=1)


if __name__ == "__main__":
    main()
