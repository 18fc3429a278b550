"""Replays grogu's rerank modes on records of ``pipeline_accuracy.py collect`` (see that file).

A mode is a function of a record and a setting that returns the context the pipeline's LLM reads
(indices into the retrieval order, in the order given). Its answer is the recorded answer of that
context, generated with the pipeline's own prompt. The mode logic is ``grogu.rerank.selection``'s.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace
from typing import Any, Iterable

from grogu.core.results import long_context_order
from grogu.rerank import ModeSettings, decide, gated, plan
from grogu.rerank.selection import context_candidates, fuse, kept_relative_to_none, order_by

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from judging import answer_f1, answered_words, judgeable, sign_test  # noqa: E402, F401

TOP_N = 3
DOC_METRICS = ("key_entropy", "entropy", "ppl", "key_ppl")
CTX_METRICS = (
    "key_entropy",
    "entropy",
    "ppl",
    "key_ppl",
    "key_entropy_adaptive",
    "entropy_change",
    "adaptive_entropy_change",
    "copy_aware_key_entropy",
    "copy_aware_entropy_change",
)
WEIGHTS = (0.2, 0.4, 0.6, 0.8)
MARGINS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
FAMILIES = ("swap", "swap_reversed", "swap_orders", "orders", "drop")
RULE_METRICS = ("key_entropy", "entropy", "ppl", "entropy_change")  # the combined rule's confidence terms
WEIGHTS_COMBINED = (0.25, 0.5, 0.75)
MARGINS_AGREEMENT = (0.0, 0.05, 0.1, 0.2)
SUPPORT_METRICS = ("key_entropy", "entropy", "ppl", "key_ppl")  # the confidence_support rule's confidence terms
SUPPORT_WEIGHTS = (0.1, 0.3, 1.0, 3.0)
# the selective context mode (gate "doubt"): its thresholds and the candidates' rule tried on the tuning splits
GATE_SUPPORTS = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0)
GATE_CONFIDENCES = (0.0, 0.3, 0.4, 0.5, 0.6)
SELECTIVE_FAMILIES = ("swap_reversed", "swap_orders")
#: the candidates' rule, when in doubt: the context mode's (rule confidence_support, KeyEntropy, weight 1, margin 0.3)
SELECTIVE_METRICS = ("key_entropy",)
SELECTIVE_WEIGHTS = (1.0,)
SELECTIVE_MARGINS = (0.3,)
#: the bars the selective mode's setting must meet on the pooled tuning splits (pipeline_modes.choose_selective)
MAX_CHANGED, MIN_PRECISION = 0.35, 0.70


def key(order: Iterable[int]) -> str:
    return ",".join(map(str, order))


def k_of(rec: dict, top_k: int) -> int:
    return min(top_k, len(rec["retrieved"]))


def util(rec: dict, prompt: str, metric: str, k: int) -> list[float]:
    docs = rec["docs"] if prompt == "pipe" else rec["docs_own"]
    if docs is None:
        raise KeyError(f"{prompt} prompt not recorded")
    return [d["variants"][metric] for d in docs[:k]]


def relevance(rec: dict, k: int) -> list[float]:
    return [r["score"] for r in rec["retrieved"][:k]]


# ------------------------------------------------------------------------------------------ the modes
def mode_retriever(rec: dict, s: dict) -> list[int]:
    return list(range(min(TOP_N, k_of(rec, s["k"]))))


def mode_document(rec: dict, s: dict) -> list[int]:
    return order_by(util(rec, s["prompt"], s["metric"], k_of(rec, s["k"])))[:TOP_N]


def mode_fusion(rec: dict, s: dict) -> list[int]:
    k = k_of(rec, s["k"])
    return order_by(fuse(util(rec, s["prompt"], s["metric"], k), relevance(rec, k), s["weight"]))[:TOP_N]


def mode_prune(rec: dict, s: dict) -> list[int]:
    k = k_of(rec, s["k"])
    kept = kept_relative_to_none(util(rec, "pipe", s["metric"], k), rec["none"]["variants"][s["metric"]])
    out = [i for i in range(k) if kept[i]][:TOP_N]
    return out or list(range(min(TOP_N, k)))  # nothing passes: the retriever's top-n, nothing dropped


#: the context mode's settings a record replay takes from a setting dict (the rest are the product's defaults)
CONTEXT_KEYS = (
    "family",
    "margin",
    "rule",
    "confidence_weight",
    "support_weight",
    "supported",
    "swaps",
    "gate",
    "gate_support",
    "gate_confidence",
)


def context_settings(s: dict) -> ModeSettings:
    """The ModeSettings of a setting dict: its ``metric`` is the context mode's ``context_metric``."""
    return ModeSettings(mode="context", context_metric=s["metric"], **{k: s[k] for k in CONTEXT_KEYS if k in s})


