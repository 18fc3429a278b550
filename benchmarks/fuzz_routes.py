"""Every route of ``grogu serve`` fuzzed from its own OpenAPI schema, with the counts of each status.

A local service (a tiny random model, a token, small limits), fuzzed by ``grogu_research.fuzz``:
schemathesis generates ``--examples`` requests a route from ``/openapi.json``, valid and not. A request
fails the check when its status is 500 or more, when it takes over 30 s, or when an error body is not the
documented ``{"detail", "message", "error"}``. The counts per route and every failure go to ``--out``. The test suite runs the same check
with 20 a route (``tests/test_serve.py``; 200 in the heavy tier).

    OMP_NUM_THREADS=1 python benchmarks/fuzz_routes.py --examples 200
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from record_meta import meta  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fuzz_routes", "counts.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    from grogu_research import testing
    from grogu_research.fuzz import fuzz_routes

    from grogu.apps.serve.service import ServeConfig

    token = "fuzz-token"
    with tempfile.TemporaryDirectory() as tmp:
        model = testing.save_tiny_model(os.path.join(tmp, "tiny"))
        limits = dict(
            max_docs=16, max_doc_chars=2000, max_query_chars=500, max_request_tokens=4000, max_body_bytes=64000
        )
        config = ServeConfig(model=model, device="cpu", token=token, max_batch_size=8, batch_wait_s=0.01, **limits)
        with testing.local_service(config) as url:
            out = fuzz_routes(url, {"Authorization": f"Bearer {token}"}, args.examples)
    for label, counts in out.statuses.items():
        print(label, dict(counts), flush=True)
    report = {
        "examples_per_route": args.examples,
        "limits": limits,
        "routes": {k: {"statuses": dict(v), "slowest_s": round(out.slowest[k], 2)} for k, v in out.statuses.items()},
        "requests": out.requests,
        "server_errors": sum(n for v in out.statuses.values() for s, n in v.items() if s >= 500),
        "failures": out.failures,
        "meta": meta(settings={k: v for k, v in vars(args).items() if v != ap.get_default(k)}),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(json.dumps({k: report[k] for k in ("requests", "server_errors")}), len(out.failures), "failures")


if __name__ == "__main__":
    main()
