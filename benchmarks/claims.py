"""Published figures rendered from their records, so that the README cannot drift from what was measured.

Each results table of the README is declared here (:data:`TABLES`): its header and rows. A row names the
committed records it reads (JSON or JSONL under ``benchmarks/results/``), the source paths it measures,
and a function that computes its cells from those records. In the Markdown, a marker
``<!-- claims: NAME -->`` (on its own line or at the end of the line before) says where table NAME goes:
the first block of ``|`` lines after it.

- ``python benchmarks/claims.py`` checks: every marked table equals its rendering, every record exists,
  and no results table holds a figure outside a marked table. Exit 1 with what differs.
- ``python benchmarks/claims.py --write`` rewrites the marked tables in place.

The last column, "code", says which code a row measured: the commit in the record's ``meta`` (or, where
a record has none, the commit that added it). When a line of a source path the row measures differs
from that commit (whitespace and blank lines aside), the cell says so ("older code"): the row then
describes code that is no longer there, and a new run of its benchmark is due. A row without a record
says "no record" in place of its figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- claims: ([\w-]+) -->")
#: the files whose results tables are rendered here
FILES = ("README.md", "CONTRIBUTING.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))


@functools.lru_cache(maxsize=None)
def load(path: str) -> Any:
    """A record: a JSON file, or a JSONL file as a list of its lines' objects (a text file as its text)."""
    p = ROOT / path
    if path.endswith(".jsonl"):
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    if path.endswith(".json"):
        return json.loads(p.read_text())
    return p.read_text()


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()


@dataclass
class Row:
    """One row: ``cells()`` computes its cells (all but the last, "code") from ``records``.

    Attributes:
        records: committed files the row reads (paths from the repository's root); none: "no record".
        measures: source paths whose code the figures describe.
        commit: the code the records measured (default: the ``meta.commit`` of the first record, else the
            commit that added it).
        cells: the row's cells; with no records, ``label`` and "no record" are shown instead.
    """

    label: str
    records: tuple[str, ...] = ()
    measures: tuple[str, ...] = ()
    cells: Callable[[], list[str]] | None = None
    commit: str | None = None
    width: int = 0  # cells of the table (the "no record" row fills them)

    def code(self) -> str:
        return provenance(self.records, self.measures, self.commit)

    def render(self, width: int) -> list[str]:
        if not self.records or self.cells is None:
            return [self.label, "no record", *["–"] * (width - 3), self.code()]
        return [*self.cells(), self.code()]


def provenance(records: tuple[str, ...], measures: tuple[str, ...], commit: str | None = None) -> str:
    """Which code ``records`` measured: a commit, with ", older code" where a line of ``measures`` changed
    since; "–" without records."""
    if not records:
        return "–"
    if shallow():  # the history that says which commit added a record is not here
        return f"{commit or '?'} (not in this history)"
    commit = commit or measured_commit(records[0])
    if not commit:
        return "not committed"
    if not git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"):
        return f"{commit} (not in this history)"
    return f"{commit}, older code" if code_changed(commit, measures) else commit


@functools.lru_cache(maxsize=None)
def shallow() -> bool:
    return git("rev-parse", "--is-shallow-repository") == "true"


def code_changed(commit: str, paths: tuple[str, ...]) -> bool:
    """Whether a line of ``paths`` differs between ``commit`` and the working tree's HEAD, blank lines and
    whitespace aside (a reformatting changes no figure; a reverted change leaves none)."""
    if not paths:
        return False
    diff = git("diff", "-w", "--ignore-blank-lines", "-U0", commit, "HEAD", "--", *paths)
    return any(line[:1] in "+-" and line[:3] not in ("+++", "---") for line in diff.splitlines() if line)


def measured_commit(path: str) -> str:
    """The commit a record measured: its ``meta.commit``, else the commit that first added the file."""
    try:
        record = load(path)
    except (OSError, ValueError):
        return ""
    meta = record.get("meta") if isinstance(record, dict) else None
    # a JSONL or text record says it in a sidecar (``NAME.meta.json``); a run's folder once for all its files
    for beside in (ROOT / f"{path}.meta.json", ROOT / Path(path).parent / "meta.json"):
        if not meta and beside.exists():
            meta = load(str(beside.relative_to(ROOT)))
    if meta and meta.get("commit"):
        return str(meta["commit"])[:7]
    added = git("log", "--diff-filter=A", "--format=%h", "--", path).splitlines()
    return added[-1] if added else ""


@dataclass
class Table:
    name: str
    header: tuple[str, ...]
    rows: list[Row] = field(default_factory=list)

    def render(self) -> list[str]:
        header = [*self.header, "code"]
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for row in self.rows:
            cells = row.render(len(header))
            assert len(cells) == len(header), (self.name, row.label, cells)
            lines.append("| " + " | ".join(cells) + " |")
        return lines

    def missing(self) -> list[str]:
        return [p for row in self.rows for p in row.records if not (ROOT / p).exists()]


# ---------------------------------------------------------------------------------------------- formats
def times(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}×"


def mean(xs) -> float:
    return statistics.fmean(list(xs))


# ---------------------------------------------------------------------------------------------- the GPU table
GPU = "benchmarks/results/gpu/run_43d0617"
GPU_CODE = ("src/grogu/runtime/engine/",)
PIPELINE_CODE = ("src/grogu/runtime/", "src/grogu/rerank/", "integrations/llama-index-postprocessor-grogu/")


