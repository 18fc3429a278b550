"""Forward-only attribution against ContextCite itself, and every influence method against each other.

Same model (the packaged SmolLM2-135M-Instruct), same SQuAD dev contexts (``questions()`` of
benchmarks/influence_ablation_agreement.py: the gold paragraph's lead and the leads of k - 1 other
paragraphs of its article, each cut to <= ``--doc-words`` words, shuffled), k = 5, 10, 20. Per question:

- ours, contextcite: ``InfluenceScorer(method="contextcite", n_ablations=m, seed=0)``, answer generated
  once from the full context (greedy, ``--max-new-tokens``), then m teacher-forced passes + LASSO;
- ContextCite: ``context_cite.ContextCiter`` (PyPI ``context-cite``, a benchmark-only extra) with a
  document-level partitioner (one source per document, rendered as grogu renders a context) and the
  same prompt token ids as grogu (a context with no document left is grogu's query-alone prompt), its
  own greedy generation (``generate_kwargs``) and its own ablation loop and solver. Its masks come from
  seeds 0..m-1, which ``seed=0`` reproduces: the run checks both used the same masks and the same answer;
- ours, leave_one_out_logprob (answer generated once, k + 1 passes);
- exact DocImpact (``method="exact"``, the Influence Score of DESIGN.md 2.5) given the same answer
  (2k generations, as when logging a pipeline's answer).

Reported per k: Spearman rho (scipy, ties averaged; undefined when one side is constant, e.g. all-zero
LASSO weights) and top-1 agreement (ties broken at random: expected value) of ours against ContextCite
and of each method against exact DocImpact and against leave_one_out_logprob; wall seconds per query of
each. Timings are one run each on a shared machine (2-core CPU, 1 torch thread).

Run in an environment with context-cite installed (``pip install -e .[bench]``):

  OMP_NUM_THREADS=1 python benchmarks/attribution_vs_contextcite.py --questions 3 --ks 5,10,20 \\
      --ablations 32 --out attribution.jsonl [--budget-s 1500]

Rounds go over the ks one question at a time (question 1 at every k, then question 2, ...); no new
question starts once ``--budget-s`` is spent; each question's row is appended to ``--out`` as it finishes and the
tables are printed from that file (``--report-only`` prints them again).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings
from collections import defaultdict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from influence_ablation_agreement import questions, rho, same_first  # noqa: E402
from record_meta import write_sidecar  # noqa: E402

from grogu import Document  # noqa: E402
from grogu.metrics.influence import InfluenceScorer  # noqa: E402
from grogu.runtime.models import DEFAULT_MODEL  # noqa: E402


def contextciter(scorer: InfluenceScorer, query: str, docs: list[Document], m: int, max_new_tokens: int):
    """A ContextCiter over the documents (one source each) that reads exactly grogu's prompts."""
    from context_cite import ContextCiter
    from context_cite.context_partitioner import BaseContextPartitioner

    template = scorer.prompts.template

    class DocumentPartitioner(BaseContextPartitioner):
        """Each retrieved document is one source; a context is the kept documents rendered by grogu."""

        def __init__(self, documents: list[Document]) -> None:
            super().__init__(template.render_context(documents))
            self.documents = documents

        @property
        def num_sources(self) -> int:
            return len(self.documents)

        def split_context(self) -> None:
            pass

        def get_source(self, index: int) -> str:
            return self.documents[index].text

        def get_context(self, mask=None) -> list[Document]:
            if mask is None:
                mask = np.ones(self.num_sources, dtype=bool)
            return [d for d, keep in zip(self.documents, mask) if keep]

    class GroguPromptCiter(ContextCiter):
        def _get_prompt_ids(self, mask=None, return_prompt=False):
            ids = scorer._prompt(self.query, self.partitioner.get_context(mask))
            return (ids, self.tokenizer.decode(ids)) if return_prompt else ids

    tok = scorer.target.tokenizer
    tok.padding_side = "left"
    partitioner = DocumentPartitioner(docs)
    return GroguPromptCiter(
        scorer.target.model,
        tok,
        partitioner.context,
        query,
        partitioner=partitioner,
        num_ablations=m,
        generate_kwargs={"max_new_tokens": max_new_tokens, "do_sample": False},
    )


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def run_question(scorers: dict, query: str, docs: list[Document], gold: int, m: int, max_new_tokens: int) -> dict:
    cc, loo, exact = scorers["contextcite"], scorers["leave_one_out_logprob"], scorers["exact"]
    ours, t_ours = timed(lambda: cc.score(query, docs))
    citer = contextciter(cc, query, docs, m, max_new_tokens)
    theirs, t_theirs = timed(lambda: np.asarray(citer.get_attributions(verbose=False), dtype=float).tolist())
    their_ids = [int(t) for t in citer._response_ids]
    from context_cite.utils import aggregate_logit_probs

    their_targets = aggregate_logit_probs(citer._logit_probs).tolist()
    same_masks = bool(np.array_equal(np.asarray(citer._masks, dtype=bool), np.asarray(ours.forward.masks)))
    drop, t_loo = timed(lambda: loo.score(query, docs))
    doc_impact, t_exact = timed(lambda: exact.score(query, docs, answer=ours.answer))
    return {
        "k": len(docs),
        "query": query,
        "gold": gold,
        "answer": ours.answer,
        "m": m,
        "same_masks": same_masks,
        "same_answer": their_ids == ours.forward.target_token_ids,
        "ours": ours.scores,
        "theirs": theirs,
        "our_targets": ours.forward.targets,
        "their_targets": their_targets,
        "loo": drop.scores,
        "exact": doc_impact.scores,
        "seconds": {"ours": t_ours, "theirs": t_theirs, "loo": t_loo, "exact": t_exact},
    }


