"""What one decode step costs with 1, 2, 4 and 6 rows: the context mode decodes its candidates in one
batch, so this is what each added candidate costs once its prompt is encoded.

For each row count, a cache of ``--positions`` tokens per row is prefilled (random token ids; speed does
not depend on them), then ``--steps`` one-token decode forwards run over it, as the engine's decode loop
runs them (the engine's kernels, ``engine.kernels()``). Reports the median milliseconds per step and its
ratio to one row, each row count measured twice in alternation (1, 2, 4, 6, 1, 2, 4, 6) so that drift
shows.

  OMP_NUM_THREADS=1 python benchmarks/decode_rows.py            # packaged SmolLM2, 1 torch thread
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from grogu import Engine
from grogu.runtime.engine.kvcache import forward_with_cache
from grogu.runtime.models import DEFAULT_MODEL


def step_ms(engine: Engine, rows: int, positions: int, steps: int) -> float:
    """Median milliseconds of one decode forward over ``rows`` rows of ``positions`` cached tokens."""
    from transformers import DynamicCache

    model = engine.model
    ids = torch.randint(100, 20_000, (rows, positions), device=engine.device)
    cache = DynamicCache()
    forward_with_cache(model, cache, input_ids=ids, use_cache=True, logits_to_keep=1)
    token = torch.randint(100, 20_000, (rows, 1), device=engine.device)
    times = []
    for i in range(steps + 2):  # the first two warm up
        t0 = time.perf_counter()
        forward_with_cache(
            model,
            cache,
            input_ids=token,
            use_cache=True,
            position_ids=torch.full((rows, 1), positions + i, device=engine.device),
        )
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times[2:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--positions", type=int, default=700, help="cached tokens per row (the plain prompt: ~660)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rows", type=int, nargs="*", default=[1, 2, 4, 6])
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    engine = Engine(args.model, device="cpu")
    out: dict[int, list[float]] = {r: [] for r in args.rows}
    with torch.inference_mode(), engine.kernels():
        for _ in range(2):
            for rows in args.rows:
                out[rows].append(step_ms(engine, rows, args.positions, args.steps))
    one = statistics.mean(out[args.rows[0]])
    print(
        json.dumps(
            {
                "machine": platform.processor() or platform.machine(),
                "threads": args.threads,
                "kernels": engine.linear_backend,
                "positions": args.positions,
                "ms per step (two runs)": {r: [round(x, 1) for x in v] for r, v in out.items()},
                f"ratio to {args.rows[0]} row(s)": {r: round(statistics.mean(v) / one, 2) for r, v in out.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