def _gpu_query() -> list[str]:
    f32, bf16 = load(f"{GPU}/latency_float32_summary.json"), load(f"{GPU}/latency_bfloat16_summary.json")
    a, b = f32["selective@5"], bf16["selective@5"]
    mean_ = f"{times(a['ratio of means'])} / {times(b['ratio of means'])} the plain query (ratio of means)"
    median = f"median {times(a['ratio (median of per-question ratios)'])} / {times(b['ratio (median of per-question ratios)'])}"
    p90 = f"p90 {times(a['ratio p90 (per-question ratios)'])} / {times(b['ratio p90 (per-question ratios)'])}"
    ran = f"{f32['questions']} / {bf16['questions']} of 40 questions ran before the step's limit"
    failed = load(f"{GPU}/log_last_call.txt").count("CUDA graph capture failed")
    met = a["ratio of means"] <= 0.7 and b["ratio of means"] <= 0.7
    return [
        "whole LlamaIndex query, default rerank, SmolLM2, held-out SQuAD: float32 / bf16",
        f"{mean_}, {median}, {p90}; {ran}; {failed or 'no'} capture failed in the log",
        "≤ 0.7×: " + ("met on the questions run" if met else "not met"),
    ]


def _gpu_tune() -> list[str]:
    log = load(f"{GPU}/log_last_call.txt")
    wall = float(re.search(r"tune wall ([\d.]+) s", log).group(1))
    graphs = json.loads(re.search(r"^graphs smollm2[^:]*: (\{.*\})$", log, re.M).group(1))
    return [
        "`grogu tune`, 100 labelled questions",
        f"{wall:.0f} s; {graphs['captured']} graphs captured, {graphs['failed']} failed, "
        f"{graphs['eager_steps']} steps eager",
        "< 2 min: " + ("met" if wall < 120 else "not met"),
    ]


def _gpu_step() -> list[str]:
    rows = {r["k"]: r for r in load(f"{GPU}/engine_speed_qwen2.5-7b.json")["rows"]}
    ks = sorted(rows)
    ms = " / ".join(f"{rows[k]['default_decode_ms_per_step']:.2f}" for k in ks)
    over = [rows[k]["default_decode_over_bandwidth_floor"] for k in ks]
    return [
        f"decode step, 7B shape (bf16, random weights), k = {' / '.join(map(str, ks))}",
        f"{ms} ms: {' / '.join(times(x) for x in over)} the bandwidth floor",
        "≤ 2.0×: " + ("met" if max(over) <= 2.0 else "not met"),
    ]


# ---------------------------------------------------------------------------------------------- statistics
def sign_test(wins: int, losses: int) -> float:
    """The exact two-sided sign test on discordant pairs."""
    n = wins + losses
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n)


def p90(xs) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def p_text(p: float) -> str:
    return "1" if p >= 0.995 else f"{p:.2g}" if p >= 0.001 else f"{p:.1g}"


# ---------------------------------------------------------------------------------------------- what it costs
R = "benchmarks/results"
COST = (f"{R}/cost_whole_query_seed4_squad.jsonl", f"{R}/cost_whole_query_seed4_nq.jsonl")
NO_KEPT = (f"{R}/cost_whole_query_squad.jsonl", f"{R}/cost_whole_query_nq.jsonl")
RERANK_CODE = ("src/grogu/rerank/", "src/grogu/runtime/engine/")
LI_CODE = ("integrations/llama-index-postprocessor-grogu/", *RERANK_CODE)
LC_CODE = ("integrations/langchain-grogu/", *RERANK_CODE)
ENTRY_LC = tuple(f"{R}/entry_langchain_{d}.jsonl" for d in ("squad", "nq", "hotpotqa"))


def _arm(path: str, arm: str) -> dict:
    rows = load(path)
    runs, plain = [r[arm] for r in rows], [r["plain_s"] for r in rows]
    ratios = [x["ratio"] for x in runs]
    doubt = [i for i, x in enumerate(runs) if x["doubt"]]
    calm = [i for i, x in enumerate(runs) if not x["doubt"]]

    def rom(idx):
        return mean(runs[i]["s"] for i in idx) / mean(plain[i] for i in idx) if idx else math.nan

    return {
        "n": len(rows),
        "median": statistics.median(ratios),
        "mean": mean(x["s"] for x in runs) / mean(plain),
        "p90": p90(ratios),
        "calm": rom(calm),
        "doubt": rom(doubt),
        "doubt_share": len(doubt) / len(rows),
    }


def _pair(fmt: Callable[[dict], str], a: dict, b: dict) -> str:
    return f"{fmt(a)} / {fmt(b)}"


def _cost_default() -> list[str]:
    a, b = (_arm(p, "selective@5") for p in COST)
    more = [_arm(p, "selective@5")["doubt"] / x["doubt"] - 1 for p, x in zip(NO_KEPT, (a, b))]
    return [
        f"default context mode, whole LlamaIndex query, {a['n']} SQuAD / {b['n']} NQ-open questions, prompts kept "
        f"between calls (`retain_prefix_tokens=4096`; off by default, a doubtful query then costs about "
        f"{100 * mean(more):.0f} % more)",
        f"median {times(a['median'], 1)} / {times(b['median'], 1)}, mean {times(a['mean'], 1)} / {times(b['mean'], 1)}, "
        f"p90 {times(a['p90'], 1)} / {times(b['p90'], 1)}; calm {times(a['calm'], 1)} / {times(b['calm'], 1)}, "
        f"in doubt ({100 * a['doubt_share']:.0f} % / {100 * b['doubt_share']:.0f} %) "
        f"{times(a['doubt'], 1)} / {times(b['doubt'], 1)}",
        "not met: mean ≤ 1.5×, median ≤ 1.3× (NQ-open only), p90 ≤ 3×",
    ]


def _cost_always() -> list[str]:
    a, b = (_arm(p, "context@5") for p in COST)
    return [
        f'`gate="always"`: six candidates on every query, {a["n"]} SQuAD / {b["n"]} NQ-open',
        f"mean {times(a['mean'], 1)} / {times(b['mean'], 1)}, p90 {times(a['p90'], 1)} / {times(b['p90'], 1)}",
        "not met: mean ≤ 1.5×" if max(a["mean"], b["mean"]) > 1.5 else "met: mean ≤ 1.5×",
    ]


def _entry_rows() -> list[dict]:
    return [r for p in ENTRY_LC for r in load(p)]


