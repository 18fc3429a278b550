"""The engine's decode on a GPU against the naive one-prompt-at-a-time loop, with and without CUDA graphs
and prompt-lookup drafts, in float32 and bfloat16 (the embedded SmolLM2, real SQuAD paragraphs).

Per (dtype, engine settings): how many of the k answers equal the naive loop's (transformers' greedy
``generate`` on each prompt alone), the largest entropy and log-probability difference over the tokens
of equal answers, decode steps, CUDA graphs captured, a failed capture's error, and the seconds of a
second, timed call. In float32 the answers must all be equal and the statistics within 1e-4 (the
engine's contract); in bfloat16 batching changes the sums' order, so a near tie can flip. Sampled
answers (temperature 1, seed 3: counter-based draws, graphed with ``cuda_graphs``) are compared with
the eager variant's, and their log-probabilities with a teacher-forced pass.

  python benchmarks/gpu_decode_check.py --json decode_check.json     # on a machine with CUDA
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import torch
from grogu_research.naive import forward_stats, greedy_generate
from grogu_research.testing import squad_paragraphs

import grogu
from grogu import Engine, EngineConfig
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

VARIANTS = {
    "eager": dict(cuda_graphs=False, prompt_lookup=0),
    "eager+drafts": dict(cuda_graphs=False, prompt_lookup=4),
    "graphs (GPU default)": dict(cuda_graphs=True, prompt_lookup=0),
    "graphs+drafts": dict(cuda_graphs=True, prompt_lookup=4),
}


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--dtypes", default="float32", help="the embedded GGUF: bfloat16 casts every matmul (slow)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    paras = squad_paragraphs(args.k + 1, seed=7)
    out: dict = {"k": args.k, "max_new_tokens": args.max_new_tokens, "rows": []}
    for dtype in args.dtypes.split(","):
        model, tokenizer = grogu.load_model(DEFAULT_MODEL, device=args.device, dtype=dtype)
        pb = PromptBuilder(tokenizer, 8192, args.max_new_tokens)
        query = paras[0]["question"]
        prompts = [pb.grounded_ids(query, [Document(p["text"], p["title"])]) for p in paras[1:]]
        probe = Engine((model, tokenizer))
        stops, pad = probe.stop_token_ids, probe.pad_token_id
        ref = []
        sync()
        t0 = time.perf_counter()
        for p in prompts:
            new = greedy_generate(model, p, args.max_new_tokens, stops, pad)
            ref.append(new[:-1] if new and new[-1] in stops else new)
        sync()
        naive_s = time.perf_counter() - t0
        ref_stats = [forward_stats(model, p, a) if a else None for p, a in zip(prompts, ref)]
        eager_samples = None
        for name, settings in VARIANTS.items():
            engine = Engine((model, tokenizer), config=EngineConfig(**settings))
            row: dict = {"dtype": dtype, "engine": name, "settings": settings}
            try:
                engine.generate(prompts, args.max_new_tokens)  # warm-up (and a first capture)
                engine.lookup_steps = engine.cuda_graphs_captured = 0
                sync()
                t0 = time.perf_counter()
                gens = engine.generate(prompts, args.max_new_tokens)
                sync()
                row["seconds"] = round(time.perf_counter() - t0, 4)
                same = [g.token_ids == r for g, r in zip(gens, ref)]
                row["same_answers"] = f"{sum(same)} / {len(same)}"
                diffs_h, diffs_lp = [0.0], [0.0]
                for g, s, ok in zip(gens, ref_stats, same):
                    if ok and s is not None:
                        diffs_h.append(float((g.entropy - s[0][: len(g.token_ids)]).abs().max()))
                        diffs_lp.append(float((g.logprob - s[1][: len(g.token_ids)]).abs().max()))
                row["max_entropy_diff"], row["max_logprob_diff"] = max(diffs_h), max(diffs_lp)
                row["steps"], row["graphs"] = engine.lookup_steps, engine.cuda_graphs_captured
                row["graph_failure"] = engine.decoder.graphs_failed
                row["answer_tokens"] = sum(len(g.token_ids) for g in gens)
                row["graph_stats"] = engine.graph_stats()
                # one prompt alone (the calm path's k = 1)
                sync()
                t0 = time.perf_counter()
                one = engine.generate(prompts[:1], args.max_new_tokens)[0]
                sync()
                row["k1_seconds"] = round(time.perf_counter() - t0, 4)
                row["k1_same"] = one.token_ids == ref[0]
                sampled = engine.generate(prompts, 24, temperature=1.0, seed=3)
                row["sampled_ok"] = all(torch.isfinite(s.logprob).all() for s in sampled)
                drawn = [s.token_ids for s in sampled]
                eager_samples = drawn if eager_samples is None else eager_samples
                row["sampled_same_as_eager"] = f"{sum(a == b for a, b in zip(drawn, eager_samples))} / {len(drawn)}"
                row["sampled_max_logprob_diff"] = max(
                    [
                        float((s.logprob - forward_stats(model, p, s.token_ids)[1]).abs().max())
                        for p, s in zip(prompts, sampled)
                        if s.token_ids
                    ]
                    or [0.0]
                )
            except Exception as exc:  # noqa: BLE001 - a check reports, the next variant still runs
                row["error"] = f"{type(exc).__name__}: {exc}"
            row["naive_seconds"] = round(naive_s, 4)
            out["rows"].append(row)
            print(json.dumps(row), flush=True)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if args.json:
        out["meta"] = meta(settings={k: v for k, v in vars(args).items() if v != ap.get_default(k)})
        json.dump(out, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
