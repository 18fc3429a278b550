"""Shared pieces of the evaluation harness: answer checks, statistics, data, scoring, outputs.

Answer strings are compared after SQuAD's normalisation (lower case, no punctuation, no articles
a/an/the, single spaces). A model's answer is *correct* when it contains a gold answer string as whole
words (so exact match counts too; punctuation is dropped or read as a space, so "Six-time" holds
"Six"). A paragraph *holds an answer* when a gold answer string occurs in it, normalised or raw
(case-insensitive), even inside a longer word: the strict test used to pick distractors that cannot
answer the question.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import string
import sys
import time
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

from ..testing import shared_data_path

DEFAULT_MODEL = "smollm2-135m-instruct"
GROGU_METRICS = ("ppl", "key_ppl", "entropy", "key_entropy")
METRIC_LABELS = {"ppl": "PPL", "key_ppl": "KeyPPL", "entropy": "Entropy", "key_entropy": "KeyEntropy",
                 "bm25": "BM25 (relevance)", "minilm": "MiniLM (relevance)"}


# ---------------------------------------------------------------- answers
def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, drop punctuation and articles, squash spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def normalize_spaced(text: str) -> str:
    """:func:`normalize_answer` with punctuation turned into spaces ('Six-time' -> 'six time')."""
    text = "".join(" " if ch in string.punctuation else ch for ch in text.lower())
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def is_correct(answer: str, golds: Iterable[str]) -> bool:
    """True when the normalised answer contains a normalised gold answer as whole words (with
    punctuation dropped as in SQuAD, or turned into spaces, so 'Six-time winner' holds 'Six')."""
    golds = list(golds)
    for norm in (normalize_answer, normalize_spaced):
        out = f" {norm(answer)} "
        if any(g and f" {g} " in out for g in (norm(x) for x in golds)):
            return True
    return False


def holds_answer(text: str, golds: Iterable[str]) -> bool:
    """True when a gold answer string occurs in ``text`` (normalised or raw, case-insensitive,
    substrings of words included): the strict test for "contains no answer string"."""
    norm, low = normalize_answer(text), text.lower()
    for g in golds:
        ng = normalize_answer(g)
        if (ng and ng in norm) or (g.strip() and g.strip().lower() in low):
            return True
    return False


def answer_tokens(text: str) -> list[str]:
    return normalize_answer(text).split()


def exact_match(answer: str, golds: Iterable[str]) -> float:
    """1.0 when the normalised answer equals a normalised gold answer."""
    a = normalize_answer(answer)
    return float(any(a == normalize_answer(g) for g in golds))


def token_f1(answer: str, gold: str) -> float:
    """SQuAD token-F1 of two strings (normalised tokens; 1.0 when both are empty)."""
    a, g = answer_tokens(answer), answer_tokens(gold)
    if not a or not g:
        return float(a == g)
    common = sum((Counter(a) & Counter(g)).values())
    if common == 0:
        return 0.0
    p, r = common / len(a), common / len(g)
    return 2 * p * r / (p + r)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(answer: str, gold: str) -> float:
    """ROUGE-L F-measure (beta = 1) of two strings on normalised tokens (1.0 when both are empty)."""
    a, g = answer_tokens(answer), answer_tokens(gold)
    if not a or not g:
        return float(a == g)
    lcs = _lcs(a, g)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(g)
    return 2 * p * r / (p + r)


def best_over(fn: Callable[[str, str], float], answer: str, golds: Sequence[str]) -> float:
    """The best value of ``fn(answer, gold)`` over the gold answers."""
    return max((fn(answer, g) for g in golds), default=0.0)


# ---------------------------------------------------------------- statistics
def win_counts(a: Sequence[float], b: Sequence[float]) -> dict:
    """How often a[i] > b[i] (wins), == (ties), < (losses); rate = (wins + ties / 2) / n."""
    wins = sum(x > y for x, y in zip(a, b))
    ties = sum(x == y for x, y in zip(a, b))
    n = len(a)
    return {"wins": wins, "ties": ties, "losses": n - wins - ties, "n": n,
            "rate": (wins + 0.5 * ties) / n if n else float("nan")}


def proportion_ci(rate: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) confidence interval of a proportion ``rate`` of ``n`` (rate * n is
    rounded to whole successes; a tie counted as half a win rounds to even)."""
    from scipy.stats import binomtest

    if not n:
        return float("nan"), float("nan")
    ci = binomtest(int(round(rate * n)), n).proportion_ci(confidence_level=level)
    return float(ci.low), float(ci.high)


