"""``grogu-research eval <experiment>``: run one experiment of the evaluation harness.

  grogu-research eval winrate --limit 100                 # GROGU Table 1 on SQuAD dev, embedded SmolLM2
  grogu-research eval noise --limit 100 --retriever minilm
  grogu-research eval layout --limit 30 --model A --model B
  grogu-research eval seper --limit 10 --kernel token-f1  # or --nli <NLI model id or path>
  grogu-research eval acu --limit 300

Writes <experiment>.json (per-item results), <experiment>.md (the table) and <experiment>.png to
--out (default runs/eval/<experiment>/) and prints the table. Light to import: the experiment
module (torch, transformers) is loaded only when the command runs.
"""

from __future__ import annotations

import argparse
import os
import shlex

from grogu.runtime.models import DEFAULT_MODEL
from grogu_research.experiments import EXPERIMENTS

DEFAULT_LIMITS = {"winrate": 100, "noise": 100, "layout": 30, "seper": 10, "acu": 300}
DEFAULT_BATCH = {"winrate": 8, "noise": 4, "layout": 2, "seper": 2, "acu": 32}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("experiment", choices=list(EXPERIMENTS), help="which experiment to run")
    p.add_argument(
        "--model",
        action="append",
        default=None,
        help="target LLM: alias, path, .gguf or hub id (default smollm2-135m-instruct); "
        "repeat for layout to compare two models",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=None,
        help="number of questions / claims (default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_LIMITS.items()) + ")",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed for questions, random paragraphs, ΔSePer samples")
    p.add_argument(
        "--retriever",
        choices=["bm25", "minilm"],
        default="bm25",
        help="retriever for distractors / retrieved noise (SQuAD experiments)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32, help="longest generated answer (default 32)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA if available)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, ... (default: bf16 on CUDA, float32 on CPU)")
    p.add_argument(
        "--batch",
        type=int,
        default=None,
        help="questions per engine pass (default: " + ", ".join(f"{k} {v}" for k, v in DEFAULT_BATCH.items()) + ")",
    )
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--out", default=None, help="output folder (default runs/eval/<experiment>/)")
    g = p.add_argument_group("seper")
    g.add_argument("--nli", default=None, help="NLI sequence-classification model (hub id or path) for ΔSePer")
    g.add_argument(
        "--kernel",
        choices=["token-f1", "rouge-l"],
        default="token-f1",
        help="built-in lexical entailment kernel when no --nli is given (a stand-in, not NLI)",
    )
    g.add_argument("--samples", type=int, default=10, help="ΔSePer samples N (default 10)")
    g.add_argument("--tau", type=float, default=0.5, help="ΔSePer hard-clustering threshold (default 0.5)")
    g.add_argument(
        "--paragraphs",
        type=int,
        default=None,
        help="MuSiQue paragraphs per question: all supporting + sampled others (default all 20)",
    )
    g = p.add_argument_group("acu")
    g.add_argument("--file", default="fever_sufficient_facts.jsonl", help="SufficientFacts file (default FEVER)")


def options(args: argparse.Namespace) -> dict:
    """Keyword arguments of ``grogu_research.experiments.run`` from the parsed command line."""
    name = args.experiment
    opts = {
        "model": args.model if args.model and len(args.model) > 1 else (args.model or [DEFAULT_MODEL])[0],
        "limit": args.limit if args.limit is not None else DEFAULT_LIMITS[name],
        "seed": args.seed,
        "device": args.device,
        "dtype": args.dtype,
        "threads": args.threads,
        "batch": args.batch if args.batch is not None else DEFAULT_BATCH[name],
        "out_dir": args.out or os.path.join("runs", "eval", name),
    }
    if name != "acu":
        opts["max_new_tokens"] = args.max_new_tokens
    if name in ("winrate", "noise", "layout"):
        opts["retriever"] = args.retriever
    if name == "seper":
        opts.update(nli=args.nli, kernel=args.kernel, samples=args.samples, tau=args.tau, paragraphs=args.paragraphs)
    if name == "acu":
        opts["file"] = args.file
    return opts


def command_line(name: str, opts: dict) -> str:
    """The full ``grogu-research eval`` command that reproduces a run (every effective option spelled out)."""
    parts = ["grogu-research", "eval", name]
    models = opts["model"] if isinstance(opts["model"], list) else [opts["model"]]
    for m in models:
        parts += ["--model", str(m)]
    for key, value in opts.items():
        if key in ("model", "out_dir") or value is None:
            continue
        parts += [f"--{key.replace('_', '-')}", str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    from grogu_research.experiments import run as run_experiment

    opts = options(args)
    threads = os.environ.get("OMP_NUM_THREADS")
    cmd = command_line(args.experiment, opts)
    if threads and opts.get("threads") is None:
        cmd = f"OMP_NUM_THREADS={threads} {cmd}"
    result = run_experiment(args.experiment, **opts, command=cmd)
    print(result["markdown"])
    for kind, path in result.get("files", {}).items():
        print(f"{kind}: {path}")
    return 0