def mode_context(rec: dict, s: dict) -> list[int]:
    """The context mode exactly as grogu runs it (``grogu.rerank.plan`` and ``decide``) on the recorded
    candidates' answers and scores; the support tie-break reads the records' document texts."""
    settings = context_settings(s)
    k = k_of(rec, s["k"])
    cands = plan(settings, list(range(k)), TOP_N)
    present = [c for c in cands if key(c) in rec["contexts"]]
    if len(present) < len(cands) and not (gated(settings, cands) and present == cands[:1]):
        raise KeyError(f"candidates of {s} not recorded")  # a gated collection with the first alone: calm
    scored = [
        SimpleNamespace(
            score=None,
            metric=None,
            variants=rec["contexts"][key(c)]["variants"],
            answer=rec["contexts"][key(c)]["answer"],
        )
        for c in present
    ]
    return decide(settings, list(range(k)), cands, scored, TOP_N, None, None, rec.get("texts")).order


MODES = {
    "retriever": mode_retriever,
    "document": mode_document,
    "fusion": mode_fusion,
    "prune": mode_prune,
    "context": mode_context,
    "paper": mode_document,
    "former": mode_context,
    "confidence": mode_context,
    "selective": mode_context,
    "always": mode_context,
}
#: the paper's per-document GROGU as GroguRerank did it before the modes: grogu's prompt, KeyEntropy
PAPER = {"prompt": "own", "metric": "key_entropy"}


def grid(mode: str, k: int) -> list[dict]:
    """Every setting of a mode the tuning split chooses among."""
    prompts = ("pipe", "own") if k <= 5 else ("pipe",)  # grogu's own prompt is recorded for the top-5
    if mode == "paper":
        return [{"k": k, **PAPER}]
    if mode == "retriever":
        return [{"k": k}]
    if mode == "selective":
        return [
            {
                "k": k,
                "family": f,
                "rule": "confidence_support",
                "metric": m,
                "support_weight": b,
                "margin": g,
                "gate": "doubt",
                "gate_support": gs,
                "gate_confidence": gc,
            }
            for f in SELECTIVE_FAMILIES
            for m in SELECTIVE_METRICS
            for b in SELECTIVE_WEIGHTS
            for g in SELECTIVE_MARGINS
            for gs in GATE_SUPPORTS
            for gc in GATE_CONFIDENCES
            if gs or gc
        ]
    if mode == "document":
        return [{"k": k, "prompt": p, "metric": m} for p in prompts for m in DOC_METRICS]
    if mode == "fusion":
        return [{"k": k, "prompt": p, "metric": m, "weight": w} for p in prompts for m in DOC_METRICS for w in WEIGHTS]
    if mode == "prune":
        return [{"k": k, "metric": m} for m in DOC_METRICS]
    out = []
    for f in FAMILIES:  # each rule of grogu.rerank.selection; the support tie-break on (it never changes the answer)
        out += [
            {"k": k, "family": f, "rule": "confidence", "metric": m, "margin": g} for m in CTX_METRICS for g in MARGINS
        ]
        out += [
            {"k": k, "family": f, "rule": "agreement", "metric": "key_entropy", "margin": g} for g in MARGINS_AGREEMENT
        ]
        out += [
            {"k": k, "family": f, "rule": "combined", "metric": m, "confidence_weight": w, "margin": g}
            for m in RULE_METRICS
            for w in WEIGHTS_COMBINED
            for g in MARGINS_AGREEMENT[:3]
        ]
        out += [
            {"k": k, "family": f, "rule": "confidence_support", "metric": m, "support_weight": b, "margin": g}
            for m in SUPPORT_METRICS
            for b in SUPPORT_WEIGHTS
            for g in MARGINS
        ]
    return out