def _cost_langchain() -> list[str]:
    rows = _entry_rows()
    ratio = [r["lc_qa"]["seconds"] / r["plain"]["seconds"] for r in rows]
    doubt = [bool((r["lc_qa"].get("gate") or {}).get("in_doubt")) for r in rows]

    def rom(keep):
        chosen = [r for r, k in zip(rows, keep) if k]
        return sum(r["lc_qa"]["seconds"] for r in chosen) / sum(r["plain"]["seconds"] for r in chosen)

    xs = sorted(ratio)
    return [
        f"LangChain `as_qa_chain()`, whole chain, {len(rows)} questions: calm / in doubt",
        f"mean {times(rom([not d for d in doubt]), 1)} / {times(rom(doubt), 1)}; all {times(rom([True] * len(rows)), 1)}, "
        f"p90 {times(xs[round(0.9 * (len(xs) - 1))], 1)}",
        "none set",
    ]


def _cost_engine() -> list[str]:
    xeon = load(f"{R}/engine_speed/smollm2_k10_xeon.json")["rows"][0]
    zen4 = load(f"{R}/engine_speed/smollm2_k10_epyc_zen4.json")["rows"][0]
    a, b = xeon["naive_s"] / xeon["default_s"], zen4["naive_s"] / zen4["default_s"]
    return [
        "GROGU of 10 documents, against the naive loop",
        f"{times(a, 1)} faster on a Xeon, {times(b, 1)} on a Zen 4 EPYC (ratio of means, 2 queries)",
        "met: ≥ 3×" if min(a, b) >= 3 else "not met: ≥ 3×",
    ]


# ---------------------------------------------------------------------------------------------- accuracy
def _accuracy(rows: list[dict], got: Callable[[dict], bool], plain: Callable[[dict], bool], changed) -> list[str]:
    wins = sum(got(r) and not plain(r) for r in rows)
    losses = sum(plain(r) and not got(r) for r in rows)
    return [
        pct(mean(plain(r) for r in rows)),
        pct(mean(got(r) for r in rows)),
        f"{wins} / {losses}",
        p_text(sign_test(wins, losses)),
        f"{100 * mean(changed(r) for r in rows):.0f} %",
    ]


def _counts(rows: list[dict], key: str = "data") -> str:
    """Questions per set: SQuAD, NQ-open, HotpotQA (its dev or train sample)."""
    sets = [r[key].split("-")[0] for r in rows]
    return ", ".join(str(sets.count(d)) for d in ("squad", "nq", "hotpotqa"))


def _langchain(arm: str, label: str, rule: str) -> Callable[[], list[str]]:
    def cells() -> list[str]:
        rows = _entry_rows()
        return [
            label,
            _counts(rows),
            *_accuracy(
                rows,
                lambda r: bool(r[arm]["correct"]),
                lambda r: bool(r["plain"]["correct"]),
                lambda r: r[arm]["given"] != [0, 1, 2],
            ),
            rule,
        ]

    return cells


def _three_prompts() -> list[str]:
    rows = load(f"{R}/prompt_gate/held_report.json")["outcomes"]["shipped"]
    per = len(rows) // 3
    return [
        "prompts: the README's, \"a few words\", LlamaIndex's",
        f"{per} each",
        *_accuracy(rows, lambda r: r["correct"], lambda r: r["plain_correct"], lambda r: r["changed"]),
        "not met: README prompt loses; p",
    ]


TUNE_EVAL = (f"{R}/tune_validation/eval_results.jsonl", f"{R}/tune_validation_seed8/eval_results.jsonl")


def _two_samples() -> list[str]:
    rows = [r for p in TUNE_EVAL for r in load(p) if r.get("judged", True)]
    per = len(rows) // 2
    return [
        "prompts: the README's, LlamaIndex's (two tune samples)",
        f"{per} each",
        *_accuracy(
            rows, lambda r: r["shipped"]["correct"], lambda r: r["keep"]["correct"], lambda r: r["shipped"]["changed"]
        ),
        "not met: first rule (23 / 10); second rule (seed 8)",
    ]


# ---------------------------------------------------------------------------------------------- tune's validations
RULES = f"{R}/validation_rules.json"
TUNE_CODE = ("src/grogu/apps/tune/", *RERANK_CODE)


def _tune_reports() -> list[tuple[dict, dict]]:
    """(attempt, its report) for each validation of ``grogu tune`` judged by whole words (seeds 7 and 8), in
    the order they were run."""
    return [(a, load(a["report"])) for a in load(RULES)["validations"] if a.get("tune") and a.get("kind") != "dense"]


def _tune_pair(rows: list[dict], a: str, b: str, per_question: bool = False) -> tuple[int, int]:
    """(wins, losses) of arm ``a`` against ``b``: per answer, or per question (its answers under every
    prompt summed)."""
    if not per_question:
        return sum(r[a]["correct"] > r[b]["correct"] for r in rows), sum(
            r[a]["correct"] < r[b]["correct"] for r in rows
        )
    tot: dict[tuple, list[int]] = {}
    for r in rows:
        t = tot.setdefault((r["sample"], r["data"], r["id"]), [0, 0])
        t[0] += r[a]["correct"]
        t[1] += r[b]["correct"]
    return sum(x > y for x, y in tot.values()), sum(x < y for x, y in tot.values())


def _tune_rows() -> list[dict]:
    return [{**r, "sample": p} for p in TUNE_EVAL for r in load(p) if r.get("judged", True)]


def _fig_tune_runs() -> str:
    sets = [s for _, rep in _tune_reports() for s in rep["sets"]]
    adopted = sum(bool(s["tuned"].get("adopted")) for s in sets)
    return f"{len(sets)} validation runs it " + (
        "never chose another" if not adopted else f"chose another {adopted} times"
    )


def _fig_first_rule() -> str:
    first = _tune_reports()[0][1]["pooled"]["tuned_vs_shipped"]
    return f"{first['losses']} / {first['wins']}"


