"""How close is GROGU through an inference server to GROGU in process? Truncation and quantisation apart.

A server returns the top-k log-probabilities of each token position, not the whole distribution, and
it runs its own numerics (llama.cpp runs the GGUF's quantised weights natively; transformers
de-quantises them to float32). Two parts, each one run:

``truncation`` (no server): the in-process engine's full next-token distributions at every answer
position, grounded and ungrounded, cut to their top k and turned into entropies with each tail
correction of :mod:`grogu.runtime.inference_server.topk`. Per question, documents are ranked by the exact utility and by
the truncated one: mean Spearman over questions, and how often the top document is the same. The
tail correction is chosen on the tuning questions (every other question) and reported on the rest.

``server``: the same questions through a real server (``--url``; llama-cpp-python's server serving
the embedded SmolLM2 GGUF, for example) at each k against the in-process exact scores: the share of
contexts with the same greedy answer, the Spearman of per-document utility, the top-document
agreement, the agreement of the context mode's choice (four candidate contexts of three documents),
and the time of both. Differences at the largest k are mostly the server's numerics (quantisation);
what grows as k shrinks is truncation.

    OMP_NUM_THREADS=1 python benchmarks/server_fidelity.py truncation --questions 60
    python -m llama_cpp.server --model "$(python -c 'import grogu.runtime.models as m; print(m.embedded_path("smollm2-135m-instruct"))')" \
        --port 8089 --n_ctx 2048 &
    OMP_NUM_THREADS=1 python benchmarks/server_fidelity.py server --url http://127.0.0.1:8089 --ks 5,20,100 --questions 40
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

import torch
from grogu_research.experiments.common.data import random_paragraph, squad_questions

from grogu import UtilityScorer, get_engine, metrics
from grogu.core.prompts import Document, PromptBuilder
from grogu.runtime.inference_server import ServerTarget
from grogu.runtime.inference_server.topk import TAILS, topk_entropy
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402


def spearman(a, b) -> float:
    from scipy.stats import spearmanr

    r = spearmanr(a, b).statistic
    return 1.0 if r != r else float(r)  # constant ranks on both sides count as agreement


def questions(n: int, docs: int, seed: int):
    paragraphs, qs = squad_questions(n, seed)
    rng = random.Random(seed)
    out = []
    for q in qs:
        ids = [q["gold"]]
        while len(ids) < docs:
            ids.append(random_paragraph(rng, paragraphs, set(ids), q["answers"]))
        rng.shuffle(ids)
        out.append((q["question"], [Document(paragraphs[i]["text"], paragraphs[i]["title"]) for i in ids]))
    return out


@torch.inference_mode()
def full_logprobs(engine, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """Log-probabilities over the whole vocabulary at each answer position (float64)."""
    ids = torch.tensor([prompt + answer], device=engine.device)
    with engine.kernels():
        logits = engine.model(input_ids=ids).logits[0, len(prompt) - 1 : len(prompt) + len(answer) - 1]
    return torch.log_softmax(logits.double(), dim=-1).cpu()


def entropies(logp: torch.Tensor, k: int | None, tail: str) -> torch.Tensor:
    if k is None:
        return -(logp.exp() * logp).sum(-1)
    top = torch.topk(logp, k, dim=-1).values
    return torch.tensor([topk_entropy(r.tolist(), logp.shape[-1], tail) for r in top], dtype=torch.float64)


def truncation(args) -> dict:
    engine = get_engine(args.model)
    prompts = PromptBuilder(engine.tokenizer, engine.max_context_tokens, args.max_new_tokens)
    items = questions(args.questions, args.docs, args.seed)
    ks = [int(k) for k in args.ks.split(",")]
    records = []
    for qi, (query, docs) in enumerate(items):
        u_ids = prompts.ungrounded_ids(query)
        g_ids = [prompts.grounded_ids(query, [d]) for d in docs]
        gens = engine.generate(g_ids, args.max_new_tokens)
        per_doc = []
        for g, gen in zip(g_ids, gens):
            ans = gen.token_ids or [gen.stop_token_id]
            lg, lu = full_logprobs(engine, g, ans), full_logprobs(engine, u_ids, ans)
            lp_g = lg[torch.arange(len(ans)), ans]
            lp_u = lu[torch.arange(len(ans)), ans]
            row = {}
            for k in [None] + ks:
                for tail in TAILS if k is not None else ("exact",):
                    h_g, h_u = entropies(lg, k, tail), entropies(lu, k, tail)
                    row[f"{k}/{tail}"] = metrics.compute(args.metric, h_g, lp_g, h_u, logp_u=lp_u).utility
            per_doc.append(row)
        records.append(per_doc)
        print(f"\r{qi + 1}/{len(items)}", end="", file=sys.stderr)
    print(file=sys.stderr)
    keys = [k for k in records[0][0] if k != "None/exact"]

    def summary(recs):
        out = {}
        for key in keys:
            rho = [spearman([d["None/exact"] for d in r], [d[key] for d in r]) for r in recs]
            top = [
                max(range(len(r)), key=lambda i: r[i]["None/exact"]) == max(range(len(r)), key=lambda i: r[i][key])
                for r in recs
            ]
            out[key] = {"spearman": statistics.mean(rho), "top_agree": sum(top) / len(top)}
        return out

    tune, held = records[0::2], records[1::2]
    res = {
        "tune": summary(tune),
        "held": summary(held),
        "n_tune": len(tune),
        "n_held": len(held),
        "metric": args.metric,
        "docs": args.docs,
    }
    best = {}
    for k in ks:
        best[k] = max(TAILS, key=lambda t: res["tune"][f"{k}/{t}"]["spearman"])
    res["chosen_tail_on_tune"] = best
    print(
        f"\nTruncation alone ({args.metric}, {args.docs} documents per question; mean per-question Spearman "
        f"with the exact utility / top document the same); tune n={len(tune)}, held-out n={len(held)}\n"
    )
    print("| k | tail | tune rho | held-out rho | held-out top-1 agree |")
    print("|---|---|---|---|---|")
    for k in ks:
        for t in TAILS:
            key = f"{k}/{t}"
            mark = " (chosen)" if best[k] == t else ""
            print(
                f"| {k} | {t}{mark} | {res['tune'][key]['spearman']:.3f} | {res['held'][key]['spearman']:.3f} "
                f"| {res['held'][key]['top_agree']:.2f} |"
            )
    return res


def context_candidates(n_docs: int) -> list[list[int]]:
    """The context mode's swap candidates over documents in retrieval order: top-3, and 3 swapped for 4, 5."""
    base = [0, 1, 2]
    return [base] + [[0, 1, j] for j in range(3, min(n_docs, 5))] + [[2, 1, 0]]


