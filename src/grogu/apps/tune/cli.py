"""``grogu tune``: fit the rerank decision to your LLM and QA prompt from labelled questions.

  grogu tune --examples labelled.jsonl --model smollm2-135m-instruct --prompt-file prompt.txt --top-n 3 --out tuned/

Each line of the examples file: {"question": ..., "answers": [...], "documents": [...]} (documents in the
retriever's order). The prompt file holds the QA prompt with {context} and {question}; a .json file
{"system": ..., "user": ...} adds a system message. Writes tuned/settings.json, tuned/report.html,
tuned/report.txt and tuned/records.jsonl (a rerun resumes from it). Use the settings with
``grogu rerank --settings tuned/settings.json`` or ``settings="tuned/settings.json"`` in Python.
"""

from __future__ import annotations

import argparse

from ...runtime.models import DEFAULT_MODEL


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli.arguments import POSITIVE_INT, TOP_N

    p.add_argument("--examples", required=True, help="JSONL of {'question', 'answers', 'documents'} lines")
    p.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help=f"the pipeline's LLM: alias, path, .gguf or hub id (default {DEFAULT_MODEL})",
    )
    p.add_argument(
        "--prompt-file",
        default=None,
        help="the pipeline's QA prompt: text with {context} and {question}, or .json {'system', 'user'} "
        "(default: LlamaIndex's chat QA prompt)",
    )
    p.add_argument("--top-n", type=TOP_N, default=3, help="documents the pipeline keeps (default 3)")
    p.add_argument("--out", required=True, help="folder for settings.json, report.html, report.txt, records.jsonl")
    p.add_argument(
        "--max-new-tokens", type=POSITIVE_INT, default=None, help="the pipeline's answer budget (default 64)"
    )
    p.add_argument(
        "--max-cost",
        type=float,
        default=None,
        help="the most a setting may cost on average, relative to the plain answer, e.g. 1.5 (default: no cap)",
    )
    p.add_argument("--folds", type=POSITIVE_INT, default=5, help="cross-validation folds (default 5)")
    p.add_argument(
        "--grid",
        choices=("small", "full"),
        default="small",
        help="the settings tried: 'small' (26, the default) or 'full' (about 1,200)",
    )
    p.add_argument(
        "--choose-by",
        choices=("dense", "words"),
        default=None,
        help="the judge of the choice: 'dense' (the gold answers' log-likelihood under the LLM; the default "
        "where the records hold it) or 'words' (whole words right or wrong: the rule before it)",
    )
    p.add_argument(
        "--batch", type=POSITIVE_INT, default=None, help="questions answered together (default 1 on CPU, 8 on CUDA)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: CUDA if available)")
    p.add_argument(
        "--dtype", default=None, help="float32, bfloat16 … (default: bf16 on CUDA, float32 on CPU and for GGUF)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    import os

    from ...core.prompts import read_prompt_file
    from .api import tune

    try:
        prompt = read_prompt_file(args.prompt_file) if args.prompt_file else None
        if args.max_cost is not None and not args.max_cost >= 1.0:
            raise ValueError(f"--max-cost must be a number >= 1 (the plain answer costs 1), got {args.max_cost}")
        tuned = tune(
            args.examples,
            model=args.model,
            qa_prompt=prompt,
            top_n=args.top_n,
            out=args.out,
            max_new_tokens=args.max_new_tokens,
            max_cost=args.max_cost,
            folds=args.folds,
            grid=args.grid,
            choose_by=args.choose_by,
            batch=args.batch,
            device=args.device,
            dtype=args.dtype,
            progress=not args.quiet,
        )
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise SystemExit(f"grogu tune: {e}") from None
    print(f"wrote {tuned.path} and {os.path.join(args.out, 'report.html')}")
    return 0


__all__ = ["add_arguments", "run"]