def needed_contexts(rec: dict, k: int, settings: dict[str, dict] | None = None) -> list[list[int]]:
    """Every context the modes can choose for this record (the collector scores them all): over the
    whole tuning grid, or only for the given settings ({"mode@k": setting})."""
    if settings is None:
        runs = [(mode, s) for mode in MODES for s in grid(mode, k)]
    else:
        runs = [(name.split("@")[0], s) for name, s in settings.items() if s["k"] == k]
    out: list[list[int]] = [mode_retriever(rec, {"k": k})]
    for mode, s in runs:
        if s.get("prompt") == "own" and not rec.get("docs_own"):
            continue
        cands = (
            context_candidates(k_of(rec, k), TOP_N, s["family"])
            if MODES[mode] is mode_context
            else [MODES[mode](rec, s)]
        )
        out += [c for c in cands if c not in out]
    return out


def wide_contexts(k: int) -> list[list[int]]:
    """What ``collect --contexts wide`` scores, so that every candidate family and selection rule can be
    replayed: each swap candidate (the top-3, and its third document swapped for the 4th or 5th) as
    given, reversed and in LongContextReorder's order, and the drop family's subsets of the top 4."""
    out: list[list[int]] = []
    for c in context_candidates(k, TOP_N, "swap") + context_candidates(k, TOP_N, "drop"):
        for o in (c, c[::-1], long_context_order(c)):
            if o not in out:
                out.append(o)
    return out


def needs_own_prompt(settings: dict[str, dict] | None) -> bool:
    return settings is None or any(s.get("prompt") == "own" for s in settings.values())


def needs_pipe_prompt(settings: dict[str, dict] | None) -> bool:
    return settings is None or any(
        s.get("prompt") == "pipe" or name.startswith("prune") for name, s in settings.items()
    )


# ------------------------------------------------------------------------------------------ statistics
def judged(rec: dict, ctx: list[int]) -> tuple[bool, float, int]:
    """(correct by whole words, token F1, answer length in words) of the answer a context gave."""
    answer = rec["contexts"][key(ctx)]["answer"]
    return answered_words(answer, rec["answers"]), answer_f1(answer, rec["answers"]), len(answer.split())


def evaluate(records: list[dict], mode: str, s: dict) -> dict:
    """A mode against the retriever's top-3 on the records whose gold answers words can judge
    (``pipeline_accuracy.judgeable``): accuracy by whole words (wins / losses, exact sign test), token F1,
    answer length in words, the share of queries whose context changed and the precision of the changes
    (wins / (wins + losses)), and how often the gold paragraph is given / given first."""
    correct, base, f1, base_f1, words, base_words, changed, given, first = ([] for _ in range(9))
    wins = losses = 0
    for rec in records:
        if not judgeable(rec["answers"]):
            continue
        try:  # a record collected without what this mode needs (e.g. a lean held-out pass) is skipped
            ctx = MODES[mode](rec, s)
            c, f, w = judged(rec, ctx)
        except (KeyError, TypeError):
            continue
        retr = mode_retriever(rec, s)
        b, bf, bw = judged(rec, retr)
        ids = [rec["retrieved"][i]["id"] for i in ctx]
        correct.append(c), base.append(b), f1.append(f), base_f1.append(bf), words.append(w), base_words.append(bw)
        changed.append(ctx != retr)
        given.append(any(g in ids for g in rec["gold"]))
        first.append(bool(ids) and ids[0] in rec["gold"])
        wins += c and not b
        losses += b and not c
    n = len(correct)
    if n == 0:
        return {"mode": mode, "setting": s, "n": 0}
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    return {
        "mode": mode,
        "setting": s,
        "n": n,
        "accuracy": mean(correct),
        "retriever_accuracy": mean(base),
        "wins": wins,
        "losses": losses,
        "p": sign_test(wins, losses),
        "f1": mean(f1),
        "retriever_f1": mean(base_f1),
        "words": mean(words),
        "retriever_words": mean(base_words),
        "changed": mean(changed),
        "precision": wins / (wins + losses) if wins + losses else None,
        "gold_given": mean(given),
        "gold_first": mean(first),
    }


