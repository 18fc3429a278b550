"""Engine speed: GROGU scoring of k documents per query, engine against the naive loop and the floor.

For k in {1, 5, 10, 20} real SQuAD dev paragraphs of about 120 tokens, on the same inputs in one run:
- naive: per document ``generate``, then a grounded and an ungrounded forward pass (grogu_research.naive);
- engine: ``UtilityScorer.score`` (one batched engine pass for all k documents);
- floor: one batched forward pass over the same grounded tokens (prompt + the engine's answers) with
  logits only at the answer positions — what reading the grounded statistics costs once the answers
  are known, a lower bound that needs no generation at all.
Reports seconds per query (median over queries) and the ratios naive/engine and engine/floor. All
three run the same kernels (``engine.kernels()``: oneDNN linear layers where the engine picked them,
see grogu.engine.kernels); when the engine picked oneDNN, the engine is also timed with the default kernels
(``Engine(cpu_linear="default")`` on the same model), which shows what the kernel choice alone gives.

  python benchmarks/engine_speed.py                        # packaged SmolLM2 on this machine
  python benchmarks/engine_speed.py --random-arch qwen2.5-7b --device cuda --ks 10   # GPU check
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings

import torch
from grogu_research.naive import naive_grogu_stats
from grogu_research.testing import embedded_tokenizer, squad_paragraphs

from grogu import Document, Engine, UtilityScorer, get_engine
from grogu.models import DEFAULT_MODEL

ARCHS = {  # real architectures, built from a config with random weights (speed does not depend on them)
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
        max_position_embeddings=32768,
    ),
    # the same shape family, small enough to smoke-test this code path on a CPU
    "qwen2-tiny": dict(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=152064,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
    ),
}


def pick_documents(tokenizer, n: int, lo: int = 100, hi: int = 140) -> list[dict]:
    """Real SQuAD paragraphs of lo..hi tokens, in file order."""
    out = []
    for p in squad_paragraphs():
        if lo <= len(tokenizer.encode(p["text"], add_special_tokens=False)) <= hi:
            out.append(p)
            if len(out) == n:
                break
    return out


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t, out


@torch.inference_mode()
def floor_pass(engine: Engine, grounded: list[list[int]], answers: list[list[int]]) -> None:
    """One batched forward over grounded prompt + answer, left-padded, logits at answer positions."""
    seqs = [p + a for p, a in zip(grounded, answers)]
    width, keep = max(map(len, seqs)), max(1, max(map(len, answers)))
    ids = torch.full((len(seqs), width), engine.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
        mask[i, width - len(s) :] = 1
    ids, mask = ids.to(engine.device), mask.to(engine.device)
    logits = engine.model(
        input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), logits_to_keep=keep
    ).logits
    torch.log_softmax(logits.float(), -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="1,5,10,20")
    ap.add_argument("--queries", type=int, default=3, help="queries per k (median reported)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--random-arch", choices=sorted(ARCHS), help="a random-weight model of this architecture")
    ap.add_argument("--skip-naive-above", type=int, default=10**9, help="skip the naive loop for larger k")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    warnings.simplefilter("ignore")

    if args.random_arch:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        tokenizer = embedded_tokenizer()
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(**ARCHS[args.random_arch])).to(dtype).eval()
        engine = Engine(model, tokenizer)
        name = f"{args.random_arch} (random weights)"
    else:
        engine = get_engine(DEFAULT_MODEL, device=args.device, dtype=args.dtype)
        name = "SmolLM2-135M-Instruct (packaged GGUF, dequantised)"
    scorer = UtilityScorer(engine, max_new_tokens=args.max_new_tokens)
    stock = None  # the same model with the default kernels, when the engine chose others
    if engine.linear_backend != "default":
        stock = UtilityScorer(
            Engine((engine.model, engine.tokenizer), cpu_linear="default"), max_new_tokens=args.max_new_tokens
        )
    paras = pick_documents(engine.tokenizer, max(ks) + args.queries)

    machine = (
        torch.cuda.get_device_name(engine.device)
        if engine.device.type == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(
        f"model: {name}; device: {engine.device} ({machine}); dtype: {engine.dtype}; "
        f"max_new_tokens={args.max_new_tokens}; linear kernels: {engine.linear_backend}; torch {torch.__version__}",
        flush=True,
    )
    rows = []
    # warm-up (allocator, kernels)
    scorer.score(paras[0]["question"], [paras[1]["text"]])
    for k in ks:
        t_eng, t_naive, t_floor, t_stock, n_tok = [], [], [], [], []
        for q in range(args.queries):
            query = paras[q]["question"]
            docs = [Document(p["text"], p["title"]) for p in paras[q + 1 : q + 1 + k]]
            grounded = [scorer.prompts.grounded_ids(query, [d]) for d in docs]
            t, res = timed(lambda: scorer.score(query, docs), engine.device)
            t_eng.append(t)
            gens = engine.generate(grounded, args.max_new_tokens)
            answers = [g.token_ids + ([g.stop_token_id] if g.finished else []) for g in gens]
            n_tok.append(sum(len(g.token_ids) for g in gens) / k)
            with engine.kernels():
                t_floor.append(timed(lambda: floor_pass(engine, grounded, answers), engine.device)[0])
            if stock is not None:
                t_stock.append(timed(lambda: stock.score(query, docs), engine.device)[0])
            if k <= args.skip_naive_above:
                with engine.kernels():
                    t, ref = timed(
                        lambda: naive_grogu_stats(
                            engine.model,
                            grounded,
                            scorer.prompts.ungrounded_ids(query),
                            args.max_new_tokens,
                            engine.stop_token_ids,
                            engine.pad_token_id,
                        ),
                        engine.device,
                    )
                t_naive.append(t)
                same = sum(r.answer == engine.decode(n.token_ids) for r, n in zip(res, ref))
                if same != k:
                    print(f"  note: k={k} query {q}: {k - same} answer(s) differ from the naive loop", flush=True)
        med = statistics.median
        row = {
            "k": k,
            "engine_s": med(t_eng),
            "floor_s": med(t_floor),
            "naive_s": med(t_naive) if t_naive else None,
            "answer_tokens": med(n_tok),
            "engine_default_kernels_s": med(t_stock) if t_stock else None,
        }
        row["naive_over_engine"] = row["naive_s"] / row["engine_s"] if t_naive else None
        row["engine_over_floor"] = row["engine_s"] / row["floor_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(
        "\n| k | naive loop (s/query) | engine (s/query) | floor (s/query) | naive / engine | engine / floor | "
        "answer tokens | engine, default kernels (s/query) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        naive = f"{r['naive_s']:.3f}" if r["naive_s"] else "–"
        ratio = f"{r['naive_over_engine']:.1f}×" if r["naive_over_engine"] else "–"
        default = f"{r['engine_default_kernels_s']:.3f}" if r["engine_default_kernels_s"] else "–"
        print(
            f"| {r['k']} | {naive} | {r['engine_s']:.3f} | {r['floor_s']:.3f} | {ratio} | "
            f"{r['engine_over_floor']:.2f}× | {r['answer_tokens']:.0f} | {default} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": name, "device": str(engine.device), "machine": machine, "rows": rows}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