def fmt(values: list[float], digits: int = 2) -> str:
    values = [v for v in values if not math.isnan(v)]
    return f"{statistics.mean(values):.{digits}f}" if values else "n/a"


def report(rows: list[dict]) -> None:
    by_k, cc_by_k = defaultdict(list), defaultdict(list)
    for r in rows:
        by_k[r["k"]].append(r)
        if r.get("theirs_valid", True):  # False: ContextCiter read another prompt (see the README)
            cc_by_k[r["k"]].append(r)
    ks = sorted(by_k)
    print(
        "\nOurs (method='contextcite') against ContextCiter, same masks and answer "
        "(rho: mean Spearman over queries; n/a: a constant side)"
    )
    print(
        "| k | queries | same masks / answer | Spearman rho | top-1 agreement | max abs diff | ours s/query | "
        "ContextCiter s/query | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for k in sorted(cc_by_k):
        rs = cc_by_k[k]
        ours_t = statistics.mean(r["seconds"]["ours"] for r in rs)
        theirs_t = statistics.mean(r["seconds"]["theirs"] for r in rs)
        diff = max(max(abs(a - b) for a, b in zip(r["ours"], r["theirs"])) for r in rs)
        print(
            f"| {k} | {len(rs)} | {sum(r['same_masks'] for r in rs)}/{len(rs)} , {sum(r['same_answer'] for r in rs)}/{len(rs)} "
            f"| {fmt([rho(r['ours'], r['theirs']) for r in rs], 3)} "
            f"| {fmt([same_first(r['ours'], r['theirs']) for r in rs])} | {diff:.2g} | {ours_t:.1f} | {theirs_t:.1f} "
            f"| {theirs_t / ours_t:.1f}x |"
        )
    print(
        "\nEach method against exact DocImpact and against leave_one_out_logprob (mean Spearman rho / "
        "top-1 agreement), gold document ranked first, wall seconds per query"
    )
    print(
        "| k | method | rho vs DocImpact | top-1 vs DocImpact | rho vs LOO log-prob | top-1 vs LOO log-prob | "
        "gold ranked first | s/query |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for k in ks:
        rs = by_k[k]
        for name, key, t in (
            ("exact DocImpact", "exact", "exact"),
            ("leave_one_out_logprob", "loo", "loo"),
            ("contextcite (ours)", "ours", "ours"),
            ("ContextCiter", "theirs", "theirs"),
        ):
            sel = cc_by_k[k] if key == "theirs" else rs
            if not sel:
                continue
            vs = lambda other, f: fmt([f(r[key], r[other]) for r in sel])  # noqa: E731
            gold = fmt([float(r["gold"] in _top(r[key])) / len(_top(r[key])) for r in sel])
            print(
                f"| {k} | {name} ({len(sel)} q) | {vs('exact', rho)} | {vs('exact', same_first)} | {vs('loo', rho)} "
                f"| {vs('loo', same_first)} | {gold} | {statistics.mean(r['seconds'][t] for r in sel):.1f} |"
            )


def _top(scores: list[float]) -> set[int]:
    best = max(scores)
    return {i for i, x in enumerate(scores) if x >= best - 1e-9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=3, help="questions per k")
    ap.add_argument("--ks", default="5,10,20")
    ap.add_argument("--ablations", type=int, default=64, help="m for both (ContextCite's default: 64)")
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--doc-words", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0, help="seed of the question sample")
    ap.add_argument("--budget-s", type=float, default=float("inf"), help="stop starting rounds after this")
    ap.add_argument("--out", default="attribution_vs_contextcite.jsonl")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--first-question", type=int, default=0, help="skip the questions before this index")
    args = ap.parse_args()
    if args.report_only:
        with open(args.out) as f:
            report([json.loads(line) for line in f if line.strip()])
        return
    warnings.simplefilter("ignore")
    import logging

    logging.getLogger("ContextCite").setLevel(logging.ERROR)
    ks = [int(k) for k in args.ks.split(",")]
    t = args.max_new_tokens
    cc = InfluenceScorer(
        DEFAULT_MODEL, device="cpu", method="contextcite", n_ablations=args.ablations, seed=0, max_new_tokens=t
    )
    scorers = {
        "contextcite": cc,
        "leave_one_out_logprob": InfluenceScorer(cc.target, method="leave_one_out_logprob", max_new_tokens=t),
        "exact": InfluenceScorer(cc.target, method="exact", max_new_tokens=t),
    }
    qs = {k: questions(args.questions, k, args.seed, args.doc_words) for k in ks}
    scorers["exact"].score("Warm-up?", [qs[ks[0]][0][1][0]])
    print(
        f"SmolLM2-135M-Instruct, cpu, {torch.get_num_threads()} torch thread(s), m={args.ablations}, "
        f"max_new_tokens={t}, documents: SQuAD dev leads of <= {args.doc_words} words",
        flush=True,
    )
    start, rows = time.perf_counter(), []
    with open(args.out, "w") as out:
        for i in range(args.first_question, args.questions):
            for k in ks:
                if time.perf_counter() - start > args.budget_s:
                    break
                query, docs, gold = qs[k][i]
                query = query.strip()  # grogu strips the query (check_query); ContextCiter must read the same
                row = run_question(scorers, query, docs, gold, args.ablations, t)
                rows.append(row)
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(
                    f"k={k} q{i}: {json.dumps(row['seconds'])} rho(ours, theirs)={rho(row['ours'], row['theirs']):.3f} "
                    f"same masks={row['same_masks']} same answer={row['same_answer']}",
                    flush=True,
                )
    write_sidecar(args.out, {k: v for k, v in vars(args).items() if v != ap.get_default(k)})
    report(rows)


if __name__ == "__main__":
    main()
