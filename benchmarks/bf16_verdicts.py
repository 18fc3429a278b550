"""The rerank pipeline in bfloat16 against float32 on the embedded SmolLM2, on a CPU: the default mode
(context, gate 'doubt'), the same fixed SQuAD questions (each with 5 real paragraphs, its own first, cut
to 60 words), 16 answer tokens. Per question and dtype: seconds, the gate's verdict, the kept documents
and the answer. Writes one JSON line per (dtype, question).

  OMP_NUM_THREADS=1 python benchmarks/bf16_verdicts.py --out benchmarks/results/bf16_verdicts_cpu.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import warnings

import torch
from grogu_research.testing import squad_paragraphs

import grogu
from grogu import Engine, UtilityScorer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import write_sidecar  # noqa: E402


def queries(n: int) -> list[tuple[str, list[str]]]:
    """The questions of tests/test_engine_dtypes.py: n fixed SQuAD questions, 5 paragraphs each."""
    paras = squad_paragraphs(n + 5, 21)
    cut = [" ".join(p["text"].split()[:60]) for p in paras]
    return [(paras[i]["question"], [cut[i], *cut[i + 1 : i + 5]]) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    model, tokenizer = grogu.load_model("smollm2-135m-instruct", device="cpu")
    rows = []
    with open(args.out, "w") as out:
        for dtype, m in (("float32", model), ("bfloat16", copy.deepcopy(model).to(torch.bfloat16))):
            scorer = UtilityScorer(Engine((m, tokenizer)), max_new_tokens=args.max_new_tokens)
            for i, (query, docs) in enumerate(queries(args.questions)):
                t0 = time.perf_counter()
                kept = scorer.rerank(query, docs, top_n=3)
                row = {
                    "dtype": dtype,
                    "question": i,
                    "seconds": round(time.perf_counter() - t0, 2),
                    "in_doubt": kept[0].gate.in_doubt,
                    "kept": [d.index for d in kept],
                    "answer": kept[0].answer,
                }
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
    write_sidecar(args.out, {k: v for k, v in vars(args).items() if v != ap.get_default(k)})
    by = {(r["dtype"], r["question"]): r for r in rows}
    same_verdict = sum(by["float32", i]["in_doubt"] == by["bfloat16", i]["in_doubt"] for i in range(args.questions))
    same_kept = sum(by["float32", i]["kept"] == by["bfloat16", i]["kept"] for i in range(args.questions))
    same_answer = sum(by["float32", i]["answer"] == by["bfloat16", i]["answer"] for i in range(args.questions))
    print(f"verdicts equal {same_verdict} / {args.questions}; kept documents {same_kept}; answers {same_answer}")


if __name__ == "__main__":
    main()