def sign_test(x: Sequence[bool], y: Sequence[bool]) -> dict:
    """Exact two-sided sign test of paired successes: n10 = x only, n01 = y only;
    p = binomtest(n10, n10 + n01, 0.5); 1.0 when the two never disagree."""
    from scipy.stats import binomtest

    n10 = sum(bool(a) and not bool(b) for a, b in zip(x, y))
    n01 = sum(bool(b) and not bool(a) for a, b in zip(x, y))
    p = binomtest(n10, n10 + n01, 0.5).pvalue if n10 + n01 else 1.0
    return {"n10": n10, "n01": n01, "p": float(p)}


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def kendall_tau(preference: Sequence[float], outcome: Sequence[float]) -> dict:
    """tau = (C - D) / (C + D) over pairs: C when sign(preference) == sign(outcome) != 0, D when they
    are opposite and both non-zero; pairs with a zero on either side count in neither. NaN when C + D = 0."""
    c = d = 0
    for p, o in zip(preference, outcome):
        s = _sign(p) * _sign(o)
        c += s > 0
        d += s < 0
    return {"C": c, "D": d, "tau": (c - d) / (c + d) if c + d else float("nan")}


def binary_scores(predicted: Sequence[bool], actual: Sequence[bool]) -> dict:
    """Accuracy and F1 (positive class = True) of binary predictions."""
    tp = sum(p and a for p, a in zip(predicted, actual))
    fp = sum(p and not a for p, a in zip(predicted, actual))
    fn = sum(a and not p for p, a in zip(predicted, actual))
    n = len(actual)
    acc = sum(bool(p) == bool(a) for p, a in zip(predicted, actual)) / n if n else float("nan")
    f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
    return {"accuracy": acc, "f1": f1, "tp": tp, "fp": fp, "fn": fn, "n": n}


def pearson(x: Sequence[float], y: Sequence[float]) -> dict:
    """Pearson r with its two-sided p-value; NaN when either side is constant."""
    from scipy.stats import pearsonr

    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return {"r": float("nan"), "p": float("nan"), "n": len(x)}
    res = pearsonr(x, y)
    return {"r": float(res.statistic), "p": float(res.pvalue), "n": len(x)}


# ---------------------------------------------------------------- data
def squad_data() -> tuple[list[dict], list[dict]]:
    """SQuAD v1.1 dev as (paragraphs, questions). paragraphs[i] = {'id', 'title', 'text'} (all 2,067,
    file order); questions = {'id', 'question', 'answers', 'gold'} with ``gold`` a paragraph id."""
    with open(shared_data_path("squad-v1.1-dev", "dev-v1.1.json"), encoding="utf-8") as f:
        data = json.load(f)["data"]
    paragraphs, questions = [], []
    for article in data:
        for p in article["paragraphs"]:
            pid = len(paragraphs)
            paragraphs.append({"id": pid, "title": article["title"].replace("_", " "), "text": p["context"]})
            for qa in p["qas"]:
                answers = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                questions.append({"id": qa["id"], "question": qa["question"], "answers": answers, "gold": pid})
    return paragraphs, questions


def sample(items: Sequence[Any], limit: int | None, seed: int) -> list[Any]:
    """``limit`` items drawn at random (seeded), or all of them in order when limit is None."""
    if limit is None or limit >= len(items):
        return list(items)
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    return random.Random(seed).sample(list(items), limit)


def squad_questions(limit: int | None, seed: int) -> tuple[list[dict], list[dict]]:
    """(all paragraphs, ``limit`` questions sampled with ``seed``)."""
    paragraphs, questions = squad_data()
    return paragraphs, sample(questions, limit, seed)


def random_paragraph(rng: random.Random, paragraphs: Sequence[dict], exclude: set[int],
                     answers: Sequence[str]) -> int:
    """A random paragraph id outside ``exclude`` that holds no answer string."""
    while True:
        pid = rng.randrange(len(paragraphs))
        if pid not in exclude and not holds_answer(paragraphs[pid]["text"], answers):
            return pid


# ---------------------------------------------------------------- models and scoring
def model_list(model: Any) -> list[Any]:
    """One model spec or a list of them (a (model, tokenizer) pair is one spec)."""
    if isinstance(model, list):
        if not model:
            raise ValueError("give at least one model")
        return model
    return [model]


