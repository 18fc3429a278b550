"""``grogu-research rewrite-pairs``: the command line of :func:`~grogu_research.rewrite.build_rewrite_pairs`."""

from __future__ import annotations

import argparse

from grogu.core.files import read_documents
from grogu.rerank.retrieval import BM25Retriever, DenseRetriever
from grogu.runtime.models import DEFAULT_MODEL
from grogu_research.rewrite.candidates import DEFAULT_N_CANDIDATES
from grogu_research.rewrite.pairs import DEFAULT_DROP_RATIO
from grogu_research.rewrite.pipeline import build_rewrite_pairs
from grogu_research.rewrite.scoring import DEFAULT_K
from grogu_research.rewrite.turns import read_turns


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``grogu-research rewrite-pairs``: GROGU-ranked SFT/DPO data for a conversational query rewriter."""
    p.description = (
        "Rank candidate rewrites of conversational questions by the GROGU utility of their top-k "
        "passages for the target LLM; write sft.jsonl, dpo.jsonl (TRL formats), scores.jsonl and "
        "summary.json."
    )
    p.add_argument(
        "--turns", required=True, help="JSONL of {'question', 'history'?: [...], 'candidates'?: [...], 'id'?} objects"
    )
    p.add_argument("--corpus", required=True, help="passages: .jsonl, .json or text file (paragraphs)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    p.add_argument("--embedder", default="all-minilm-l6-v2", help="sentence-transformers model for --retriever dense")
    p.add_argument("-k", "--k", type=int, default=DEFAULT_K, help="passages per rewrite, scored as one context")
    p.add_argument("--model", default=DEFAULT_MODEL, help="target LLM (alias, path, .gguf, hub id)")
    p.add_argument("--rewriter", default=None, help="LLM that samples candidates (default: --model)")
    p.add_argument("--n-candidates", type=int, default=DEFAULT_N_CANDIDATES, help="sampled rewrites per turn")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-original", action="store_true", help="do not rank the original question as a candidate")
    p.add_argument(
        "--drop-ratio",
        type=float,
        default=DEFAULT_DROP_RATIO,
        help="fraction of DPO pairs with the smallest GROGU gap to drop (default 0.5)",
    )
    p.add_argument("--metric", default=None, help="GROGU variant (default key_entropy)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="longest grounded answer (default 64)")
    p.add_argument("--rewrite-max-new-tokens", type=int, default=48)
    p.add_argument("--turns-per-batch", type=int, default=8)
    p.add_argument("--device", default=None)
    p.add_argument("--dtype", default=None)


def run(args: argparse.Namespace) -> int:
    turns = read_turns(args.turns)
    if not turns:
        raise SystemExit(f"{args.turns}: no turns")
    corpus = read_documents(args.corpus)
    if not corpus:
        raise SystemExit(f"{args.corpus}: the corpus is empty")
    retriever = (
        BM25Retriever(corpus) if args.retriever == "bm25" else DenseRetriever(corpus, args.embedder, device=args.device)
    )
    rewriter = None
    if args.rewriter:
        from grogu.runtime.engine import get_engine

        rewriter = get_engine(args.rewriter, device=args.device, dtype=args.dtype)
    pairs = build_rewrite_pairs(
        turns,
        retriever,
        args.model,
        rewriter=rewriter,
        n_candidates=args.n_candidates,
        temperature=args.temperature,
        seed=args.seed,
        rewrite_max_new_tokens=args.rewrite_max_new_tokens,
        include_original=not args.no_original,
        k=args.k,
        drop_ratio=args.drop_ratio,
        metric=args.metric,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        dtype=args.dtype,
        turns_per_batch=args.turns_per_batch,
        progress=True,
    )
    paths = pairs.write(args.out)
    s = pairs.summary
    print(
        f"{s['turns']} turns, {s['unique_candidates_per_turn_mean']:.1f} unique candidates/turn; "
        f"SFT: {s['sft_records']} records ({s['sft_chose_original_question']} keep the original question); "
        f"DPO: {s['pairs_kept']} pairs kept of {s['pairs_before_drop']} "
        f"(dropped {s['pairs_dropped_small_gap']} smallest-gap; no pair: {s['turns_without_pair']})"
    )
    for name, path in paths.items():
        print(f"  {name}: {path}")
    return 0


__all__ = ["add_arguments", "run"]
