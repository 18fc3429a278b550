"""Engine speed: GROGU scoring of k documents per query, engine against the naive loop, transformers'
``generate`` and the floor.

For k in {1, 5, 10, 20} real SQuAD dev paragraphs of about 120 tokens, on the same inputs in one run:
- naive: per document ``generate``, then a grounded and an ungrounded forward pass (grogu_research.naive);
- generate: per document transformers' greedy ``generate`` alone (what a plain pipeline's answer costs);
- engine: ``UtilityScorer.score`` (one batched engine pass for all k documents: the answers with their
  statistics, and the ungrounded teacher forcing), once per ``--variants`` entry (engine settings on the
  same model: e.g. CUDA graphs or prompt-lookup drafts off);
- floor: one batched forward pass over the same grounded tokens (prompt + the engine's answers) with
  logits only at the answer positions — what reading the grounded statistics costs once the answers
  are known, a lower bound that needs no generation at all.
Reports seconds per query (mean and max over queries) and the ratios of the means naive/engine,
engine/generate and engine/floor. On a GPU each variant's decode loop is also timed alone: ms per decode
step, and that time over the bandwidth floor of its steps (each step must stream the weights' bytes plus
its rows' KV bytes once; the device's bandwidth is looked up by name, or ``--bandwidth-tbs``). Every arm runs the engine's kernels (``engine.kernels()``: oneDNN
linear layers where the engine picked them, see grogu.runtime.engine.kernels; ``--cpu-linear`` sets the choice).

``--random-arch qwen2.5-7b-proxy`` on a CPU is the proxy of a GPU's per-step cost: a 7B model's 28 layers
and heads with a hidden size of 112 run at the speed of their host-side overhead.

  python benchmarks/engine_speed.py                        # packaged SmolLM2 on this machine
  python benchmarks/engine_speed.py --random-arch qwen2.5-7b-proxy --ks 1,10 --cpu-linear default
  python benchmarks/engine_speed.py --random-arch qwen2.5-7b --device cuda --ks 1,10,20 \
      --variants "default;cuda_graphs=False;prompt_lookup=0"      # GPU check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings

import torch
from grogu_research.naive import greedy_generate, naive_grogu_stats
from grogu_research.testing import embedded_tokenizer, squad_paragraphs

import grogu
from grogu import Document, Engine, EngineConfig, UtilityScorer
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

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
    # the CPU proxy of a GPU's per-step cost: qwen2.5-7b's 28 layers and 28/4 heads with a hidden size of
    # 112 (head dim 4), so that a step costs what its kernel launches and Python cost, as on a GPU
    "qwen2.5-7b-proxy": dict(
        hidden_size=112,
        intermediate_size=224,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=49152,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
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


#: memory bandwidth (TB/s) by device name, for the decode floor
BANDWIDTH_TBS = {"H200": 4.8, "H100 PCIe": 2.0, "H100 NVL": 3.9, "H100": 3.35, "A100-SXM4-80GB": 2.04, "A100": 1.55}


def bandwidth_tbs(device: torch.device, given: float | None) -> float | None:
    if given or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((bw for key, bw in BANDWIDTH_TBS.items() if key in name), None)


def weight_bytes(model) -> int:
    """Bytes a decode step streams for the weights: every parameter, the input embedding left out when it
    is not also the output head (a step reads only its rows)."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    return total - (0 if emb is head else emb.numel() * emb.element_size())


def kv_bytes_per_token(model) -> int:
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * next(model.parameters()).element_size()