def _fig_second_rule() -> str:
    rep = _tune_reports()[1][1]
    worst = min(rep["sets"], key=lambda s: s["shipped_vs_keep"]["wins"] - s["shipped_vs_keep"]["losses"])
    x = worst["shipped_vs_keep"]
    data = {"nq": "NQ-open", "squad": "SQuAD", "hotpotqa": "HotpotQA"}[worst["data"]]
    prompt = {"readme": "the README's prompt", "llamaindex": "LlamaIndex's prompt"}[worst["prompt"]]
    return f"{x['losses']} / {x['wins']} on {data}, under {prompt}"


def _fig_both_samples() -> str:
    rows = _tune_rows()
    w, lo = _tune_pair(rows, "shipped", "keep")
    qw, ql = _tune_pair(rows, "shipped", "keep", per_question=True)
    return f"On {len(rows)} fresh answers the default beat the retriever's order {w} / {lo} (per question {qw} / {ql})"


def _fig_readme_prompt_lost() -> str:
    rows = [r for r in load(f"{R}/prompt_gate/held_report.json")["outcomes"]["shipped"] if r["prompt"] == "readme"]
    return f"{sum(r['correct'] > r['plain_correct'] for r in rows)} / {sum(r['correct'] < r['plain_correct'] for r in rows)}"


def _fig_readme_prompt_tune() -> str:
    rows = [r for r in _tune_rows() if r["prompt"] == "readme"]
    w, lo = _tune_pair(rows, "shipped", "keep")
    return f"{w} / {lo}"


def _fig_gpu_exact() -> str:
    rows = load(f"{GPU}/decode_check.json")["rows"]
    same = [tuple(map(int, r["same_answers"].split(" / "))) for r in rows]
    sampled = [tuple(map(int, r["sampled_same_as_eager"].split(" / "))) for r in rows if "sampled_same_as_eager" in r]
    worst = min(same + sampled, key=lambda t: t[0] / t[1])
    return f"{worst[0]} / {worst[1]}"


def _fig_seed9() -> str:
    sets = load(SEED9)["sets"]
    chose = {s["tuned"]["decision"] for s in sets}
    keep = " and ".join(f"{s['shipped_vs_keep']['wins']} / {s['shipped_vs_keep']['losses']}" for s in sets)
    ok = all(s["dense_checks"]["never_loses_to_better"] for s in sets)
    return (
        f"On fresh SQuAD questions under {len(sets)} prompts (tuned on 50, judged on {sets[0]['n']} each), the rule "
        f"kept {'the shipped default' if chose == {'default'} else ', '.join(sorted(chose))}, which beat the "
        f"retriever's order {keep}: its committed bar was {'met' if ok else 'not met'}"
    )


def _fig_seed9_widths() -> str:
    sets = load(SEED9)["sets"]
    parts = []
    for s in sets:
        d = s["dense_checks"]["default_vs_keep_on_50"]
        parts.append(f"{d['dense']['width_over_mean']:.1f} against {d['words']['width_over_mean']:.1f}")
    return " and ".join(parts)


def _tune_attempts() -> list[Row]:
    """One row per validation of ``grogu tune``: its rule, the rule's commit and the sample's, and the outcome."""

    def cells(i: int) -> Callable[[], list[str]]:
        def row() -> list[str]:
            attempt, rep = _tune_reports()[i]
            verdict = rep["verdict"]
            pooled = rep["pooled"]["tuned_vs_shipped"]
            lost = [s for s in rep["sets"] if s["tuned_vs_keep"]["losses"] > s["tuned_vs_keep"]["wins"]]
            order = commit_order(attempt["rule_commit"], attempt["sample_commit"])
            return [
                f"seed {attempt['seed']}",
                attempt["incumbent"],
                f"{attempt['rule_commit']}, then {attempt['sample_commit']}: {order}",
                "met"
                if verdict["tuned_never_loses_to_keep"]
                else "not met: "
                + ", ".join(
                    f"{s['data']}/{s['prompt']} {s['tuned_vs_keep']['wins']} / {s['tuned_vs_keep']['losses']}"
                    for s in lost
                ),
                ("met" if verdict["tuned_at_least_shipped_pooled"] else "not met")
                + f" ({pooled['wins']} / {pooled['losses']})",
            ]

        return row

    return [
        Row(f"seed {a['seed']}", (RULES, a["report"]), TUNE_CODE, cells(i), commit=a["sample_commit"])
        for i, a in enumerate(v for v in load(RULES)["validations"] if v.get("tune") and v.get("kind") != "dense")
    ]


SEED9 = f"{R}/tune_validation_seed9/report.json"


def _seed9_rows() -> list[Row]:
    """Seed 9 (tune's current rule), one row per prompt: what tune chose, the tuned setting against the
    better of keep and the default on the judged questions, and each judge's interval on the 50."""

    def cells(i: int) -> Callable[[], list[str]]:
        def row() -> list[str]:
            s = load(SEED9)["sets"][i]
            d = s["dense_checks"]
            arms = s["arms"]
            vs = "; ".join(f"{k}: {x['wins']} / {x['losses']}" for k, x in d["tuned_vs_better"].items())

            def iv(x: dict | None, scale: float, unit: str) -> str:
                if x is None or x["low"] is None:
                    return "–"
                ratio = "–" if x["width_over_mean"] is None else f"{x['width_over_mean']:.1f}"
                return (
                    f"{scale * x['mean']:+.{1 if scale > 1 else 3}f} ({scale * x['low']:+.{1 if scale > 1 else 3}f} … "
                    f"{scale * x['high']:+.{1 if scale > 1 else 3}f}) {unit}, width over mean {ratio}"
                )

            return [
                {"readme": "the README's", "llamaindex": "LlamaIndex's"}[s["prompt"]],
                f"{s['n']} of 100",
                f"{s['tuned']['decision']}: {s['tuned']['setting']}",
                f"{pct(arms['keep']['accuracy'])} / {pct(arms['shipped']['accuracy'])} / {pct(arms['tuned']['accuracy'])}",
                vs + (" (met)" if d["never_loses_to_better"] else " (not met)"),
                iv(d["default_vs_keep_on_50"]["words"], 100, "pts"),
                iv(d["default_vs_keep_on_50"]["dense"], 1, "nats"),
            ]

        return row

    return [
        Row(f"seed 9 {i}", (SEED9,), TUNE_CODE, cells(i), commit="51a8e35") for i in range(len(load(SEED9)["sets"]))
    ]


