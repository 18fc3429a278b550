"""Sampled decoding against greedy decoding, on the same prompts in one run (ΔSePer's hot loop).

``--rows`` prompts (SQuAD paragraphs as grounded prompts, each repeated ``--samples`` times, as ΔSePer
samples them) decode exactly ``--tokens`` tokens each: the engine's decoder stops at no token, so both
arms run the same number of steps and their difference is the cost of drawing the tokens. The arms
alternate, ``--repeats`` times each, after one warm-up of each. Reports seconds per call (mean, p90, max),
milliseconds per decode step and the ratio sampled / greedy.

  OMP_NUM_THREADS=1 python benchmarks/sampled_decode.py --out benchmarks/results/sampled_decode/cpu.json
  python benchmarks/sampled_decode.py --random-arch qwen2.5-7b --device cuda --dtype bfloat16   # GPU check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
from grogu_research.testing import embedded_tokenizer, squad_paragraphs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_speed import ARCHS  # noqa: E402
from record_meta import meta  # noqa: E402

from grogu import Document, Engine  # noqa: E402
from grogu.core.prompts import PromptBuilder  # noqa: E402
from grogu.runtime.models import DEFAULT_MODEL  # noqa: E402


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine, its decoder told to stop at no token: every answer is --tokens long."""
    engine = _engine(args)
    engine.decoder.stop_token_ids = frozenset()
    return engine


def _engine(args: argparse.Namespace) -> Engine:
    if args.random_arch is None:
        return Engine(DEFAULT_MODEL, device=args.device, dtype=args.dtype)
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model("qwen2", **ARCHS[args.random_arch])
    dtype = getattr(torch, args.dtype) if args.dtype else torch.float32
    with torch.device(args.device):  # made where it runs: a 7B model initialised on the host takes minutes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    return Engine(model, tokenizer_for(args))


def tokenizer_for(args: argparse.Namespace):
    """``--tokenizer``, a saved tokenizer's folder; else the packaged SmolLM2's (its GGUF read)."""
    if getattr(args, "tokenizer", None):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(args.tokenizer)
    return embedded_tokenizer()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=5, help="distinct prompts")
    p.add_argument("--samples", type=int, default=10, help="samples per prompt (rows of the batch)")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default=None)
    p.add_argument("--random-arch", choices=sorted(ARCHS), default=None)
    p.add_argument("--tokenizer", default=None, help="with --random-arch: a saved tokenizer's folder")
    p.add_argument("--out", default=None)
    args = p.parse_args()

    engine = build_engine(args)
    builder = PromptBuilder(engine.tokenizer, engine.max_context_tokens, args.tokens)
    paragraphs = squad_paragraphs(args.rows)
    prompts = [list(builder.grounded_ids(d["question"], [Document(d["text"], d["title"])])) for d in paragraphs]
    batch = [p for p in prompts for _ in range(args.samples)]

    def run(sampled: bool, seed: int) -> tuple[float, int]:
        steps = engine.decoder.steps
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if sampled:
            engine.generate(batch, args.tokens, temperature=1.0, seed=seed)
        else:
            engine.generate(batch, args.tokens)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0, engine.decoder.steps - steps

    run(False, 0), run(True, 0)  # warm-up
    times: dict[str, list[float]] = {"greedy": [], "sampled": []}
    steps: dict[str, int] = {}
    for r in range(args.repeats):
        for arm in ("greedy", "sampled") if r % 2 == 0 else ("sampled", "greedy"):
            seconds, n = run(arm == "sampled", r + 1)
            times[arm].append(seconds)
            steps[arm] = n

    def summary(arm: str) -> dict:
        t = sorted(times[arm])
        return {
            "mean_s": statistics.mean(t),
            "p90_s": t[min(len(t) - 1, round(0.9 * (len(t) - 1)))],
            "max_s": t[-1],
            "steps": steps[arm],
            "ms_per_step": 1000 * statistics.mean(t) / max(steps[arm], 1),
        }

    figures = {
        "model": args.random_arch or "smollm2-135m-instruct (packaged)",
        "device": args.device,
        "dtype": str(engine.dtype).removeprefix("torch."),
        "machine": platform.processor() or platform.machine(),
        "rows": len(batch),
        "tokens": args.tokens,
        "repeats": args.repeats,
        "greedy": summary("greedy"),
        "sampled": summary("sampled"),
        "times": times,
        "command": "python " + " ".join(sys.argv),
        "graphs": engine.graph_stats(),
    }
    figures["ratio_of_means"] = figures["sampled"]["mean_s"] / figures["greedy"]["mean_s"]
    figures["ms_per_step_ratio"] = figures["sampled"]["ms_per_step"] / figures["greedy"]["ms_per_step"]
    print(json.dumps({k: v for k, v in figures.items() if k != "times"}, indent=1))
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**figures, "meta": meta(settings=settings)}, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from graph_counts import verdict

    verdict(figures["graphs"], args.device)


if __name__ == "__main__":
    main()