def tune(records: list[dict], mode: str, k: int, by: str = "accuracy") -> dict:
    """The setting chosen on tuning records. ``by="accuracy"``: the best tuning accuracy (ties: fewer
    changes from the retriever, then grid order). ``by="maximin"``, over the records grouped by data set:
    a setting that never loses to the retriever on any set (wins >= losses on each) first, then the best
    worst-set gain in accuracy, then the best mean gain, then the fewest candidate contexts (the cost),
    then fewer changes."""
    sets: dict[str, list[dict]] = {}
    for r in records:
        sets.setdefault(r.get("data", "all") if by == "maximin" else "all", []).append(r)
    best = None
    for s in grid(mode, k):
        if s.get("prompt") == "own" and not all(r.get("docs_own") for r in records):
            continue
        res = [evaluate(recs, mode, s) for recs in sets.values()]
        if any(r["n"] == 0 for r in res):
            continue
        gains = [r["accuracy"] - r["retriever_accuracy"] for r in res]
        changes = -sum(r["wins"] + r["losses"] for r in res)
        if by == "maximin":
            cost = -len(context_candidates(k, TOP_N, s["family"])) if mode == "context" else 0
            score = (
                all(r["wins"] >= r["losses"] for r in res),
                round(min(gains), 9),
                round(sum(gains) / len(gains), 9),
                cost,
                changes,
            )
        else:
            score = (res[0]["accuracy"], changes)
        if best is None or score > best[0]:
            best = (score, s)
    if best is None:
        raise ValueError(f"no setting of {mode} can be evaluated on these records")
    return best[1]


def doubt_rate(records: list[dict], s: dict) -> float:
    """The share of records on which the selective mode's gate finds the retriever's context in doubt."""
    from grogu.rerank import doubt

    settings = context_settings(s)
    first = list(range(min(TOP_N, k_of(records[0], s["k"]))))
    return sum(
        doubt(
            settings,
            SimpleNamespace(answer=r["contexts"][key(first)]["answer"], variants=r["contexts"][key(first)]["variants"]),
            r["texts"],
            first,
        )
        for r in records
    ) / len(records)


def choose_selective(records: list[dict], k: int = 5) -> tuple[dict, list[tuple]]:
    """The selective context mode's setting, chosen on tuning records grouped by data set, by a rule fixed
    before any held-out record is collected:

    1. eligible: wins >= losses on every tuning set (whole words), the context changed on at most
       ``MAX_CHANGED`` of the pooled questions, and the changes' precision (wins / (wins + losses)) at
       least ``MIN_PRECISION``;
    2. among them, the most pooled net wins (wins − losses), then the largest pooled token-F1 gain, then the
       fewest changes, then the cheapest (fewest candidates answered per query), then grid order.
    If no setting is eligible, the precision bar is dropped (and then the change bar), and that is said.
    Returns the setting and the ranked rows (for the report)."""
    sets: dict[str, list[dict]] = {}
    for r in records:
        sets.setdefault(r.get("data", "all"), []).append(r)
    rows = []
    for s in grid("selective", k):
        res = [{**evaluate(recs, "selective", s), "data": name} for name, recs in sets.items()]
        pooled = {**evaluate(records, "selective", s), "data": "pooled"}
        if any(r["n"] == 0 for r in res):
            continue
        n_cands = len(context_candidates(k, TOP_N, s["family"]))
        cost = 1 + doubt_rate(records, s) * (n_cands - 1)
        rows.append((s, res, pooled, cost))

    def rank(row: tuple) -> tuple:
        s, res, pooled, cost = row
        return (
            pooled["wins"] - pooled["losses"],
            round(pooled["f1"] - pooled["retriever_f1"], 9),
            -pooled["changed"],
            -cost,
        )

    for bars in (("wins", "changed", "precision"), ("wins", "changed"), ("wins",)):
        ok = [
            row
            for row in rows
            if all(r["wins"] >= r["losses"] for r in row[1])
            and ("changed" not in bars or row[2]["changed"] <= MAX_CHANGED)
            and ("precision" not in bars or (row[2]["precision"] or 0) >= MIN_PRECISION)
        ]
        if ok:
            ranked = sorted(ok, key=rank, reverse=True)
            print(f"selective: {len(ok)} of {len(rows)} settings meet the bars {bars}", file=sys.stderr)
            return ranked[0][0], ranked
    raise ValueError("no selective setting wins at least as often as it loses on every tuning set")