def server(args) -> dict:
    items = questions(args.questions, args.docs, args.seed)
    local = UtilityScorer(args.model, max_new_tokens=args.max_new_tokens, metric=args.metric)
    t0 = time.perf_counter()
    exact_doc = local.score_batch(items)
    exact_ctx = local.score_contexts_batch(
        [(q, [[docs[i] for i in c] for c in context_candidates(len(docs))]) for q, docs in items]
    )
    t_local = time.perf_counter() - t0
    out = {"questions": len(items), "docs": args.docs, "local_s": t_local, "ks": {}}
    print(
        f"\nThrough the server ({args.url}) against in-process exact; {len(items)} questions x {args.docs} "
        f"documents, {args.metric}; in process {t_local:.1f} s\n"
    )
    print(
        "| top-k | tail | same greedy answer | Spearman (per-document utility) | top document agrees | "
        "context choice agrees | server s |"
    )
    print("|---|---|---|---|---|---|---|")
    for k in [int(k) for k in args.ks.split(",")]:
        for tail in args.tails.split(","):
            target = ServerTarget(
                args.url,
                model=args.served_model,
                api="llama-cpp",
                tokenizer=args.model,
                top_logprobs=k,
                tail=tail,
                context_window=args.context_window,
            )
            remote = UtilityScorer(target, max_new_tokens=args.max_new_tokens, metric=args.metric)
            t0 = time.perf_counter()
            doc = remote.score_batch(items)
            ctx = remote.score_contexts_batch(
                [(q, [[docs[i] for i in c] for c in context_candidates(len(docs))]) for q, docs in items]
            )
            secs = time.perf_counter() - t0
            same = [a.answer == b.answer for ra, rb in zip(exact_doc, doc) for a, b in zip(ra, rb)]
            rho = [spearman([a.score for a in ra], [b.score for b in rb]) for ra, rb in zip(exact_doc, doc)]
            top = [
                max(ra, key=lambda r: r.score).index == max(rb, key=lambda r: r.score).index
                for ra, rb in zip(exact_doc, doc)
            ]
            pick = [
                max(range(len(ca)), key=lambda i: ca[i].score) == max(range(len(cb)), key=lambda i: cb[i].score)
                for ca, cb in zip(exact_ctx, ctx)
            ]
            row = {
                "same_answer": sum(same) / len(same),
                "spearman": statistics.mean(rho),
                "top_agree": sum(top) / len(top),
                "context_agree": sum(pick) / len(pick),
                "server_s": secs,
            }
            out["ks"][f"{k}/{tail}"] = row
            print(
                f"| {k} | {tail} | {row['same_answer']:.0%} | {row['spearman']:.3f} | {row['top_agree']:.0%} | "
                f"{row['context_agree']:.0%} | {secs:.1f} |"
            )
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("part", choices=["truncation", "server"])
    p.add_argument("--model", default=DEFAULT_MODEL, help="the in-process model (and the server's tokenizer)")
    p.add_argument("--questions", type=int, default=40)
    p.add_argument("--docs", type=int, default=5)
    p.add_argument("--ks", default="5,20,100")
    p.add_argument("--tails", default="uniform")
    p.add_argument("--metric", default=metrics.DEFAULT_METRIC)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--url", default="http://127.0.0.1:8089")
    p.add_argument("--served-model", default=None)
    p.add_argument("--context-window", type=int, default=2048)
    p.add_argument("--json", default=None, help="write the figures here")
    args = p.parse_args(argv)
    res = truncation(args) if args.part == "truncation" else server(args)
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**res, "meta": meta(settings=settings)}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
