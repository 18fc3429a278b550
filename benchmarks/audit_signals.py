"""Which signal should `grogu audit` report? Each candidate against gold answers, from the per-question
records `benchmarks/audit_validation.py` writes (``records_*.jsonl``).

The audit compares set-ups query by query. So a signal is judged the same way: for each query and each
pair of set-ups where exactly one set-up's answer holds a gold answer, does the signal rank that one
higher? ``concordance`` = (pairs ranked right + half the tied pairs) / such pairs: 0.5 is chance, 1 is
perfect (the within-query AUROC). The no-document baseline is not in these pairs: the audit's verdict
is about the user's set-ups.

Also reported per signal: the pooled AUROC of the signal for a correct answer over every context, and at
the set-up level the audit's verdict under that signal (Holm-corrected, as `grogu audit` gives it)
against the accuracy differences (McNemar's exact test).

The rule that picks the signal, fixed before the tuning records were read:

    choose the signal with the highest mean concordance over the tuning cells (data set x model);
    a tie within 0.005 keeps the current default, ``utility``.

The held-out check (``--check``) then compares the chosen signal with ``utility`` on fresh records:
concordance per cell, and an exact sign test over the query pairs where exactly one of the two signals
ranks the correct set-up higher (ties in either signal left out).

    python benchmarks/audit_signals.py --tune runs/audit_signals/*/records_*_tune_*.jsonl --out benchmarks/results/audit_signals_tune.json
    python benchmarks/audit_signals.py --check utility,<chosen> runs/audit_signals_held/*/records_*_held_*.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

BASELINE = "no documents"
CURRENT = "utility"
TIE = 0.005


def load(paths: list[str]) -> dict[tuple[str, str], list[dict]]:
    """Records by cell (data set, model)."""
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for path in paths:
        for line in open(path, encoding="utf-8"):
            if line.strip():
                r = json.loads(line)
                cells[(r["data"], r["model"].rsplit("/", 1)[-1])].append(r)
    return dict(cells)


def setup_names(records: list[dict]) -> list[str]:
    return [s for s in records[0]["setups"] if s != BASELINE]


def judged_pairs(records: list[dict]):
    """(record, correct set-up, wrong set-up) for every query and pair where exactly one answer is right."""
    names = setup_names(records)
    for r in records:
        for a, b in itertools.combinations(names, 2):
            ca, cb = r["setups"][a]["correct"], r["setups"][b]["correct"]
            if ca != cb:
                yield (r, a, b) if ca else (r, b, a)


def concordance(records: list[dict], signal: str) -> dict:
    right = wrong = tied = 0
    for r, good, bad in judged_pairs(records):
        g, b = r["setups"][good]["signals"][signal], r["setups"][bad]["signals"][signal]
        right, wrong, tied = right + (g > b), wrong + (g < b), tied + (g == b)
    n = right + wrong + tied
    return {
        "pairs": n,
        "right": right,
        "wrong": wrong,
        "tied": tied,
        "concordance": (right + tied / 2) / n if n else None,
    }


def auroc(records: list[dict], signal: str) -> float | None:
    """P(signal of a correct context > that of a wrong one), ties half, over every set-up's context."""
    pos, neg = [], []
    for r in records:
        for s in setup_names(records):
            (pos if r["setups"][s]["correct"] else neg).append(r["setups"][s]["signals"][signal])
    if not pos or not neg:
        return None
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def setup_level(records: list[dict], signal: str) -> dict:
    """The audit's verdict under ``signal`` (Holm-corrected pairs) against accuracy (McNemar exact)."""
    from grogu.apps.audit import compare, exact_sign_test
    from grogu.apps.audit.stats import judge

    names = setup_names(records)
    col = {s: [r["setups"][s]["signals"][signal] for r in records] for s in names}
    ok = {s: [r["setups"][s]["correct"] for r in records] for s in names}
    acc = {s: sum(v) / len(v) for s, v in ok.items()}
    judged = judge([compare(a, b, col[a], col[b], resamples=2000) for a, b in itertools.combinations(names, 2)])
    out = {"accuracy": acc, "mean": {s: sum(v) / len(v) for s, v in col.items()}, "pairs": []}
    for c in judged:
        only_a = sum(x and not y for x, y in zip(ok[c.a], ok[c.b]))
        only_b = sum(y and not x for x, y in zip(ok[c.a], ok[c.b]))
        out["pairs"].append(
            {
                "a": c.a,
                "b": c.b,
                "acc_diff": acc[c.a] - acc[c.b],
                "acc_p": exact_sign_test(only_a, only_b),
                "signal_diff": c.mean_diff,
                "signal_p_holm": c.p_adjusted,
                "differs": c.differs,
            }
        )
    sig = [p for p in out["pairs"] if p["acc_p"] < 0.05]
    called = [p for p in out["pairs"] if p["differs"]]
    sign = lambda x: (x > 0) - (x < 0)  # noqa: E731
    out["accuracy_significant"] = len(sig)
    out["agree_on_accuracy_significant"] = sum(sign(p["signal_diff"]) == sign(p["acc_diff"]) for p in sig)
    out["verdicts"] = len(called)
    out["verdicts_against_accuracy"] = sum(sign(p["signal_diff"]) == -sign(p["acc_diff"]) for p in called)
    return out


