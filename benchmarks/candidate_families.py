"""Cheaper candidates for the doubtful query: which candidate family, chosen on tuning records, checked
on held-out ones.

A query in doubt answers the retriever's context first, then the family's other candidates. On a CPU
their prompt tokens are most of its cost. The ``swap`` candidates keep the retriever's first documents
in place, so they continue the first answer's KV cache; reordered candidates share nothing with it.

The records are those of ``pipeline_accuracy.py collect --contexts gated`` under the default
(``swap_orders``): a doubtful query holds every ``swap_orders`` candidate, so each smaller family
(a subset) is replayed exactly from the same records (``pipeline_modes.mode_context``).

The rule, fixed before any held-out record was collected (``choose``):
1. a family is eligible when, on the pooled tuning records, its net wins over the retriever's context
   (wins − losses, whole words) are at least those of the default family, and it wins at least as often
   as it loses on every tuning set;
2. among the eligible, the cheapest by the estimated tokens a doubtful query encodes for its other
   candidates (:func:`second_wave_share`); the default family stays when no cheaper one is eligible.

``held`` reports, on held-out records, the chosen family against the default and each against the
retriever: accuracy, the discordant counts and an exact two-sided sign test.

    python benchmarks/candidate_families.py choose --tune squad_tune.jsonl nq_tune.jsonl --out chosen.json
    python benchmarks/candidate_families.py held --eval squad_held.jsonl nq_held.jsonl --chosen chosen.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pipeline_accuracy import answered_words, judgeable  # noqa: E402
from pipeline_modes import TOP_N, key, load, mode_context, mode_retriever, sign_test  # noqa: E402
from record_meta import meta  # noqa: E402

from grogu.rerank.selection import context_candidates  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = json.load(open(os.path.join(HERE, "selective_settings.json")))["selective@5"]
#: the families tried, each a change of the default setting (the gate, rule and margin stay)
FAMILIES = {
    "swap_orders": {},
    "swap_reversed": {"family": "swap_reversed"},
    "reversed": {"family": "reversed"},
    "swap": {"family": "swap"},
    "swap, one swap": {"family": "swap", "swaps": 1},
}


def setting(name: str) -> dict:
    return {**DEFAULT, **FAMILIES[name]}


def second_wave_share(rec: dict, s: dict) -> float:
    """The prompt text a doubtful query encodes for its other candidates, as a share of its first
    prompt's documents: each candidate's documents after the longest run of leading documents it shares
    with an earlier candidate (those continue a cache), plus the question once per candidate."""
    k = min(s["k"], len(rec["texts"]))
    cands = context_candidates(k, TOP_N, s.get("family", "swap"), s.get("swaps", 2))
    size = [len(t) for t in rec["texts"]]
    question = len(rec["question"])
    first = sum(size[i] for i in cands[0]) + question
    total = 0
    for j, c in enumerate(cands[1:], 1):
        shared = max(_lead(c, e) for e in cands[:j])
        total += sum(size[i] for i in c[shared:]) + question
    return total / first


def _lead(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def outcomes(records: list[dict], s: dict) -> dict[str, tuple[bool, bool]]:
    """Per judgeable question: (the family's answer right, the retriever's context's answer right)."""
    out = {}
    for r in records:
        if not judgeable(r["answers"]):
            continue
        ctx, base = mode_context(r, s), mode_retriever(r, s)
        out[r["qid"]] = (
            answered_words(r["contexts"][key(ctx)]["answer"], r["answers"]),
            answered_words(r["contexts"][key(base)]["answer"], r["answers"]),
        )
    return out


def summary(records: list[dict], s: dict) -> dict:
    o = outcomes(records, s)
    wins = sum(a and not b for a, b in o.values())
    losses = sum(b and not a for a, b in o.values())
    doubt = [r for r in records if r.get("doubt")]
    cost = sum(second_wave_share(r, s) for r in doubt) / max(1, len(doubt))
    return {
        "n": len(o),
        "accuracy": round(sum(a for a, _ in o.values()) / len(o), 4),
        "retriever": round(sum(b for _, b in o.values()) / len(o), 4),
        "wins": wins,
        "losses": losses,
        "p": round(sign_test(wins, losses), 4),
        "in doubt": len(doubt),
        "other candidates' text / first prompt's (in doubt)": round(cost, 3),
    }


def by_set(records: list[dict]) -> dict[str, list[dict]]:
    sets: dict[str, list[dict]] = {}
    for r in records:
        sets.setdefault(r["data"], []).append(r)
    return {**sets, "pooled": records}


def choose(args) -> None:
    """The rule of the module docstring on the tuning records."""
    sets = by_set(load(args.tune))
    table = {name: {data: summary(recs, setting(name)) for data, recs in sets.items()} for name in FAMILIES}
    net = {name: t["pooled"]["wins"] - t["pooled"]["losses"] for name, t in table.items()}
    eligible = [
        name
        for name, t in table.items()
        if net[name] >= net["swap_orders"] and all(v["wins"] >= v["losses"] for d, v in t.items() if d != "pooled")
    ]
    chosen = min(eligible, key=lambda n: (table[n]["pooled"]["other candidates' text / first prompt's (in doubt)"], n))
    out = {"table": table, "eligible": eligible, "chosen": chosen, "setting": setting(chosen)}
    print(json.dumps(out, indent=1))
    if args.out:
        settings = {k: v for k, v in vars(args).items() if v is not None}
        json.dump({**out, "meta": meta(settings=settings)}, open(args.out, "w"), indent=1)


def held(args) -> None:
    """The chosen family against the default and each against the retriever, on held-out records."""
    chosen = json.load(open(args.chosen))["chosen"]
    out: dict = {"chosen": chosen}
    for data, recs in by_set(load(args.eval)).items():
        a, b = outcomes(recs, setting(chosen)), outcomes(recs, setting("swap_orders"))
        wins = sum(a[q][0] and not b[q][0] for q in a)
        losses = sum(b[q][0] and not a[q][0] for q in a)
        out[data] = {
            chosen: summary(recs, setting(chosen)),
            "swap_orders": summary(recs, setting("swap_orders")),
            f"{chosen} against swap_orders": {"wins": wins, "losses": losses, "p": round(sign_test(wins, losses), 4)},
        }
    print(json.dumps(out, indent=1))
    if args.out:
        settings = {k: v for k, v in vars(args).items() if v is not None}
        json.dump({**out, "meta": meta(settings=settings)}, open(args.out, "w"), indent=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("choose")
    c.add_argument("--tune", nargs="+", required=True)
    c.add_argument("--out", default=None)
    h = sub.add_parser("held")
    h.add_argument("--eval", nargs="+", required=True)
    h.add_argument("--chosen", required=True)
    h.add_argument("--out", default=None)
    args = p.parse_args()
    {"choose": choose, "held": held}[args.cmd](args)


if __name__ == "__main__":
    main()
