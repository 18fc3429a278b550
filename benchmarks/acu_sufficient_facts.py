"""ACU on SufficientFacts (FEVER): original (sufficient) evidence against the same claims' evidence
with information removed (annotated NOT ENOUGH), with the embedded SmolLM2.

The original evidence is ``text_orig`` with the removed span put back (stance = label_before:
SUPPORTS / REFUTES); the insufficient evidence is ``evidence`` (stance = NOT ENOUGH, raising None).
Reports both mean ACUs and the fraction of claims whose sufficient evidence has the higher ACU.

  python benchmarks/acu_sufficient_facts.py --limit 300
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
import warnings

from grogu_research.testing import shared_data_path
from tqdm import tqdm

from grogu.metrics.acu import ACUScorer
from grogu.runtime.models import DEFAULT_MODEL


def original_evidence(text_orig: str) -> str:
    text = re.sub(r"<span[^>]*>|</span>", "", text_orig)
    text = re.sub(r"\[\[([^\]]+)\]\]", r"\1:", text)
    return " ".join(text.split())


def insufficient_evidence(evidence: list) -> str:
    return " ".join(f"{title}: {sent}" for title, sent in evidence)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="fever_sufficient_facts.jsonl")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    with open(shared_data_path("sufficient-facts", args.file)) as f:
        rows = [json.loads(line) for line in f]
    rows = [r for r in rows if r["label_after"] == "NOT ENOUGH" and r["label_before"] in ("SUPPORTS", "REFUTES")]
    rows = rows[: args.limit]
    scorer = ACUScorer(args.model, device="cpu")
    suff, insuff = [], []
    t0 = time.perf_counter()
    for s in tqdm(range(0, len(rows), args.batch), desc="claims", unit="batch"):
        chunk = rows[s : s + args.batch]
        items = [(r["claim"], original_evidence(r["text_orig"]), r["label_before"]) for r in chunk]
        items += [(r["claim"], insufficient_evidence(r["evidence"]), "NOT ENOUGH") for r in chunk]
        res = scorer.score_batch(items)
        suff += [x.acu for x in res[: len(chunk)]]
        insuff += [x.acu for x in res[len(chunk) :]]
    higher = sum(a > b for a, b in zip(suff, insuff)) / len(suff)
    print(f"model {args.model}, {args.file}, n={len(suff)} claims, {time.perf_counter() - t0:.0f} s")
    print("| evidence | stance raised | mean ACU |")
    print("|---|---|---|")
    print(f"| original (sufficient) | label_before (True/False) | {statistics.mean(suff):+.4f} |")
    print(f"| information removed (NOT ENOUGH) | None | {statistics.mean(insuff):+.4f} |")
    print(f"fraction of claims where the sufficient evidence has the higher ACU: {higher:.3f}")


if __name__ == "__main__":
    main()