def _validations() -> list[Row]:
    """One row per validation (:data:`RULES`): where its rule is written, and whether the history shows
    the rule committed before its sample."""

    def cells(v: dict) -> Callable[[], list[str]]:
        def row() -> list[str]:
            outcome = v.get("outcome")
            if v.get("tune"):
                verdict = load(v["report"])["verdict"]
                outcome = "; ".join(f"{k.replace('_', ' ')}: {'met' if ok else 'not met'}" for k, ok in verdict.items())
            order = commit_order(v["rule_commit"], v["sample_commit"])
            return [v["name"], f"`{v['rule']}`", f"{v['rule_commit']}, then {v['sample_commit']}: {order}", outcome]

        return row

    return [
        Row(v["name"], (RULES, *(v.get("records") or [v["report"]])), (), cells(v), commit=v["sample_commit"])
        for v in load(RULES)["validations"]
    ]


def commit_order(rule: str, sample: str) -> str:
    """Whether the history shows the rule committed before the sample it judged."""
    if shallow():
        return "not in this history"
    if rule == sample:
        return "one commit: the history cannot show the rule came first"
    if not git("rev-parse", "--verify", "--quiet", f"{rule}^{{commit}}"):
        return "not in this history"
    ok = subprocess.run(["git", "merge-base", "--is-ancestor", rule, sample], cwd=ROOT, check=False).returncode == 0
    return "rule first" if ok else "the sample came first"


# ---------------------------------------------------------------------------------------------- CONTRIBUTING
SUITE = f"{R}/test_suite"
SUITE_CODE = ("src/", "integrations/", "research/src/", "tests/", "conftest.py", "pyproject.toml")


def _suite_runs(path: str) -> list[tuple[int, int, float]]:
    """(passed, failed, seconds) of each pytest summary line in a test-suite record."""
    out = []
    for line in load(path).splitlines():
        m = re.search(r"(?:(\d+) failed, )?(\d+) passed.* in ([\d.]+)s", line)
        if m and not line.startswith("#"):
            out.append((int(m.group(2)), int(m.group(1) or 0), float(m.group(3))))
    return out


def _fig_suite_quiet() -> str:
    passed, _, secs = _suite_runs(f"{SUITE}/quiet_epyc_d117767.txt")[-1]
    return f"runs {passed} tests on two workers: {secs / 60:.1f} minutes on a quiet machine"


def _fig_suite_loaded() -> str:
    runs = [r for r in _suite_runs(f"{SUITE}/beside_one_cpu_bound_process.txt")][-2:]
    minutes = " and ".join(f"{s / 60:.1f}" for _, _, s in runs)
    return f"{minutes} minutes, {sum(f for _, f, _ in runs)} failed"


def _imports() -> list[Row]:
    rec = f"{R}/import_times/epyc_2core.json"
    notes = {
        "grogu.rerank.remote.client": " (`RemoteScorer`; pydantic for the wire schema)",
        "grogu.runtime.engine.core": " (torch and transformers)",
    }

    def cells(i: int) -> Callable[[], list[str]]:
        def row() -> list[str]:
            r = load(rec)["rows"][i]
            return [f"`{r['module']}`{notes.get(r['module'], '')}", f"{r['median_s']:.2f} s"]

        return row

    return [Row(m, (rec,), ("src/grogu/",), cells(i)) for i, m in enumerate(r["module"] for r in load(rec)["rows"])]


def _fig_first_command() -> str:
    d = load(f"{R}/first_command/epyc_2core.json")
    if d["rc"] != 0:
        return f"it failed (exit {d['rc']})"
    load_ = d["meta"]["settings"].get("machine_load")
    return f"it takes {d['seconds']:.0f} s" + (f" ({load_})" if load_ else "")


# ---------------------------------------------------------------------------------------------- speed and the service
SERVE_CODE = ("src/grogu/apps/serve/", "src/grogu/rerank/remote/")


def _service_memory() -> list[str]:
    now = load(f"{R}/serve_sustained/smollm2_10min_bounded_shapes.json")["sustained"]["replica_rss_mb_start_middle_end"]
    growth, flat = now[2] / now[0] - 1, now[2] / now[1] - 1
    return [
        "service, 1 replica of 1 CPU, SmolLM2, 10 minutes of mixed load",
        f"replica memory +{100 * growth:.1f} % in 10 min, {100 * flat:+.1f} % over its second half; "
        "requests a second and the replica kill: no record",
        "growth ≤ 5 %: " + ("met" if growth <= 0.05 else "not met, bounded"),
        "[service](docs/benchmarks.md#ten-minutes-of-mixed-load-the-replicas-memory-levels-off)",
    ]


def _two_nodes() -> list[str]:
    d = load(f"{R}/serve_cluster/smollm2.json")
    out, ev = d["outcomes"], d["events_s"]
    back = ev["two replicas run again, one per node"] - ev["a new worker node joined"]
    errors = sum(v for k, v in out.items() if "500" in k)
    return [
        f"service, 2 nodes, the worker lost under load (SmolLM2, {d['requests']} requests; proxy local-node preference off)",
        f"{out.get('correct', 0)} answers as in process, {out.get('503 with Retry-After', 0)} 503s whose retry was "
        f"right, {errors} 500s, {d['lost']} lost; replica back {back:.0f} s after a node joined",
        "0 lost, 0 500s: " + ("met" if d["lost"] == 0 and errors == 0 else "not met"),
        "[two nodes](docs/benchmarks.md#two-nodes-one-lost-under-load)",
    ]