def load(paths: list[str]) -> list[dict]:
    rows: dict[str, dict] = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            rows[r["qid"]] = r
    return list(rows.values())


HEADER = (
    "| data | mode (setting) | n | accuracy | retriever | W / L | sign p | F1 | retriever F1 | words | "
    "retriever words | changed | precision | gold given | gold first |\n|" + "---|" * 15
)


def fmt_row(r: dict) -> str:
    s = ", ".join(f"{k}={v}" for k, v in r["setting"].items() if k != "k")
    precision = "–" if r["precision"] is None else f"{r['precision']:.2f}"
    return (
        f"| {r.get('data', '')} | {r['mode']} ({s}) | {r['n']} | {100 * r['accuracy']:.1f} % | "
        f"{100 * r['retriever_accuracy']:.1f} % | {r['wins']} / {r['losses']} | {r['p']:.3g} | "
        f"{100 * r['f1']:.1f} | {100 * r['retriever_f1']:.1f} | {r['words']:.1f} | {r['retriever_words']:.1f} | "
        f"{100 * r['changed']:.0f} % | {precision} | {100 * r['gold_given']:.1f} % | {100 * r['gold_first']:.1f} % |"
    )


def choose(args: Any) -> None:
    """The selective mode's setting on the tuning records (:func:`choose_selective`), saved beside the
    settings it is compared with."""
    setting, ranked = choose_selective(load(args.tune))
    print(HEADER)
    for s, res, pooled, cost in ranked[: args.top]:
        for r in [*res, pooled]:
            print(fmt_row(r), f"cost {cost:.2f}")
    if args.save_settings:
        base = json.load(open(args.settings)) if args.settings else {}
        json.dump({**base, "selective@5": setting}, open(args.save_settings, "w"), indent=1)
    print(json.dumps(setting))


def report(args: Any) -> None:
    tune_recs, eval_recs = load(args.tune), load(args.eval)
    settings: dict[str, dict] = json.load(open(args.settings)) if args.settings else {}
    out: dict[str, Any] = {"tuning": {}, "held_out": {}}
    for k in args.ks:
        if not any(r["top_k"] >= k for r in tune_recs + eval_recs):
            continue
        t = [r for r in tune_recs if r["top_k"] >= k]
        e = [r for r in eval_recs if r["top_k"] >= k]
        for mode in [*MODES, *(n.split("@")[0] for n in settings if n.split("@")[0] not in MODES)]:
            name = f"{mode}@{k}"
            if name not in settings and t and (args.modes is None or mode in args.modes):
                try:
                    settings[name] = tune(t, mode, k, by=args.tune_by)
                except ValueError:
                    continue
            if name not in settings:
                continue
            for part, recs in (("tuning", t), ("held_out", e)):
                names = sorted({r.get("data", "all") for r in recs})
                for data in names + (["pooled"] if len(names) > 1 else []):
                    res = evaluate(
                        [r for r in recs if data == "pooled" or r.get("data", "all") == data], mode, settings[name]
                    )
                    if res["n"]:
                        out[part][f"{name} {data}"] = {**res, "data": data}
    for part in ("tuning", "held_out"):
        if out[part]:
            print(f"\n{part}\n{HEADER}")
            for r in out[part].values():
                print(fmt_row(r))
    agree = [r["agree"] for r in eval_recs + tune_recs if "agree" in r]
    if agree:
        print(f"\nengine answer == LlamaIndex synthesizer answer on the retriever's context: {sum(agree)}/{len(agree)}")
    if args.save_settings:
        json.dump(settings, open(args.save_settings, "w"), indent=1)
    json.dump(out, sys.stderr, indent=1)
