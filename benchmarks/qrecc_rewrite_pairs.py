"""GROGU-ranked query-rewrite preference data on the QReCC sample, checked against gold answers.

    OMP_NUM_THREADS=1 python benchmarks/qrecc_rewrite_pairs.py --limit 12 --out runs/qrecc_rewrite

What it does (data: ../shared/data/qrecc-sample/):
- turns: the rows of scai_qrecc21_batch1_top1_passages.csv grouped by (conversation_no, turn_no); the
  history of a turn is the questions of the earlier turns of its conversation present in the sample
  (oldest first); its question is the row's question (already a rewrite in this sample, see docs);
- corpus: every pooled passage of every turn (deduplicated), split into windows of --chunk-words words
  with --chunk-stride (the passages average ~390 words; ten whole passages as one context would be
  ~5,000 tokens per GROGU context, which a 2-core CPU cannot score in the time budget);
- candidates: --n-candidates rewrites per turn sampled from the embedded SmolLM2-135M-Instruct, plus
  the original question; retriever BM25 (or --retriever dense, all-MiniLM-L6-v2); GROGU with the
  same SmolLM2 as the target LLM, top-k (10) passages of each rewrite as one context;
- check (gold answers, scai_qrecc21_batch1_qa_answers.csv; used only here, never for the pairs):
  a retrieved window "contains the gold answer" when the normalised answer is a substring of it or at
  least --min-recall of the answer's distinct content words occur in it. Only turns where some corpus
  window contains the answer are run (others cannot be hit by any rewrite). Reported: how often the
  top-k of the GROGU-chosen rewrite holds such a window, against a random candidate (mean and std over
  --random-seeds seeds, and the exact expectation), the original question, the GROGU-lowest rewrite
  and the best possible choice (any candidate hits).
"""

from __future__ import annotations

import argparse
import ast
import csv
import json
import os
import random
import re
import statistics
import sys
import time
import warnings
from collections import OrderedDict

from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

STOPWORDS = frozenset(
    "a an the of to in on for and or is are was were be been by with as at from that this it its which who what "
    "when where how why do does did can could will would should may might not no their there they them his her "
    "he she we you i our your than then so if but about into over also".split()
)
_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def contains_answer(passage: str, answer: str, min_recall: float = 0.8) -> bool:
    """The normalised answer is a substring of the passage, or >= min_recall of its distinct content
    words (lower-cased word tokens minus stopwords) occur in the passage."""
    ans = words(answer)
    if not ans:
        return False
    if " ".join(ans) in " ".join(words(passage)):
        return True
    content = {w for w in ans if w not in STOPWORDS}
    if not content:
        return False
    return len(content & set(words(passage))) / len(content) >= min_recall


def chunk(text: str, n_words: int, stride: int) -> list[str]:
    """Windows of n_words words every stride words (the whole text when it is not longer)."""
    ws = text.split()
    if n_words <= 0 or len(ws) <= n_words:
        return [" ".join(ws)]
    starts = list(range(0, len(ws) - n_words + 1, stride))
    if starts[-1] + n_words < len(ws):
        starts.append(len(ws) - n_words)
    return [" ".join(ws[s : s + n_words]) for s in starts]


