"""How many prompt tokens each influence method must encode, against what the engine encodes.

On a CPU the cost of an influence method follows the prompt tokens it encodes (answers are short). A
computation that is exact can share only equal prefixes, so the fewest tokens any exact method can
encode is the size of the prefix tree (trie) of its prompts: the sum over the prompts, sorted, of each
one's length minus its longest common prefix with the one before. This script prints, per method and
k, the prompt tokens before sharing, that trie minimum, and ``Engine.prefill_tokens`` after one
``token_stats`` call on the same prompts (the answer teacher-forced, as the forward-only methods do;
for the exact Influence Score the 2k ablated prompts with a one-token continuation, its prefill).
GROGU-scoring the same documents (k single-document prompts and the query alone) is the yardstick.

Documents: SQuAD dev, the question's own paragraph and k - 1 others (``--words 0``: whole paragraphs,
as in influence_speed.py; ``--words 40``: leads, as in attribution_vs_contextcite.py).

  OMP_NUM_THREADS=1 python benchmarks/influence_tokens.py [--ks 5,10,20] [--words 0] [--ablations 64]
"""

from __future__ import annotations

import argparse
import warnings

from grogu_research.testing import squad_paragraphs

from grogu import Document
from grogu.metrics.attribution import contextcite_masks
from grogu.metrics.influence import InfluenceScorer
from grogu.runtime.models import DEFAULT_MODEL


def trie_size(seqs: list[list[int]]) -> int:
    """Tokens in the prefix tree of the sequences: what an exact prefix-sharing encoder must compute."""
    ordered = sorted(seqs)
    total = len(ordered[0]) if ordered else 0
    for a, b in zip(ordered, ordered[1:]):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        total += len(b) - n
    return total


def contexts(method: str, docs: list[Document], m: int) -> list[list[Document]]:
    k = len(docs)
    if method == "GROGU score":
        return [[d] for d in docs] + [[]]
    if method == "exact, answer given":
        return [docs[:i] + docs[i + 1 :] for i in range(k)] + [[d] for d in docs]
    if method == "leave_one_out_logprob":
        return [docs] + [docs[:i] + docs[i + 1 :] for i in range(k)]
    return [[d for d, keep in zip(docs, row) if keep] for row in contextcite_masks(k, m, 0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="5,10,20")
    ap.add_argument("--words", type=int, default=0, help="cut each paragraph to its first N words (0: whole)")
    ap.add_argument("--ablations", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    scorer = InfluenceScorer(DEFAULT_MODEL, method="leave_one_out_logprob", device="cpu")
    engine = scorer.target
    ks = [int(k) for k in args.ks.split(",")]
    paras = squad_paragraphs(max(ks), seed=7)
    cut = (lambda t: " ".join(t.split()[: args.words])) if args.words else (lambda t: t)
    query = paras[0]["question"]
    print(
        f"SmolLM2-135M-Instruct, {'whole paragraphs' if not args.words else f'{args.words}-word leads'}; "
        f"prompt tokens: before sharing / trie minimum / encoded by the engine"
    )
    print("| k | method | prompts | before sharing | trie minimum | encoded | encoded / trie | x GROGU (encoded) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in ks:
        docs = [Document(cut(p["text"]), p["title"]) for p in paras[:k]]
        answer = engine.generate([scorer.prompts.grounded_ids(query, docs)], args.max_new_tokens)[0]
        target = answer.token_ids + ([answer.stop_token_id] if answer.finished else [])
        base = None
        for method in (
            "GROGU score",
            "exact, answer given",
            "leave_one_out_logprob",
            f"contextcite m={args.ablations}",
        ):
            prompts = [
                scorer.prompts.grounded_ids(query, c) if c else scorer.prompts.ungrounded_ids(query)
                for c in contexts(method, docs, args.ablations)
            ]
            cont = [target] if method.startswith(("leave", "contextcite")) else [[target[0]]]
            seqs = [p + cont[0][:-1] for p in prompts]
            engine.prefill_tokens = 0
            engine.token_stats(prompts, cont * len(prompts))
            encoded = engine.prefill_tokens
            base = base or encoded
            print(
                f"| {k} | {method} | {len(prompts)} | {sum(map(len, seqs))} | {trie_size(seqs)} | {encoded} | "
                f"{encoded / trie_size(seqs):.2f} | {encoded / base:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