def _fuzz() -> list[str]:
    d = load(f"{R}/fuzz_routes/counts_100_wire_schema.json")
    return [
        f"service, every route fuzzed from its schema ({d['examples_per_route']} requests a route)",
        f"{d['requests']:,} requests, {d['server_errors']} server errors, {len(d['failures'])} failures",
        "0 server errors: " + ("met" if d["server_errors"] == 0 else "not met"),
        "[fuzzing](docs/service.md)",
    ]


def _sampled() -> list[str]:
    counter = load(f"{R}/sampled_decode/zen4_counter_draws.json")
    race = load(f"{R}/sampled_decode/zen4_race_draws_same_run.json")
    return [
        f"sampled decoding, {counter['rows']} rows × {counter['tokens']} tokens, SmolLM2, CPU: counter-based draws",
        f"{times(counter['ratio_of_means'])} a greedy call (exponential race, same run: {times(race['ratio_of_means'])})",
        "no CPU regression: met; ≤ 1.3× greedy on a GPU: not run",
        "[sampled decoding](docs/benchmarks.md#sampled-decoding)",
    ]


TABLES = [
    Table(
        "tune-rules",
        (
            "sample",
            "incumbent",
            "rule's commit, then the sample's",
            "tuned never loses to the retriever's order",
            "tuned ≥ default, pooled: W / L",
        ),
        _tune_attempts(),
    ),
    Table("imports", ("module", "import"), _imports()),
    Table(
        "tune-dense",
        (
            "prompt",
            "judged",
            "tune chose",
            "accuracy: keep / default / tuned",
            "tuned against the better of keep and default: W / L",
            "default's gain over keep on the 50: words, 90 %",
            "the same: dense judge, 90 %",
        ),
        _seed9_rows(),
    ),
    Table("validations", ("validation", "its rule", "rule's commit, then the sample's", "outcome"), _validations()),
    Table(
        "cost",
        ("what", "cost", "bar set for it"),
        [
            Row("default", COST + NO_KEPT, LI_CODE, _cost_default),
            Row("langchain", ENTRY_LC, LC_CODE, _cost_langchain, commit="fb33162"),
            Row("always", COST, LI_CODE, _cost_always),
            Row(
                "engine",
                (f"{R}/engine_speed/smollm2_k10_xeon.json", f"{R}/engine_speed/smollm2_k10_epyc_zen4.json"),
                ("src/grogu/runtime/engine/", "src/grogu/metrics/grogu.py"),
                _cost_engine,
            ),
        ],
    ),
    Table(
        "accuracy",
        (
            "entry point",
            "questions: SQuAD, NQ-open, HotpotQA",
            "plain",
            "grogu",
            "wins / losses",
            "p",
            "context changed",
            "committed rule",
        ),
        [
            Row(
                "lc_qa",
                ENTRY_LC,
                LC_CODE,
                _langchain("lc_qa", "LangChain, `qa_prompt` + `as_qa_chain()`", "not met: HotpotQA"),
                commit="fb33162",
            ),
            Row(
                "lc_default",
                ENTRY_LC,
                LC_CODE,
                _langchain("lc_default", "LangChain, without `qa_prompt`", "not met: gain, p, changed > 35 %"),
                commit="fb33162",
            ),
            Row("three prompts", (f"{R}/prompt_gate/held_report.json",), RERANK_CODE, _three_prompts),
            Row("two samples", TUNE_EVAL, ("src/grogu/apps/tune/", *RERANK_CODE), _two_samples),
        ],
    ),
    Table(
        "speed",
        ("benchmark", "result", "bar set for it", "details"),
        [
            Row(
                "memory",
                (f"{R}/serve_sustained/smollm2_10min_bounded_shapes.json",),
                (*SERVE_CODE, "src/grogu/runtime/engine/"),
                _service_memory,
            ),
            Row(
                "two nodes",
                (f"{R}/serve_cluster/smollm2.json",),
                (*SERVE_CODE, "research/src/grogu_research/cluster.py"),
                _two_nodes,
            ),
            Row("fuzz", (f"{R}/fuzz_routes/counts_100_wire_schema.json",), SERVE_CODE, _fuzz),
            Row(
                "sampled",
                (f"{R}/sampled_decode/zen4_counter_draws.json", f"{R}/sampled_decode/zen4_race_draws_same_run.json"),
                ("src/grogu/runtime/engine/sampling.py", "src/grogu/runtime/engine/decode.py"),
                _sampled,
            ),
        ],
    ),
    Table(
        "gpu",
        ("benchmark", "result", "bar set for it"),
        [
            Row(
                "whole query",
                (
                    f"{GPU}/latency_float32_summary.json",
                    f"{GPU}/latency_bfloat16_summary.json",
                    f"{GPU}/log_last_call.txt",
                ),
                PIPELINE_CODE,
                _gpu_query,
                commit="43d0617",
            ),
            Row("tune", (f"{GPU}/log_last_call.txt",), (*PIPELINE_CODE, "src/grogu/apps/tune/"), _gpu_tune, "43d0617"),
            Row("step", (f"{GPU}/engine_speed_qwen2.5-7b.json",), GPU_CODE, _gpu_step, commit="43d0617"),
        ],
    ),
]


# ---------------------------------------------------------------------------------------------- the check
def marked(lines: list[str]) -> list[tuple[str, int, int]]:
    """(table name, first line, line after) of each marked table in ``lines``."""
    out = []
    for i, line in enumerate(lines):
        m = MARK.search(re.sub(r"`[^`]*`", "", line))
        if not m:
            continue
        start = i + 1
        while start < len(lines) and not lines[start].startswith("|"):
            start += 1
        end = start
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        out.append((m.group(1), start, end))
    return out