def load_qrecc(root: str) -> tuple[list[dict], dict[tuple[int, int], str]]:
    """Turns [{conversation_no, turn_no, question, passages}] in conversation/turn order, and gold answers."""
    turns: OrderedDict[tuple[int, int], dict] = OrderedDict()
    with open(os.path.join(root, "scai_qrecc21_batch1_top1_passages.csv"), encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = (int(row["conversation_no"]), int(row["turn_no"]))
            t = turns.setdefault(
                key, {"conversation_no": key[0], "turn_no": key[1], "question": row["question"], "passages": []}
            )
            for p in ast.literal_eval(row["passages"]):
                if p not in t["passages"]:
                    t["passages"].append(p)
    gold: dict[tuple[int, int], str] = {}
    with open(os.path.join(root, "scai_qrecc21_batch1_qa_answers.csv"), encoding="utf-8") as f:
        for row in csv.DictReader(f):
            conv, turn = row["id"].split("_")
            gold.setdefault((int(conv), int(turn)), row["gt"])
    return [turns[k] for k in sorted(turns)], gold


def with_history(turns: list[dict]) -> list[dict]:
    """Each turn with ``history``: the questions of the earlier sample turns of its conversation."""
    out, seen = [], {}
    for t in turns:
        prev = seen.setdefault(t["conversation_no"], [])
        out.append({**t, "history": [{"role": "user", "content": q} for q in prev]})
        prev.append(t["question"])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=12, help="evaluable turns to run (in conversation order)")
    ap.add_argument("--n-candidates", type=int, default=8)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--chunk-words", type=int, default=50, help="0 keeps whole passages")
    ap.add_argument("--chunk-stride", type=int, default=25)
    ap.add_argument("--retriever", choices=("bm25", "dense"), default="bm25")
    ap.add_argument("--max-new-tokens", type=int, default=24, help="longest grounded answer for GROGU")
    ap.add_argument("--min-recall", type=float, default=0.8)
    ap.add_argument("--random-seeds", type=int, default=20)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default="runs/qrecc_rewrite")
    ap.add_argument("--recheck", metavar="REPORT", help="recompute and print the check of a saved qrecc_report.json")
    args = ap.parse_args(argv)
    if args.recheck:
        print_report(recheck(args.recheck, args.random_seeds))
        return 0

    from grogu_research import testing
    from grogu_research.rewrite import BM25Retriever, DenseRetriever, build_rewrite_pairs

    from grogu.rerank.scorer import UtilityScorer

    warnings.simplefilter("ignore")  # GGUF de-quantisation and truncation chatter
    t_start = time.perf_counter()
    try:
        root = testing.shared_data_path("qrecc-sample")
    except FileNotFoundError as exc:
        print(f"skipped: {exc}")
        return 0
    all_turns, gold = load_qrecc(root)
    all_turns = with_history(all_turns)
    passages = list(dict.fromkeys(p for t in all_turns for p in t["passages"]))
    source: dict[str, str] = {}  # window -> the pooled passage it was cut from (the first, for duplicates)
    for p in passages:
        for c in chunk(p, args.chunk_words, args.chunk_stride):
            source.setdefault(c, p)
    corpus = list(source)
    evaluable = [
        t
        for t in all_turns
        if any(contains_answer(c, gold.get((t["conversation_no"], t["turn_no"]), ""), args.min_recall) for c in corpus)
    ]
    chosen = evaluable[: args.limit]
    print(
        f"{len(all_turns)} turns, {len(passages)} pooled passages -> {len(corpus)} windows of "
        f"{args.chunk_words} words; {len(evaluable)} turns have a window with the gold answer; running "
        f"{len(chosen)}",
        file=sys.stderr,
    )

    retriever = BM25Retriever(corpus) if args.retriever == "bm25" else DenseRetriever(corpus, device=args.device)
    scorer = UtilityScorer(args.model, max_new_tokens=args.max_new_tokens, device=args.device)
    t_model = time.perf_counter()
    turns = [
        {"id": f"{t['conversation_no']}_{t['turn_no']}", "question": t["question"], "history": t["history"]}
        for t in chosen
    ]
    pairs = build_rewrite_pairs(
        turns,
        retriever,
        scorer,
        n_candidates=args.n_candidates,
        temperature=args.temperature,
        seed=args.seed,
        k=args.k,
        progress=True,
    )
    t_pairs = time.perf_counter() - t_model
    paths = pairs.write(args.out)

    # ---- the check against gold answers
    window_hits, passage_hits = [], []  # per turn: hit of each candidate (original question first)
    for t, r in zip(chosen, pairs.results):
        answer = gold[(t["conversation_no"], t["turn_no"])]
        window_hits.append([any(contains_answer(p, answer, args.min_recall) for p in x.passages) for x in r.rewrites])
        passage_hits.append(
            [any(contains_answer(source[p], answer, args.min_recall) for p in x.passages) for x in r.rewrites]
        )
    scores = [[x.score for x in r.rewrites] for r in pairs.results]
    ids = [r.turn.id for r in pairs.results]
    kept = [
        (
            p.turn_index,
            [x.rewrite for x in pairs.results[p.turn_index].rewrites].index(p.chosen),
            [x.rewrite for x in pairs.results[p.turn_index].rewrites].index(p.rejected),
        )
        for p in pairs.kept
    ]
    report = {
        "turns": len(chosen),
        "k": args.k,
        "corpus_windows": len(corpus),
        "evaluable_turns_in_sample": len(evaluable),
        "unique_candidates_per_turn_mean": pairs.summary["unique_candidates_per_turn_mean"],
        "window_level": check(window_hits, scores, ids, kept, args.random_seeds),
        "source_passage_level": check(passage_hits, scores, ids, kept, args.random_seeds),
        "sft_chose_original_question": pairs.summary["sft_chose_original_question"],
        "dpo_kept": kept,
        "summary": pairs.summary,
        "settings": vars(args),
        "wall_s": {"total": round(time.perf_counter() - t_start, 1), "pairs": round(t_pairs, 1)},
        "outputs": paths,
        "meta": meta(settings={k: v for k, v in vars(args).items() if v != ap.get_default(k)}),
    }
    with open(os.path.join(args.out, "qrecc_report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
    print_report(report)
    return 0


def recheck(path: str, random_seeds: int = 20) -> dict:
    """Recompute the check of a saved qrecc_report.json from its per-turn hits and scores (no model)."""
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    kept = report.get("dpo_kept")
    scores_path = os.path.join(os.path.dirname(path), "scores.jsonl")
    if kept is None and os.path.exists(scores_path):  # reports written before "dpo_kept" was saved
        with open(scores_path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        kept = [(i, r["best"], r["worst"]) for i, r in enumerate(rows) if r["pair"] == "kept"]
    for level in ("window_level", "source_passage_level"):
        per_turn = report[level]["per_turn"]
        report[level] = check(
            [t["hits"] for t in per_turn],
            [t["scores"] for t in per_turn],
            [t["id"] for t in per_turn],
            kept,
            random_seeds,
        )
    return report


def print_report(report: dict) -> None:
    k = report["k"]
    print(
        f"\nQReCC sample, {report['turns']} turns, top-{k} of {report['corpus_windows']} windows, "
        f"{report['unique_candidates_per_turn_mean']:.1f} unique candidates/turn, "
        f"GROGU kept the original question in {report['sft_chose_original_question']} turns"
    )
    for level, title in (
        ("window_level", "a retrieved window holds the gold answer"),
        ("source_passage_level", "a retrieved window comes from a passage holding it"),
    ):
        r = report[level]
        h, s = r["hit_rate"], r["sampled_only"]
        print(f"\n{title}\n| rewrite used | hit rate (top-{k}) |\n|---|---|")
        print(
            f"| GROGU-chosen (SFT target) | {h['grogu_chosen']:.3f} (P[random >= this] = "
            f"{r['p_random_at_least_grogu']:.3f}) |"
        )
        print(
            f"| random candidate ({r['random_seeds']} seeds) | {h['random_candidate_mean_over_seeds']:.3f} "
            f"± {h['random_candidate_std_over_seeds']:.3f} (expected {h['random_candidate_expected']:.3f}) |"
        )
        print(f"| original question | {h['original_question']:.3f} |")
        print(f"| GROGU-lowest | {h['grogu_lowest']:.3f} |")
        print(f"| any candidate (oracle) | {h['oracle_any_candidate']:.3f} |")
        print(
            f"| sampled rewrites only: GROGU-chosen / random expected | {s['grogu_chosen']:.3f} / "
            f"{s['random_candidate_expected']:.3f} (P = {s['p_random_at_least_grogu']:.3f}) |"
        )
        if r.get("dpo_pairs_kept") is not None:
            print(
                f"turns where candidates disagree: {r['turns_where_candidates_disagree']}; DPO pairs kept "
                f"{r['dpo_pairs_kept']}: chosen hit {r['dpo_kept_chosen_hit_rate']:.3f}, rejected hit "
                f"{r['dpo_kept_rejected_hit_rate']:.3f}"
            )
    if "wall_s" in report:
        print(f"\nwall: {report['wall_s']}")


def _rate(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _argmin(scores: list[float]) -> int:
    return min(range(len(scores)), key=lambda i: (scores[i], i))


def p_at_least(probs: list[float], observed: int) -> float:
    """P(sum of independent Bernoulli(p_i) >= observed): how often picking one candidate per turn
    uniformly at random hits at least as often as the observed choice (Poisson-binomial, exact)."""
    dist = [1.0]
    for p in probs:
        nxt = [0.0] * (len(dist) + 1)
        for j, v in enumerate(dist):
            nxt[j] += v * (1 - p)
            nxt[j + 1] += v * p
        dist = nxt
    return sum(dist[observed:])


def check(hits: list[list[bool]], scores: list[list[float]], ids: list, kept: list | None, random_seeds: int) -> dict:
    """Hit rates of the GROGU-chosen, random, original, GROGU-lowest and oracle candidate per turn
    (candidate 0 is the original question); the same among the sampled rewrites only; and for the kept
    DPO pairs [(turn, chosen, rejected)]."""
    from grogu.rerank.selection import argmax  # ties: the earlier (as grogu_research.rewrite)

    best = [h[argmax(s)] for h, s in zip(hits, scores)]
    worst = [h[_argmin(s)] for h, s in zip(hits, scores)]
    random_rates = [
        _rate(random.Random(seed * 1000 + i).choice(h) for i, h in enumerate(hits)) for seed in range(random_seeds)
    ]
    informative = [i for i, h in enumerate(hits) if 0 < sum(h) < len(h)]
    sampled = [(h[1:], s[1:]) for h, s in zip(hits, scores) if len(s) > 1]
    sampled_best = [h[argmax(s)] for h, s in sampled]
    out = {
        "turns": len(hits),
        "random_seeds": random_seeds,
        "hit_rate": {
            "grogu_chosen": _rate(best),
            "random_candidate_mean_over_seeds": statistics.mean(random_rates),
            "random_candidate_std_over_seeds": statistics.pstdev(random_rates),
            "random_candidate_expected": _rate(_rate(h) for h in hits),
            "original_question": _rate(h[0] for h in hits),
            "grogu_lowest": _rate(worst),
            "oracle_any_candidate": _rate(any(h) for h in hits),
        },
        "p_random_at_least_grogu": p_at_least([_rate(h) for h in hits], sum(best)),
        "sampled_only": {
            "turns": len(sampled),
            "grogu_chosen": _rate(sampled_best),
            "random_candidate_expected": _rate(_rate(h) for h, _ in sampled),
            "p_random_at_least_grogu": p_at_least([_rate(h) for h, _ in sampled], sum(sampled_best)),
        },
        "turns_where_candidates_disagree": len(informative),
        "hit_rate_on_those": {
            "grogu_chosen": _rate(best[i] for i in informative),
            "random_candidate_expected": _rate(_rate(hits[i]) for i in informative),
            "original_question": _rate(hits[i][0] for i in informative),
            "grogu_lowest": _rate(worst[i] for i in informative),
        },
        "per_turn": [{"id": i, "hits": h, "scores": s} for i, h, s in zip(ids, hits, scores)],
    }
    if kept is not None:
        out.update(
            {
                "dpo_pairs_kept": len(kept),
                "dpo_kept_chosen_hit_rate": _rate(hits[t][c] for t, c, _ in kept),
                "dpo_kept_rejected_hit_rate": _rate(hits[t][r] for t, _, r in kept),
            }
        )
    return out


if __name__ == "__main__":
    raise SystemExit(main())