class DecodeClock:
    """Times an engine's decode loop alone (synchronised around each call on a GPU) and adds up the
    bandwidth floor of the steps it ran: per step, the weights' bytes plus each row's KV bytes."""

    def __init__(self, engine: Engine, bandwidth: float | None) -> None:
        self.engine, self.bandwidth = engine, bandwidth
        self.weights, self.kv = weight_bytes(engine.model), kv_bytes_per_token(engine.model)
        self.seconds = self.floor = 0.0
        self.steps = 0
        self.on = False  # counts only while the timed arm runs
        decode = engine.decoder.decode

        def run(start, histories, max_new_tokens, **kw):
            if not self.on:
                return decode(start, histories, max_new_tokens, **kw)
            cuda = engine.device.type == "cuda"
            if cuda:
                torch.cuda.synchronize()
            before, t0 = engine.decoder.steps, time.perf_counter()
            out = decode(start, histories, max_new_tokens, **kw)
            if cuda:
                torch.cuda.synchronize()
            self.seconds += time.perf_counter() - t0
            steps = engine.decoder.steps - before
            self.steps += steps
            if bandwidth:  # rows read their prompt plus half their answer on average
                context = sum(len(h) for h in histories) + sum(len(g.token_ids) for g in out) / 2
                self.floor += steps * (self.weights + context * self.kv) / (bandwidth * 1e12)
            return out

        engine.decoder.decode = run


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


@torch.inference_mode()
def first_token_margins(engine: Engine, prompts: list[list[int]]) -> dict:
    """Why low-precision answers may differ from the naive loop's: the gap between the top two logits of
    each prompt's first answer token, against bfloat16's spacing at the top logit (2 ** -7 of its power
    of two). Random weights give near-flat logits, so rounding of that size flips the greedy choice."""
    gaps, spacing = [], []
    for p in prompts:
        logits = engine.model(input_ids=torch.tensor([p], device=engine.device), logits_to_keep=1).logits[0, -1]
        top = logits.float().topk(2).values
        gaps.append(float(top[0] - top[1]))
        spacing.append(2.0 ** (torch.floor(torch.log2(top[0].abs().clamp(min=1e-30))).item() - 7))
    return {
        "prompts": len(prompts),
        "median_gap": statistics.median(gaps),
        "median_bf16_spacing": statistics.median(spacing),
        "share_gap_under_bf16_spacing": sum(g < s for g, s in zip(gaps, spacing)) / len(gaps),
    }


def parse_variants(text: str) -> dict[str, dict]:
    """'default;cuda_graphs=False;prompt_lookup=0' -> {name: EngineConfig keyword settings}."""
    out = {}
    for v in filter(None, (x.strip() for x in text.split(";"))):
        settings = {}
        for item in filter(None, v.split(",")):
            if item == "default":
                continue
            key, value = item.split("=")
            settings[key] = {"True": True, "False": False, "None": None}.get(value, value)
            if isinstance(settings[key], str) and value.isdigit():
                settings[key] = int(value)
        out[v] = settings
    return out