def one_model(model: Any, experiment: str) -> Any:
    models = model_list(model)
    if len(models) != 1:
        raise ValueError(f"the {experiment} experiment takes one model (only 'layout' compares two)")
    return models[0]


def build_scorer(model: Any, max_new_tokens: int, device: str | None, dtype: str | None):
    """A UtilityScorer (KeyEntropy; every result also carries all four variants)."""
    from ..scorer import UtilityScorer

    return UtilityScorer(model, max_new_tokens=max_new_tokens, device=device, dtype=dtype)


def score_contexts(scorer: Any, jobs: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
    """GROGU of (query, ordered documents) contexts of *many* queries in one batched engine pass."""
    return [got for (got,) in scorer.score_contexts_batch([(q, [docs]) for q, docs in jobs])]


def set_threads(threads: int | None) -> None:
    if threads:
        import torch

        torch.set_num_threads(threads)


def progress(total: int, desc: str, unit: str = "q"):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)


def chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    size = max(1, int(size))
    for start in range(0, len(items), size):
        yield items[start:start + size]


# ---------------------------------------------------------------- outputs
def clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, tuples -> lists, numpy scalars -> Python numbers."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            pass
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fmt(value: Any, digits: int = 3, pct: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if pct:
        return f"{100 * value:.1f}"
    return f"{value:.{digits}f}"


def fmt_p(p: Any) -> str:
    if p is None or (isinstance(p, float) and not math.isfinite(p)):
        return "n/a"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.1e}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def model_names(scorers_or_engines: Sequence[Any]) -> list[str]:
    out = []
    for s in scorers_or_engines:
        engine = getattr(s, "engine", s)
        out.append(str(getattr(engine, "model_name", type(engine).__name__)))
    return out


def header(result: dict, title: str) -> str:
    cfg = result["config"]
    lines = [f"### {title}", "",
             f"- model: {', '.join(result['models'])}; N = {result['n']} {result.get('unit', 'items')}",
             f"- wall time: {result['wall_s']:.0f} s"]
    if cfg.get("command"):
        lines.append(f"- command: `{cfg['command']}`")
    shown = {k: v for k, v in cfg.items() if k not in ("command", "model")}
    lines.append("- settings: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
    return "\n".join(lines) + "\n"


def finish(result: dict, out_dir: str | None, write: bool, markdown: str, plot: Callable[[dict, str], None]) -> dict:
    """Add the Markdown table to the result and write <name>.json / .md / .png to out_dir."""
    result["markdown"] = markdown
    if not write:
        return result
    out = out_dir or os.path.join("runs", "eval", result["experiment"])
    os.makedirs(out, exist_ok=True)
    name = result["experiment"]
    files = {"json": os.path.join(out, f"{name}.json"), "md": os.path.join(out, f"{name}.md"),
             "png": os.path.join(out, f"{name}.png")}
    result["files"] = files
    with open(files["md"], "w", encoding="utf-8") as f:
        f.write(markdown.rstrip() + "\n")
    import matplotlib

    matplotlib.use("Agg")
    plot(result, files["png"])
    with open(files["json"], "w", encoding="utf-8") as f:
        json.dump(clean(result), f, ensure_ascii=False, indent=1)
    return result


class Clock:
    """Wall time since construction, in seconds."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        return time.perf_counter() - self.start


def bar_plot(path: str, groups: dict[str, dict[str, float]], title: str, ylabel: str,
             ylim: tuple[float, float] | None = (0, 1), hline: float | None = None) -> None:
    """Grouped bar chart: groups = {group: {bar: value}} (NaN bars are left empty)."""
    import matplotlib.pyplot as plt

    bars = list(dict.fromkeys(b for g in groups.values() for b in g))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(bars) * max(1, len(groups)) / 2 + 2), 4))
    width = 0.8 / max(1, len(groups))
    for gi, (gname, values) in enumerate(groups.items()):
        xs = [i + gi * width - 0.4 + width / 2 for i in range(len(bars))]
        ys = [values.get(b, float("nan")) for b in bars]
        ys = [y if y is not None and math.isfinite(y) else 0.0 for y in ys]
        ax.bar(xs, ys, width, label=gname)
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([METRIC_LABELS.get(b, b) for b in bars], rotation=20, ha="right")
    if ylim:
        ax.set_ylim(*ylim)
    if hline is not None:
        ax.axhline(hline, color="grey", lw=0.8, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    if len(groups) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
