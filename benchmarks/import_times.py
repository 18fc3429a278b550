"""Import time of the modules a process loads without running a model, each in fresh interpreters.

    python benchmarks/import_times.py --repeat 5 --out benchmarks/results/import_times/NAME.json

Each module is imported in ``--repeat`` fresh interpreters (``python -X importtime`` is not used: it
counts the interpreter's own start). The record holds every time and the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

MODULES = (
    "grogu",
    "grogu.rerank.remote.client",
    "grogu.apps.integration_settings",
    "grogu.runtime.inference_server.server_target",
    "grogu.apps.serve.proxy",
    "grogu.runtime.engine.core",
)
TIMER = "import time; t = time.perf_counter(); import {m}; print(time.perf_counter() - t)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for m in MODULES:
        runs = [
            float(
                subprocess.run(
                    [sys.executable, "-c", TIMER.format(m=m)], capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(args.repeat)
        ]
        rows.append({"module": m, "seconds": runs, "median_s": statistics.median(runs)})
        print(f"{m}: {statistics.median(runs):.3f} s", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"meta": meta(settings={"repeat": args.repeat}), "rows": rows}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