def unmarked_figures(lines: list[str]) -> list[str]:
    """Rows of results tables (a column named result, cost, grogu or p) that hold a digit outside a marked
    table and outside the sections a ``source`` marker covers."""
    inside = {i for _, s, e in marked(lines) for i in range(s, e)} | sourced_lines(lines)
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("|") and i not in inside:
            header = [c.strip().lower() for c in lines[i].strip("|").split("|")]
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            if {"result", "cost", "grogu", "p"} & set(header):
                out += [lines[k] for k in range(i + 2, j) if re.search(r"\d", lines[k])]
            i = j
        else:
            i += 1
    return out


# ---------------------------------------------------------------------------------------------- figures in prose
@dataclass
class Figure:
    """One figure in prose, between ``<!-- fig: NAME -->`` and ``<!-- /fig -->``: ``text()`` from
    ``records``. Where the code it measures changed since, the figure says so after its text."""

    records: tuple[str, ...]
    measures: tuple[str, ...]
    text: Callable[[], str]
    commit: str | None = None

    def render(self) -> str:
        code = provenance(self.records, self.measures, self.commit)
        if code.endswith(", older code"):
            return f"{self.text()} (older code: {code.split(',')[0]})"
        return self.text()


@dataclass
class Source:
    """The records behind a section's figures, stated in the section itself on a line of its own:

    ``<!-- source: RECORD ...; measures: PATH ...; commit: ABC1234 -->`` or ``<!-- source: none; why: TEXT -->``

    ``RECORD``: committed files under ``benchmarks/results/`` (from the repository's root). ``measures``:
    the source paths whose code the figures describe. ``commit``: the code measured, where the records'
    ``meta`` or the commit that added the first does not say it. The line after the marker is rendered:
    the records, linked, and the code they measured; or "no record" and why.
    """

    records: tuple[str, ...] = ()
    measures: tuple[str, ...] = ()
    commit: str | None = None
    why: str = ""

    @classmethod
    def parse(cls, spec: str) -> "Source":
        parts = [p.strip() for p in spec.split(";")]
        records = () if parts[0] in ("", "none") else tuple(parts[0].split())
        fields = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
        unknown = set(fields) - {"measures", "commit", "why"}
        if unknown or len(fields) != len(parts) - 1:
            raise ValueError(f"a source marker takes records, then measures:, commit: or why:; got {spec!r}")
        return cls(
            records,
            tuple(fields.get("measures", "").split()),
            fields.get("commit", "").strip() or None,
            fields.get("why", "").strip(),
        )

    def render(self, doc: str) -> str:
        if not self.records:
            return f"*No record: {self.why or 'the figures in this section were not kept'}. They cannot be checked.*"
        here = (ROOT / doc).parent
        links = ", ".join(f"[{Path(p).name}]({os.path.relpath(ROOT / p, here)})" for p in self.records)
        codes = list(dict.fromkeys(provenance((r,), self.measures, self.commit) for r in self.records))
        older = any(c.endswith(", older code") for c in codes)
        code = ", ".join(dict.fromkeys(c.removesuffix(", older code") for c in codes))
        if older:
            code += "; the code measured has changed since, so a new run is due"
        return f"*Records: {links}. Code measured: {code}.*"


FIG = re.compile(r"<!-- fig: ([\w-]+) -->(.*?)<!-- /fig -->")
SOURCE = re.compile(r"^<!-- source: (.*?) -->$")
HEADING = re.compile(r"^(#{1,6}) ")
_UNIT = r"(?:×|%|\s?(?:ms|s|min|minutes|seconds|hours|GiB|MiB|GB|MB|pts|points)\b)"
#: a figure in prose: a number with a unit, a p-value, or counts such as "23 / 10"
FIGURE = re.compile(rf"(?<![\w.])\d[\d,]*(?:\.\d+)?{_UNIT}|\bp\s?[=<≤]\s?0?\.\d+|(?<![\w/.])\d+ / \d+(?![\w/])")


def outside_code(lines: list[str]) -> list[tuple[int, str]]:
    """(index, line) of the lines outside fenced code blocks."""
    out, in_code = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code:
            out.append((i, line))
    return out


def sourced_lines(lines: list[str]) -> set[int]:
    """The lines a ``source`` marker covers: the rest of its heading's section, subsections included."""
    heads = [(i, len(m.group(1))) for i, line in outside_code(lines) if (m := HEADING.match(line))]
    out: set[int] = set()
    for i, line in enumerate(lines):
        if not SOURCE.match(line):
            continue
        above = [h for h in heads if h[0] < i]
        level = above[-1][1] if above else 0
        end = next((j for j, lv in heads if j > i and lv <= level), len(lines))
        out.update(range(i, end))
    return out