def table(cells: dict, signals: list[str]) -> dict:
    out = {}
    for (data, model), recs in sorted(cells.items()):
        out[f"{data}/{model}"] = {
            "n": len(recs),
            "signals": {
                s: {**concordance(recs, s), "auroc": auroc(recs, s), "setup_level": setup_level(recs, s)}
                for s in signals
            },
        }
    return out


def choose(result: dict, signals: list[str]) -> tuple[str, dict[str, float]]:
    """The committed rule: highest mean concordance over the cells; within TIE of ``utility`` keeps it."""
    mean = {s: sum(c["signals"][s]["concordance"] for c in result.values()) / len(result) for s in signals}
    best = max(signals, key=lambda s: mean[s])
    return (best if mean[best] > mean[CURRENT] + TIE else CURRENT), mean


def sign_test(cells: dict, a: str, b: str) -> dict:
    """Query pairs where exactly one of signals a, b ranks the correct set-up strictly higher (and the
    other strictly lower), pooled over the cells: exact two-sided sign test."""
    from grogu.apps.audit import exact_sign_test

    only_a = only_b = 0
    for recs in cells.values():
        for r, good, bad in judged_pairs(recs):
            sa = r["setups"][good]["signals"][a] - r["setups"][bad]["signals"][a]
            sb = r["setups"][good]["signals"][b] - r["setups"][bad]["signals"][b]
            only_a += sa > 0 and sb < 0
            only_b += sb > 0 and sa < 0
    return {"only_" + a: only_a, "only_" + b: only_b, "p": exact_sign_test(only_a, only_b)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+")
    p.add_argument("--check", default=None, help="held-out: 'utility,<chosen>' (no choice is made)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    from grogu.apps.audit.signals import SIGNALS

    cells = load(args.records)
    signals = list(SIGNALS)
    result = {"cells": table(cells, signals)}
    if args.check:
        a, b = args.check.split(",")
        result["check"] = {"signals": [a, b], "sign_test": sign_test(cells, a, b)}
    else:
        chosen, mean = choose(result["cells"], signals)
        result["rule"] = f"highest mean concordance; within {TIE} of {CURRENT!r} keeps it"
        result["mean_concordance"] = mean
        result["chosen"] = chosen
    print(f"{'cell':<32}{'n':>4}  " + "".join(f"{s[:18]:>20}" for s in signals))
    for cell, c in result["cells"].items():
        print(f"{cell:<32}{c['n']:>4}  " + "".join(f"{c['signals'][s]['concordance']:>20.3f}" for s in signals))
        print(f"{'  (AUROC)':<36}" + "".join(f"{c['signals'][s]['auroc'] or float('nan'):>20.3f}" for s in signals))
        print(
            f"{'  (setup: acc-sig agree / verdicts against)':<36}"
            + "".join(
                f"{'%d/%d, %d/%d' % (v['setup_level']['agree_on_accuracy_significant'], v['setup_level']['accuracy_significant'], v['setup_level']['verdicts_against_accuracy'], v['setup_level']['verdicts']):>20}"
                for v in (c["signals"][s] for s in signals)
            )
        )
    if "chosen" in result:
        print("mean concordance:", {k: round(v, 3) for k, v in result["mean_concordance"].items()})
        print("chosen:", result["chosen"])
    else:
        print("sign test:", result["check"]["sign_test"])
    if args.out:
        result["meta"] = meta(settings={k: v for k, v in vars(args).items() if v != p.get_default(k)})
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
