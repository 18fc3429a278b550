"""The scoring service on a two-node Ray cluster that loses its worker node under load.

  GROGU_SHARED_DATA=../shared/data python benchmarks/serve_cluster.py --json results/serve_cluster/smollm2.json
  python benchmarks/serve_cluster.py --model tiny --requests 300

A head node and a worker node of 1 CPU each on this machine (``ray.cluster_utils.Cluster``), the service
with one replica on each (``max_replicas_per_node=1``) behind the head's proxy (grogu_research.cluster).
4 clients send ``--requests`` requests in all, cycling through /score, /rerank and /v2/rerank on real
SQuAD items, small (``--docs`` documents) and large (four times as many). When 30 % are done the worker
node's raylet is killed (SIGKILL); ``--rejoin-after`` seconds later a new worker node joins. Every 200
answer is checked against an in-process scorer (answers equal, scores within 1e-4; the reranks' kept
indices equal); a 503 with Retry-After is retried once. Prints the outcome counts as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 (the embedded default) or tiny")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--docs", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--rejoin-after", type=float, default=5.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import tempfile

    from grogu_research import testing
    from grogu_research.cluster import ROUTES, expected_answers, node_loss_load, two_node_service
    from serve_load import work_items

    import grogu
    from grogu.apps.serve.config import ServeConfig

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    model = grogu.DEFAULT_MODEL if args.model == "smollm2" else testing.save_tiny_model(tempfile.mkdtemp())
    items = work_items(args.items, args.docs)
    large = [(q, d + [x for _, o in items[i + 1 : i + 4] for x in o]) for i, (q, d) in enumerate(items)]
    work = []
    for j in range(6 * len(items)):  # each item on each route, small and large
        q, docs = (large if (j // 3) % 2 else items)[(j // 6) % len(items)]
        work.append((ROUTES[j % 3], q, docs))
    scorer = grogu.UtilityScorer(model, device="cpu", max_new_tokens=args.max_new_tokens)
    want = expected_answers(scorer, work)
    del scorer
    config = ServeConfig(model=model, device="cpu", max_batch_size=8, batch_wait_s=0.02)
    with two_node_service(config) as nodes:
        out = node_loss_load(
            nodes,
            work,
            want,
            clients=args.clients,
            requests=args.requests,
            rejoin_after_s=args.rejoin_after,
            max_new_tokens=args.max_new_tokens,
            on_event=lambda line: print(line, file=sys.stderr, flush=True),
        )
    out |= {
        "model": args.model,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; 2 nodes of 1 CPU",
        "distinct_requests": len(work),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != ap.get_default(k)}
            json.dump({**out, "meta": meta(settings=settings)}, f, indent=1)


if __name__ == "__main__":
    main()
