"""What the engine's CUDA graphs did in a benchmark, and the GPU check's rule on it.

``counts(engine)`` is ``engine.graph_stats()`` (captured, replayed, failed, warm-up and eager steps,
arenas; every count 0 on a CPU). ``verdict(counts, device)`` ends the process with exit status 3 when
on a CUDA device a capture failed or a step of the graphed path ran eagerly: the GPU check's steps then
fail rather than report figures of a path that did not run. Run as a script, it runs the grogu CLI and
applies the rule to every engine the process made:

  python benchmarks/graph_counts.py tune --examples ex.jsonl --device cuda --out tuned
"""

from __future__ import annotations

import json
import sys
from typing import Any


def counts(engine: Any) -> dict:
    stats = getattr(engine, "graph_stats", None)
    return stats() if stats is not None else {}


def verdict(graphs: dict, device: str, what: str = "") -> None:
    """Exit 3 when, on CUDA, a capture failed or a graphed step ran eagerly (printing why)."""
    if not str(device).startswith("cuda") or not graphs:
        return
    if graphs.get("failed") or graphs.get("eager_steps"):
        print(f"GRAPHS FAILED{' ' + what if what else ''}: {json.dumps(graphs)}", flush=True)
        sys.exit(3)
    print(f"graphs{' ' + what if what else ''}: {json.dumps(graphs)}", flush=True)


def main() -> None:
    from grogu.apps.cli import main as cli
    from grogu.runtime.engine.core import _SHARED

    rc = cli(sys.argv[1:])
    for key, engine in _SHARED.items():
        verdict(counts(engine), str(engine.device), what=str(key[0])[:60])
    sys.exit(rc)


if __name__ == "__main__":
    main()