def prose_figures(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, figure) of each figure outside a marker: outside code blocks, inline code, link
    targets, marked tables, ``fig`` markers and the sections a ``source`` marker covers."""
    skip = {i for _, s, e in marked(lines) for i in range(s, e)} | sourced_lines(lines)
    out, in_code = [], False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or i in skip or HEADING.match(line):
            continue
        text = FIG.sub("", line)
        text = re.sub(r"<!--.*?-->|`[^`]*`|\]\([^)]*\)", " ", text)
        out += [(i + 1, m.group(0)) for m in FIGURE.finditer(text) if not _allowed(m.group(0), text)]
    return out


def _allowed(figure: str, line: str) -> bool:
    """Whether ``figure`` is part of a constant of :data:`CONSTANTS` in ``line``."""
    return any(figure in m.group(0) for c in CONSTANTS for m in re.finditer(c, line))


#: figures that are constants, not measurements (limits, sizes, settings): a regex each, matched in the line
CONSTANTS = (
    r"\b50[03]s\b",  # HTTP status codes in the plural
    r"\b24 GiB\b",  # the development machine's memory
    r"3, 5 and 10 points",  # the gains tune states the questions needed for (grogu.apps.tune.gain.GAINS)
    r"takes over about 5 s",  # CONTRIBUTING: when a test is marked slow
    r"CI stays under\s*$|^20 minutes on a first-generation EPYC",  # the CI budget
)
#: the figures in prose (``<!-- fig: NAME -->``)
FIGURES: dict[str, Figure] = {
    "tune-runs": Figure((RULES,), TUNE_CODE, _fig_tune_runs, commit="4503167"),
    "tune-first-rule": Figure((RULES,), TUNE_CODE, _fig_first_rule, commit="ae75b3c"),
    "tune-second-rule": Figure((RULES,), TUNE_CODE, _fig_second_rule, commit="4503167"),
    "tune-seed9": Figure((f"{R}/tune_validation_seed9/report.json",), TUNE_CODE, _fig_seed9, commit="51a8e35"),
    "tune-seed9-widths": Figure(
        (f"{R}/tune_validation_seed9/report.json",), TUNE_CODE, _fig_seed9_widths, commit="51a8e35"
    ),
    "tune-both": Figure(TUNE_EVAL, TUNE_CODE, _fig_both_samples, commit="4503167"),
    "readme-prompt-lost": Figure((f"{R}/prompt_gate/held_report.json",), RERANK_CODE, _fig_readme_prompt_lost),
    "readme-prompt-tune": Figure(TUNE_EVAL, RERANK_CODE, _fig_readme_prompt_tune, commit="4503167"),
    "suite-quiet": Figure((f"{SUITE}/quiet_epyc_d117767.txt",), SUITE_CODE, _fig_suite_quiet, commit="d117767"),
    "suite-loaded": Figure(
        (f"{SUITE}/beside_one_cpu_bound_process.txt",), SUITE_CODE, _fig_suite_loaded, commit="d117767"
    ),
    "first-command": Figure(
        (f"{R}/first_command/epyc_2core.json",),
        (
            "pyproject.toml",
            *(f"integrations/{p}/pyproject.toml" for p in ("langchain-grogu", "llama-index-postprocessor-grogu")),
        ),
        _fig_first_command,
    ),
    "gpu-exact": Figure((f"{GPU}/decode_check.json",), GPU_CODE, _fig_gpu_exact, commit="43d0617"),
}


def _unknown_commits(rendered: list[str]) -> bool:
    return any("(not in this history)" in line for line in rendered)


def _without_code(line: str) -> str:
    """A table line without its last cell (the "code" column)."""
    return line.rstrip().rstrip("|").rsplit("|", 1)[0]


def check_file(name: str, write: bool) -> list[str]:
    """What in file ``name`` differs from its records (rewritten in place with ``write``)."""
    tables = {t.name: t for t in TABLES}
    path = ROOT / name
    lines = path.read_text().splitlines()
    problems: list[str] = []
    for table, start, end in reversed(marked(lines)):
        if table not in tables:
            problems.append(f"{name}: no table named {table!r} in benchmarks/claims.py")
            continue
        rendered = tables[table].render()
        if not write and _unknown_commits(rendered):
            # a clone without the measured commits (shallow): the figures are checked, the code column not
            text = lines[start:end]
            rendered = [a if _without_code(a) == _without_code(b) else b for a, b in zip(text, rendered)]
            rendered += tables[table].render()[len(text) :]
        if lines[start:end] != rendered:
            if write:
                lines[start:end] = rendered
            else:
                problems.append(f"{name}: table {table} differs from its records:")
                problems += [f"  - {a}" for a in lines[start:end] if a not in rendered]
                problems += [f"  + {b}" for b in rendered if b not in lines[start:end]]
    for i, line in enumerate(lines):
        for m in FIG.finditer(line):
            if m.group(1) not in FIGURES:
                problems.append(f"{name}:{i + 1}: no figure named {m.group(1)!r} in benchmarks/claims.py")
                continue
            want = FIGURES[m.group(1)].render()
            if m.group(2) != want and not (shallow() and not write):
                if write:
                    line = lines[i] = line.replace(m.group(0), f"<!-- fig: {m.group(1)} -->{want}<!-- /fig -->")
                else:
                    problems.append(f"{name}:{i + 1}: figure {m.group(1)} says {m.group(2)!r}, its record {want!r}")
        s = SOURCE.match(line)
        if s:
            try:
                source = Source.parse(s.group(1))
            except ValueError as e:
                problems.append(f"{name}:{i + 1}: {e}")
                continue
            problems += [f"{name}:{i + 1}: record missing: {p}" for p in source.records if not (ROOT / p).exists()]
            want = source.render(name)
            has = lines[i + 1] if i + 1 < len(lines) else ""
            same = has == want or (
                shallow() and not write and has.split(" Code measured")[0] == want.split(" Code measured")[0]
            )
            if not same:
                if write:
                    if has.startswith(("*Records: ", "*No record: ")):
                        lines[i + 1] = want
                    else:
                        lines.insert(i + 1, want)
                else:
                    problems.append(f"{name}:{i + 1}: the line after the source marker is not {want!r}")
    problems += [f"{name}: a figure outside a marked table: {row}" for row in unmarked_figures(lines)]
    problems += [f"{name}:{n}: a figure outside a marker: {fig!r}" for n, fig in prose_figures(lines)]
    if write:
        path.write_text("\n".join(lines) + "\n")
    return problems


def run(write: bool, files: tuple[str, ...] | None = None) -> int:
    problems: list[str] = []
    for t in TABLES:
        problems += [f"table {t.name}: record missing: {p}" for p in t.missing()]
    for n, f in FIGURES.items():
        problems += [f"figure {n}: record missing: {p}" for p in f.records if not (ROOT / p).exists()]
    if problems:
        print("\n".join(problems))
        return 1
    for name in files or FILES:
        problems += check_file(name, write)
    if problems:
        print("\n".join(problems))
        return 1
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the marked tables in place")
    sys.exit(run(ap.parse_args().write))


if __name__ == "__main__":
    main()
