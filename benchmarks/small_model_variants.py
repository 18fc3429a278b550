"""Utility variants for small, copy-prone LLMs (issue #8): collect, tune, report.

The protocol is the evaluation harness's (``grogu.experiments``: ``winrate`` = GROGU paper Table 1,
``noise`` = §4.2) reused through its public pieces (items, retrievers, relevance, answer checks,
statistics); what this script adds is (1) a tuning / held-out split of SQuAD v1.1 dev **by article**
and (2) per-token statistics saved for every scored context, so every metric variant, and every
setting tried while tuning, comes from the same generation pass.

Split (seeded, ``--seed`` 0): the 48 dev articles are shuffled; the first third (16 articles) is the
*tuning* pool, the other 32 the *held-out* pool. Questions are sampled from each pool with the same
seed. Tuning only ever reads tuning-pool records; the report only held-out ones.

  # 1. one scoring pass per (model, answer style, experiment, split); resumable (JSONL, one line a question)
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment winrate --split tune --n 150
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment winrate --split heldout --n 300
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment noise --split heldout --n 100
  #    add --style short for the short-answer scoring pass, --model PATH.gguf for another model
  # 2. the variants' settings on the tuning records (win-rates for each grid point)
  python benchmarks/small_model_variants.py tune --runs runs/small_models
  # 3. the table on the held-out records (markdown to stdout, JSON next to the records)
  python benchmarks/small_model_variants.py report --runs runs/small_models
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import warnings
from typing import Any, Callable, Sequence

import torch

from grogu import metrics as M
from grogu.experiments import common as C
from grogu.experiments import noise as N
from grogu.experiments import winrate as W
from grogu.experiments.retrieval import hard_negatives, make_retriever

OUT = "runs/small_models"
RELEVANCE = ("bm25", "minilm")


# ---------------------------------------------------------------- split
def split_pools(seed: int = 0) -> tuple[list[dict], dict[str, list[dict]]]:
    """(paragraphs, {'tune': questions, 'heldout': questions}): SQuAD dev split by article (a third
    of the articles, shuffled with ``seed``, for tuning)."""
    paragraphs, questions = C.squad_data()
    titles = sorted({p["title"] for p in paragraphs})
    random.Random(seed).shuffle(titles)
    tune_titles = set(titles[: len(titles) // 3])
    pools: dict[str, list[dict]] = {"tune": [], "heldout": []}
    for q in questions:
        pools["tune" if paragraphs[q["gold"]]["title"] in tune_titles else "heldout"].append(q)
    return paragraphs, pools


def winrate_items(questions: Sequence[dict], paragraphs: list[dict], ret: Any, seed: int) -> list[dict]:
    """As ``grogu.experiments.winrate.build_items``, for given questions."""
    texts = [p["text"] for p in paragraphs]
    items = []
    for q in questions:
        exclude = {q["gold"]}
        distractor = hard_negatives(ret.scores(q["question"]), texts, q["answers"], exclude, 1)[0]
        rnd = C.random_paragraph(random.Random(f"{seed}-{q['id']}"), paragraphs, exclude | {distractor}, q["answers"])
        items.append({"id": q["id"], "question": q["question"], "answers": q["answers"],
                      "paragraph_ids": {"gold": q["gold"], "distractor": distractor, "random": rnd},
                      "texts": {"gold": texts[q["gold"]], "distractor": texts[distractor], "random": texts[rnd]}})
    return items


def noise_items(questions: Sequence[dict], paragraphs: list[dict], ret: Any, seed: int) -> list[dict]:
    """As ``grogu.experiments.noise.build_items``, for given questions."""
    texts = [p["text"] for p in paragraphs]
    items = []
    for q in questions:
        rng = random.Random(f"{seed}-{q['id']}")
        retrieved = hard_negatives(ret.scores(q["question"]), texts, q["answers"], {q["gold"]}, N.N_NOISE)
        rnd: list[int] = []
        while len(rnd) < N.N_NOISE:
            rnd.append(C.random_paragraph(rng, paragraphs, {q["gold"], *rnd}, q["answers"]))
        pos = rng.randrange(N.N_NOISE + 1)
        ids = {name: noise[:pos] + [q["gold"]] + noise[pos:] for name, noise in (("random", rnd), ("retrieved", retrieved))}
        items.append({"id": q["id"], "question": q["question"], "answers": q["answers"], "gold_position": pos,
                      "paragraph_ids": ids})
    return items


# ---------------------------------------------------------------- collect
def _r(t: torch.Tensor) -> list[float]:
    return [round(float(x), 6) for x in t]


def collect(args: argparse.Namespace) -> None:
    from grogu import UtilityScorer
    from grogu.prompts import Document, TruncationWarning

    warnings.filterwarnings("ignore", category=TruncationWarning)
    torch.set_num_threads(args.threads)
    paragraphs, pools = split_pools(args.seed)
    questions = C.sample(pools[args.split], args.n, args.seed)
    texts = [p["text"] for p in paragraphs]
    tag = args.tag or os.path.splitext(os.path.basename(args.model))[0]
    path = os.path.join(args.out, f"{tag}.{args.style}.{args.experiment}.{args.split}.jsonl")
    os.makedirs(args.out, exist_ok=True)
    done = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            done = {json.loads(line)["id"] for line in f if line.strip()}
    todo = [q for q in questions if q["id"] not in done]
    print(f"{path}: {len(done)} done, {len(todo)} to go", file=sys.stderr)
    if not todo:
        return
    clock = time.perf_counter()
    ret = make_retriever("bm25", texts)
    if args.experiment == "winrate":
        items = winrate_items(todo, paragraphs, ret, args.seed)
        W.relevance(items, ret, None)
        contexts = W.DOCS
    else:
        items = noise_items(todo, paragraphs, ret, args.seed)
        N.relevance(items, ret, texts, None)
        contexts = N.CONTEXTS
    scorer = UtilityScorer(args.model, max_new_tokens=args.max_new_tokens, answer_style=args.style, device="cpu")
    print(f"setup {time.perf_counter() - clock:.0f} s; scoring with {scorer.model_name}", file=sys.stderr)
    bar = C.progress(len(items), f"{args.experiment}/{args.split}/{args.style}")
    with open(path, "a", encoding="utf-8") as out:
        for chunk in C.chunks(items, args.batch):
            jobs = []
            for it in chunk:
                for c in contexts:
                    ids = it["paragraph_ids"][c]
                    docs = [Document(texts[p]) for p in (ids if isinstance(ids, list) else [ids])]
                    jobs.append((it["question"], docs))
            started = time.perf_counter()
            results = iter(scorer._score_contexts(jobs, True))
            spent = time.perf_counter() - started
            for it in chunk:
                rec = {"id": it["id"], "question": it["question"], "answers": it["answers"],
                       "paragraph_ids": it["paragraph_ids"], "model": scorer.model_name, "style": args.style,
                       "max_new_tokens": scorer.max_new_tokens, "contexts": {},
                       "seconds": spent / len(chunk)}
                u_ids = scorer.prompts.ungrounded_ids(it["question"])
                for c in contexts:
                    r = next(results)
                    d = r.details
                    ids = it["paragraph_ids"][c]
                    docs = [Document(texts[p]) for p in (ids if isinstance(ids, list) else [ids])]
                    g_ids = scorer.prompts.grounded_ids(it["question"], docs)
                    rec["contexts"][c] = {
                        "answer": r.answer, "correct": C.is_correct(r.answer, it["answers"]),
                        "finished": r.answer_finished, "n_tokens": r.n_tokens,
                        "relevance": {m: it["utility"][c][m] for m in RELEVANCE},
                        "variants": r.variants, "token_ids": d.token_ids,
                        "h_g": _r(d.grounded_entropy), "logp_g": _r(d.grounded_logprob),
                        "h_u": _r(d.ungrounded_entropy), "logp_u": _r(d.ungrounded_logprob),
                        "grounded_ids": g_ids, "ungrounded_ids": u_ids,
                    }
                out.write(json.dumps(rec) + "\n")
            out.flush()
            bar.update(len(chunk))
    bar.close()
    print(f"wall {time.perf_counter() - clock:.0f} s", file=sys.stderr)


# ---------------------------------------------------------------- analysis helpers
def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stats_of(ctx: dict, ngram: int = M.COPY_NGRAM) -> M.AnswerStats:
    copied = M.copied_mask(ctx["token_ids"], ctx["grounded_ids"], ctx["ungrounded_ids"], ngram)
    return M.AnswerStats(torch.tensor(ctx["h_g"], dtype=torch.float64), torch.tensor(ctx["logp_g"], dtype=torch.float64),
                         torch.tensor(ctx["h_u"], dtype=torch.float64), torch.tensor(ctx["logp_u"], dtype=torch.float64),
                         copied)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="one scoring pass; per-token statistics to JSONL")
    c.add_argument("--experiment", choices=("winrate", "noise"), default="winrate")
    c.add_argument("--split", choices=("tune", "heldout"), default="heldout")
    c.add_argument("--n", type=int, default=300)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--model", default=C.DEFAULT_MODEL)
    c.add_argument("--tag", default=None, help="file-name tag of the model (default: from --model)")
    c.add_argument("--style", choices=("long", "short"), default="long")
    c.add_argument("--max-new-tokens", type=int, default=None)
    c.add_argument("--batch", type=int, default=8, help="questions per engine call")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    if args.command == "collect":
        collect(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
