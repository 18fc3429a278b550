"""The resident memory of one process that scores in a loop: is the replica's growth under sustained load
the engine's own? (``serve_load.py --scenario sustained`` found it.)

Mixed /score-like and /rerank-like calls on SQuAD items (2 and 8 documents, 8 answer tokens) through one
in-process ``UtilityScorer`` for ``--seconds``, the process's RSS and Python's object count every 20 s.
``--linear`` sets the engine's ``cpu_linear`` (``auto``, ``onednn`` or ``default``); ``--trim`` calls glibc's
``malloc_trim`` after each call. ``--shapes any`` passes every row count to oneDNN as it comes (what the
engine did before it bounded them: ``grogu.runtime.engine.kernels.row_shapes``).

    GROGU_SHARED_DATA=../shared/data OMP_NUM_THREADS=1 python benchmarks/memory_growth.py --linear default
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from grogu.runtime.engine.config import LINEAR_BACKENDS  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=200)
    ap.add_argument("--linear", default="auto", choices=LINEAR_BACKENDS)
    ap.add_argument("--trim", action="store_true")
    ap.add_argument("--shapes", default="bounded", choices=("bounded", "any"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import psutil
    import torch
    from serve_load import work_items

    import grogu
    from grogu.runtime.engine import kernels

    if args.shapes == "any":
        kernels.EXACT_ROWS = 10**9
    torch.set_num_threads(1)
    items = work_items(40, 2)
    large = [(q, d + [x for _, o in items[i + 1 : i + 4] for x in o]) for i, (q, d) in enumerate(items)]
    model = grogu.load_model(grogu.DEFAULT_MODEL, device="cpu")
    engine = grogu.Engine(model, device="cpu", config=grogu.EngineConfig(cpu_linear=args.linear))
    scorer = grogu.UtilityScorer(engine, max_new_tokens=8)
    proc, libc = psutil.Process(), ctypes.CDLL("libc.so.6")
    start, last, j = time.time(), 0.0, 0
    while time.time() - start < args.seconds:
        i, big = j % len(items), (j // 3) % 2 == 1
        query, docs = large[i] if big else items[i]
        if j % 3 == 0:
            scorer.score(query, docs)
        else:
            scorer.rerank(query, docs, top_n=2)
        j += 1
        if args.trim:
            libc.malloc_trim(0)
        if time.time() - last > 20:
            last = time.time()
            gc.collect()
            rss = proc.memory_info().rss / 2**20
            print(
                f"{time.time() - start:6.0f} s  calls {j:4d}  rss {rss:.0f} MB  objects {len(gc.get_objects())}",
                flush=True,
            )


if __name__ == "__main__":
    main()
