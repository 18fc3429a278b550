"""Every route of ``grogu serve`` fuzzed from its own OpenAPI schema, with the counts of each status.

schemathesis reads ``/openapi.json`` of a local service (a tiny random model, a token, small limits) and
generates ``--examples`` requests a route, valid and not (hypothesis, generation phase only). A request
fails the check when its status is 500 or more, when it takes over 30 s, or when an error body is not the
documented ``{"detail", "message", "error"}``. The counts per route and every failure go to ``--out``. The test suite runs the same check
with 20 a route (``tests/test_serve.py``; 200 in the heavy tier).

    OMP_NUM_THREADS=1 python benchmarks/fuzz_routes.py --examples 200
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fuzz_routes", "counts.json"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import httpx
    import schemathesis
    from grogu_research import testing
    from hypothesis import HealthCheck, Phase, given, settings

    from grogu.apps.serve.service import ServeConfig

    token = "fuzz-token"
    auth = {"Authorization": f"Bearer {token}"}
    with tempfile.TemporaryDirectory() as tmp:
        model = testing.save_tiny_model(os.path.join(tmp, "tiny"))
        limits = dict(
            max_docs=16, max_doc_chars=2000, max_query_chars=500, max_request_tokens=4000, max_body_bytes=64000
        )
        config = ServeConfig(model=model, device="cpu", token=token, max_batch_size=8, batch_wait_s=0.01, **limits)
        with testing.local_service(config) as url:
            schema = schemathesis.openapi.from_dict(httpx.get(f"{url}/openapi.json").json())
            statuses: dict = collections.defaultdict(collections.Counter)
            seconds: dict = collections.defaultdict(float)
            failures = []
            for operation in schema.get_all_operations():
                op = operation.ok()

                @settings(
                    max_examples=args.examples,
                    deadline=None,
                    database=None,
                    phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=op.as_strategy())
                def call(case):
                    start = time.perf_counter()
                    response = case.call(base_url=url, headers=auth, timeout=60)
                    took = time.perf_counter() - start
                    statuses[op.label][response.status_code] += 1
                    seconds[op.label] = max(seconds[op.label], took)
                    body = response.json() if response.status_code >= 400 else {}
                    shape = (
                        isinstance(body.get("detail"), str)
                        and body.get("message") == body["detail"]
                        and body.get("error")
                    )
                    if response.status_code >= 500 or took > 30 or (response.status_code >= 400 and not shape):
                        failures.append({"route": op.label, "status": response.status_code, "seconds": took})

                call()
                print(op.label, dict(statuses[op.label]), flush=True)
    report = {
        "examples_per_route": args.examples,
        "limits": limits,
        "routes": {k: {"statuses": dict(v), "slowest_s": round(seconds[k], 2)} for k, v in statuses.items()},
        "requests": sum(sum(v.values()) for v in statuses.values()),
        "server_errors": sum(n for v in statuses.values() for s, n in v.items() if s >= 500),
        "failures": failures,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1, default=str)
    print(json.dumps({k: report[k] for k in ("requests", "server_errors")}), len(failures), "failures")


if __name__ == "__main__":
    main()