@torch.inference_mode()
def generate_only(model, prompts, max_new_tokens, stops, pad) -> int:
    """transformers' greedy ``generate`` on each prompt alone; returns the answer tokens made."""
    return sum(len(greedy_generate(model, p, max_new_tokens, stops, pad)) for p in prompts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="1,5,10,20")
    ap.add_argument("--queries", type=int, default=3, help="queries per k (mean and max reported)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--device", default=None)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--random-arch", choices=sorted(ARCHS), help="a random-weight model of this architecture")
    ap.add_argument("--skip-naive-above", type=int, default=10**9, help="skip the naive loop for larger k")
    ap.add_argument(
        "--variants",
        default="default",
        help="engine settings to time on the same model and inputs, ';'-separated, each 'default' or "
        "'key=value,...' (e.g. 'default;cuda_graphs=False;prompt_lookup=0')",
    )
    ap.add_argument("--cpu-linear", default="auto", help="the engine's cpu_linear (every arm runs its kernels)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    ap.add_argument("--tokenizer", default=None, help="with --random-arch: a saved tokenizer's folder")
    ap.add_argument("--bandwidth-tbs", type=float, default=None, help="the device's memory bandwidth (TB/s)")
    args = ap.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    warnings.simplefilter("ignore")
    variants = parse_variants(args.variants)

    if args.random_arch:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        if args.dtype:
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
        if args.tokenizer:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        else:
            tokenizer = embedded_tokenizer()
        torch.manual_seed(0)
        with torch.device(device):
            model = Qwen2ForCausalLM(Qwen2Config(**ARCHS[args.random_arch])).to(dtype).eval()
        name = f"{args.random_arch} (random weights)"
    else:
        model, tokenizer = grogu.load_model(DEFAULT_MODEL, device=args.device, dtype=args.dtype)
        name = "SmolLM2-135M-Instruct (packaged GGUF, dequantised)"
    engines = {
        v: Engine((model, tokenizer), config=EngineConfig(cpu_linear=args.cpu_linear, **kw))
        for v, kw in variants.items()
    }
    engine = next(iter(engines.values()))
    bandwidth = bandwidth_tbs(engine.device, args.bandwidth_tbs)
    clocks = {v: DecodeClock(e, bandwidth) for v, e in engines.items()}
    scorers = {v: UtilityScorer(e, max_new_tokens=args.max_new_tokens) for v, e in engines.items()}
    scorer = next(iter(scorers.values()))
    paras = pick_documents(engine.tokenizer, max(ks) + args.queries)

    machine = (
        torch.cuda.get_device_name(engine.device)
        if engine.device.type == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(
        f"model: {name}; device: {engine.device} ({machine}); dtype: {engine.dtype}; "
        f"max_new_tokens={args.max_new_tokens}; linear kernels: {engine.linear_backend}; torch {torch.__version__}; "
        f"variants: {list(variants)}",
        flush=True,
    )
    rows = []
    for s in scorers.values():  # warm-up (allocator, kernels, a graph capture)
        s.score(paras[0]["question"], [paras[1]["text"]])
    with engine.kernels():
        generate_only(
            model,
            [scorer.prompts.grounded_ids(paras[0]["question"], [Document(paras[1]["text"])])],
            4,
            engine.stop_token_ids,
            engine.pad_token_id,
        )
    for k in ks:
        t = {v: [] for v in variants} | {"naive": [], "generate": [], "floor": []}
        n_tok, gen_tok, steps, graphs = [], [], {v: 0 for v in variants}, {v: 0 for v in variants}
        differ, compared = {v: 0 for v in variants}, 0
        for c in clocks.values():
            c.seconds = c.floor = 0.0
            c.steps = 0
        for q in range(args.queries):
            query = paras[q]["question"]
            docs = [Document(p["text"], p["title"]) for p in paras[q + 1 : q + 1 + k]]
            grounded = [scorer.prompts.grounded_ids(query, [d]) for d in docs]
            results = {}
            for v, sc in scorers.items():
                e = engines[v]
                before = (e.lookup_steps, e.cuda_graphs_captured)
                clocks[v].on = True
                dt, results[v] = timed(lambda: sc.score(query, docs), engine.device)
                clocks[v].on = False
                t[v].append(dt)
                steps[v] += e.lookup_steps - before[0]
                graphs[v] += e.cuda_graphs_captured - before[1]
            gens = engine.generate(grounded, args.max_new_tokens)
            answers = [g.token_ids + ([g.stop_token_id] if g.finished else []) for g in gens]
            n_tok.append(sum(len(g.token_ids) for g in gens) / k)
            with engine.kernels():
                t["floor"].append(timed(lambda: floor_pass(engine, grounded, answers), engine.device)[0])
            if k <= args.skip_naive_above:
                with engine.kernels():
                    dt, made = timed(
                        lambda: generate_only(
                            model, grounded, args.max_new_tokens, engine.stop_token_ids, engine.pad_token_id
                        ),
                        engine.device,
                    )
                    t["generate"].append(dt)
                    gen_tok.append(made / k)
                    dt, ref = timed(
                        lambda: naive_grogu_stats(
                            model,
                            grounded,
                            scorer.prompts.ungrounded_ids(query),
                            args.max_new_tokens,
                            engine.stop_token_ids,
                            engine.pad_token_id,
                        ),
                        engine.device,
                    )
                t["naive"].append(dt)
                compared += k
                for v, r in results.items():
                    same = sum(a.answer == engine.decode(n.token_ids) for a, n in zip(r, ref))
                    differ[v] += k - same
                    if same != k:
                        print(
                            f"  note: k={k} query {q} {v}: {k - same} answer(s) differ from the naive loop", flush=True
                        )
        mean = statistics.mean
        row = {"k": k, "answer_tokens": mean(n_tok), "generate_answer_tokens": mean(gen_tok) if gen_tok else None}
        row["answers_compared"] = compared
        for arm, xs in t.items():
            row[f"{arm}_s"] = mean(xs) if xs else None
            row[f"{arm}_s_max"] = max(xs) if xs else None
            row[f"{arm}_s_median"] = statistics.median(xs) if xs else None
        for v in variants:
            row[f"{v}_steps"] = steps[v] / args.queries
            row[f"{v}_graphs"] = graphs[v] / args.queries
            row[f"{v}_answers_differing_from_naive"] = differ[v] if compared else None
            if t["naive"]:
                row[f"naive_over_{v}"] = row["naive_s"] / row[f"{v}_s"]
                row[f"{v}_over_generate"] = row[f"{v}_s"] / row["generate_s"]
            row[f"{v}_over_floor"] = row[f"{v}_s"] / row["floor_s"]
            c = clocks[v]
            row[f"{v}_decode_ms_per_step"] = 1e3 * c.seconds / c.steps if c.steps else None
            row[f"{v}_decode_over_bandwidth_floor"] = c.seconds / c.floor if c.floor else None
        rows.append(row)
        print(json.dumps(row), flush=True)

    print(f"\nmean s/query over {args.queries} queries (max in brackets); ratios of the means")
    for v in variants:
        print(f"\nengine: {v}")
        print("| k | naive loop | generate | engine | floor | naive / engine | engine / generate | engine / floor |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:

            def cell(key):
                return f"{r[key]:.3f} ({r[key + '_max']:.3f})" if r.get(key) is not None else "–"

            ratio = r.get(f"naive_over_{v}")
            over_gen = r.get(f"{v}_over_generate")
            print(
                f"| {r['k']} | {cell('naive_s')} | {cell('generate_s')} | {cell(v + '_s')} | {cell('floor_s')} | "
                f"{f'{ratio:.1f}×' if ratio else '–'} | {f'{over_gen:.2f}×' if over_gen else '–'} | "
                f"{r[v + '_over_floor']:.2f}× |"
            )
        for r in rows:
            if r.get(f"{v}_decode_ms_per_step") is not None:
                over = r[f"{v}_decode_over_bandwidth_floor"]
                print(
                    f"k={r['k']}: decode {r[f'{v}_decode_ms_per_step']:.2f} ms a step"
                    + (f", {over:.2f}× the bandwidth floor ({bandwidth} TB/s)" if over else "")
                )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "model": name,
                    "device": str(engine.device),
                    "machine": machine,
                    "dtype": str(engine.dtype),
                    "torch": torch.__version__,
                    "queries": args.queries,
                    "variants": variants,
                    "linear_kernels": engine.linear_backend,
                    "bandwidth_tbs": bandwidth,
                    "first_token_margins": first_token_margins(
                        engine,
                        [scorer.prompts.grounded_ids(paras[0]["question"], [Document(p["text"])]) for p in paras[1:21]],
                    ),
                    "weight_bytes": weight_bytes(model),
                    "kv_bytes_per_token": kv_bytes_per_token(model),
                    "rows": rows,
                    "graphs": {v: e.graph_stats() for v, e in engines.items()},
                    "meta": meta(settings={k: v for k, v in vars(args).items() if v != ap.get_default(k)}),
                },
                f,
                indent=1,
            )
    sys.stdout.flush()
    for v, e in engines.items():
        stats = e.graph_stats()
        print(f"graphs {v}: {json.dumps(stats)}")
        if e.device.type == "cuda" and e.config.cuda_graphs and (stats["failed"] or stats["eager_steps"]):
            sys.exit(f"GRAPHS FAILED ({v}): a capture failed or a step ran eagerly")


if __name__ == "__main__":
    main()
