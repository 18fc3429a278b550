"""Utility variants for small, copy-prone LLMs (issue #8): collect, tune, report.

The protocol is the evaluation harness's (``grogu_research.experiments``: ``winrate`` = GROGU paper Table 1,
``noise`` = §4.2) reused through its public pieces (items, retrievers, relevance, answer checks,
statistics); what this script adds is (1) a tuning / held-out split of SQuAD v1.1 dev **by article**
and (2) per-token statistics saved for every scored context, so every metric variant, and every
setting tried while tuning, comes from the same generation pass.

Split (seeded, ``--seed`` 0): the 48 dev articles are shuffled; the first third (16 articles) is the
*tuning* pool, the other 32 the *held-out* pool. Questions are sampled from each pool with the same
seed. Tuning only ever reads tuning-pool records; the report only held-out ones.

  # 1. one scoring pass per (model, answer style, experiment, split); resumable (JSONL, one line a question)
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment winrate --split tune --n 150
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment winrate --split heldout --n 300
  OMP_NUM_THREADS=1 python benchmarks/small_model_variants.py collect --experiment noise --split heldout --n 100
  #    add --style short for the short-answer scoring pass, --model PATH.gguf for another model
  # 2. the variants' settings on the tuning records (win-rates for each grid point)
  python benchmarks/small_model_variants.py tune --runs runs/small_models
  # 3. the table on the held-out records (markdown to stdout, JSON next to the records)
  python benchmarks/small_model_variants.py report --runs runs/small_models
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import sys
import time
import warnings
from typing import Any, Callable, Sequence

import torch
from grogu_research.experiments import common, winrate
from grogu_research.experiments import noise as noise_experiment
from grogu_research.experiments.negatives import hard_negatives, make_retriever

from grogu import metrics as grogu_metrics

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta, write_sidecar  # noqa: E402

OUT = "runs/small_models"
RELEVANCE = ("bm25", "minilm")


# ---------------------------------------------------------------- split
def split_pools(seed: int = 0) -> tuple[list[dict], dict[str, list[dict]]]:
    """(paragraphs, {'tune': questions, 'heldout': questions}): SQuAD dev split by article (a third
    of the articles, shuffled with ``seed``, for tuning)."""
    paragraphs, questions = common.squad_data()
    titles = sorted({p["title"] for p in paragraphs})
    random.Random(seed).shuffle(titles)
    tune_titles = set(titles[: len(titles) // 3])
    pools: dict[str, list[dict]] = {"tune": [], "heldout": []}
    for q in questions:
        pools["tune" if paragraphs[q["gold"]]["title"] in tune_titles else "heldout"].append(q)
    return paragraphs, pools


def winrate_items(questions: Sequence[dict], paragraphs: list[dict], ret: Any, seed: int) -> list[dict]:
    """As ``grogu_research.experiments.winrate.build_items``, for given questions."""
    texts = [p["text"] for p in paragraphs]
    items = []
    for q in questions:
        exclude = {q["gold"]}
        distractor = hard_negatives(ret.scores(q["question"]), texts, q["answers"], exclude, 1)[0]
        rnd = common.random_paragraph(
            random.Random(f"{seed}-{q['id']}"), paragraphs, exclude | {distractor}, q["answers"]
        )
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "answers": q["answers"],
                "paragraph_ids": {"gold": q["gold"], "distractor": distractor, "random": rnd},
                "texts": {"gold": texts[q["gold"]], "distractor": texts[distractor], "random": texts[rnd]},
            }
        )
    return items


def noise_items(questions: Sequence[dict], paragraphs: list[dict], ret: Any, seed: int) -> list[dict]:
    """As ``grogu_research.experiments.noise.build_items``, for given questions."""
    texts = [p["text"] for p in paragraphs]
    items = []
    for q in questions:
        rng = random.Random(f"{seed}-{q['id']}")
        retrieved = hard_negatives(
            ret.scores(q["question"]), texts, q["answers"], {q["gold"]}, noise_experiment.N_NOISE
        )
        rnd: list[int] = []
        while len(rnd) < noise_experiment.N_NOISE:
            rnd.append(common.random_paragraph(rng, paragraphs, {q["gold"], *rnd}, q["answers"]))
        pos = rng.randrange(noise_experiment.N_NOISE + 1)
        ids = {
            name: noise[:pos] + [q["gold"]] + noise[pos:] for name, noise in (("random", rnd), ("retrieved", retrieved))
        }
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "answers": q["answers"],
                "gold_position": pos,
                "paragraph_ids": ids,
            }
        )
    return items


# ---------------------------------------------------------------- collect
def _r(t: torch.Tensor) -> list[float]:
    return [round(float(x), 6) for x in t]


def collect(args: argparse.Namespace) -> None:
    from grogu import UtilityScorer
    from grogu.core.prompts import Document, TruncationWarning

    warnings.filterwarnings("ignore", category=TruncationWarning)
    torch.set_num_threads(args.threads)
    paragraphs, pools = split_pools(args.seed)
    questions = common.sample(pools[args.split], args.n, args.seed)
    texts = [p["text"] for p in paragraphs]
    tag = args.tag or os.path.splitext(os.path.basename(args.model))[0]
    path = os.path.join(args.out, f"{tag}.{args.style}.{args.experiment}.{args.split}.jsonl")
    os.makedirs(args.out, exist_ok=True)
    done = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            done = {json.loads(line)["id"] for line in f if line.strip()}
    todo = [q for q in questions if q["id"] not in done]
    print(f"{path}: {len(done)} done, {len(todo)} to go", file=sys.stderr)
    if not todo:
        return
    clock = time.perf_counter()
    ret = make_retriever("bm25", texts)
    if args.experiment == "winrate":
        items = winrate_items(todo, paragraphs, ret, args.seed)
        winrate.relevance(items, ret, None)
        contexts = winrate.DOCS
    else:
        items = noise_items(todo, paragraphs, ret, args.seed)
        noise_experiment.relevance(items, ret, texts, None)
        contexts = noise_experiment.CONTEXTS
    scorer = UtilityScorer(args.model, max_new_tokens=args.max_new_tokens, answer_style=args.style, device="cpu")
    print(f"setup {time.perf_counter() - clock:.0f} s; scoring with {scorer.model_name}", file=sys.stderr)
    bar = common.progress(len(items), f"{args.experiment}/{args.split}/{args.style}")
    write_sidecar(path, args.meta_settings)  # it appends (a run resumes): its meta as the collection starts
    with open(path, "a", encoding="utf-8") as out:
        for chunk in common.chunks(items, args.batch):
            jobs = []
            for it in chunk:
                for c in contexts:
                    ids = it["paragraph_ids"][c]
                    docs = [Document(texts[p]) for p in (ids if isinstance(ids, list) else [ids])]
                    jobs.append((it["question"], docs))
            started = time.perf_counter()
            results = iter(common.score_contexts(scorer, jobs, return_details=True))
            spent = time.perf_counter() - started
            for it in chunk:
                rec = {
                    "id": it["id"],
                    "question": it["question"],
                    "answers": it["answers"],
                    "paragraph_ids": it["paragraph_ids"],
                    "model": scorer.model_name,
                    "style": args.style,
                    "max_new_tokens": scorer.max_new_tokens,
                    "contexts": {},
                    "seconds": spent / len(chunk),
                }
                u_ids = scorer.prompts.ungrounded_ids(it["question"])
                for c in contexts:
                    r = next(results)
                    d = r.details
                    ids = it["paragraph_ids"][c]
                    docs = [Document(texts[p]) for p in (ids if isinstance(ids, list) else [ids])]
                    g_ids = scorer.prompts.grounded_ids(it["question"], docs)
                    rec["contexts"][c] = {
                        "answer": r.answer,
                        "correct": common.is_correct(r.answer, it["answers"]),
                        "finished": r.answer_finished,
                        "n_tokens": r.n_tokens,
                        "relevance": {m: it["utility"][c][m] for m in RELEVANCE},
                        "variants": r.variants,
                        "token_ids": d.token_ids,
                        "h_g": _r(d.grounded_entropy),
                        "logp_g": _r(d.grounded_logprob),
                        "h_u": _r(d.ungrounded_entropy),
                        "logp_u": _r(d.ungrounded_logprob),
                        "grounded_ids": g_ids,
                        "ungrounded_ids": u_ids,
                    }
                out.write(json.dumps(rec) + "\n")
            out.flush()
            bar.update(len(chunk))
    bar.close()
    print(f"wall {time.perf_counter() - clock:.0f} s", file=sys.stderr)


# ---------------------------------------------------------------- analysis helpers
def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def stats_of(ctx: dict, ngram: int = grogu_metrics.COPY_NGRAM) -> grogu_metrics.AnswerStats:
    copied = grogu_metrics.copied_mask(ctx["token_ids"], ctx["grounded_ids"], ctx["ungrounded_ids"], ngram)
    return grogu_metrics.AnswerStats(
        torch.tensor(ctx["h_g"], dtype=torch.float64),
        torch.tensor(ctx["logp_g"], dtype=torch.float64),
        torch.tensor(ctx["h_u"], dtype=torch.float64),
        torch.tensor(ctx["logp_u"], dtype=torch.float64),
        copied,
    )


def _gain(s: grogu_metrics.AnswerStats, mask, weights=None) -> float:
    return -grogu_metrics.entropy_change(s.h_g, s.h_u, mask, weights)


def _ke(s: grogu_metrics.AnswerStats, mask, weights=None) -> float:
    w = mask.to(torch.float64) if weights is None else weights * mask
    if float(w.sum()) <= 0:
        w = mask.to(torch.float64)
    return -grogu_metrics.weighted_mean(s.h_g, w)


#: tuning grid: family -> {setting label: (copy n-gram, utility function of AnswerStats)}
def tuning_grid() -> dict[str, dict[str, tuple[int, Callable[[grogu_metrics.AnswerStats], float]]]]:
    alphas, quantiles, rhos, ngrams = (
        (0.05, 0.1, 0.25, 0.5, 1.0),
        (0.5, 0.6, 0.7, 0.8, 0.9),
        (0.1, 0.25, 0.5),
        (3, 4, 5),
    )
    key = lambda s, a: grogu_metrics.key_token_mask(s.h_g, s.h_u, a)  # noqa: E731
    qk = lambda s, q: grogu_metrics.quantile_key_mask(s.h_g, s.h_u, q)  # noqa: E731
    sup = lambda s: grogu_metrics.copy_support_weights(s.copied, s.logp_u)  # noqa: E731
    g: dict[str, dict] = {
        "key_entropy (paper; alpha)": {f"alpha={a}": (3, lambda s, a=a: _ke(s, key(s, a))) for a in alphas},
        "key_entropy_adaptive (quantile)": {f"q={q}": (3, lambda s, q=q: _ke(s, qk(s, q))) for q in quantiles},
        "key_entropy_relative (rho * H_u)": {
            f"rho={r}": (3, lambda s, r=r: _ke(s, grogu_metrics.relative_key_mask(s.h_g, s.h_u, r))) for r in rhos
        },
        "entropy_change (alpha)": {f"alpha={a}": (3, lambda s, a=a: _gain(s, key(s, a))) for a in alphas},
        "adaptive_entropy_change (quantile)": {f"q={q}": (3, lambda s, q=q: _gain(s, qk(s, q))) for q in quantiles},
        "copy_aware_key_entropy (mask, n)": {},
        "copy_aware_entropy_change (mask, n)": {},
        "pmi: mean(logp_g - logp_u)": {"-": (3, lambda s: float((s.logp_g - s.logp_u).mean()))},
    }
    for n in ngrams:
        for a in (0.05,):
            g["copy_aware_key_entropy (mask, n)"][f"alpha={a}, n={n}"] = (n, lambda s, a=a: _ke(s, key(s, a), sup(s)))
            g["copy_aware_entropy_change (mask, n)"][f"alpha={a}, n={n}"] = (
                n,
                lambda s, a=a: _gain(s, key(s, a), sup(s)),
            )
        for q in quantiles:
            g["copy_aware_key_entropy (mask, n)"][f"q={q}, n={n}"] = (n, lambda s, q=q: _ke(s, qk(s, q), sup(s)))
            g["copy_aware_entropy_change (mask, n)"][f"q={q}, n={n}"] = (n, lambda s, q=q: _gain(s, qk(s, q), sup(s)))
    return g


def _win(rows: list[dict], key: str, other: str) -> dict:
    return common.win_counts([r["gold"][key] for r in rows], [r[other][key] for r in rows])


def tune(args: argparse.Namespace) -> dict:
    """Win-rates of every grid setting on the tuning records; the best setting per family."""
    grid = tuning_grid()
    out: dict[str, Any] = {}
    lines = []
    for path in sorted(glob.glob(os.path.join(args.runs, "*.winrate.tune.jsonl"))):
        recs = load(path)
        if not recs:
            continue
        cache: dict[int, list[dict]] = {}
        for n in {n for fam in grid.values() for n, _ in fam.values()}:
            cache[n] = [{c: stats_of(v, n) for c, v in r["contexts"].items()} for r in recs]
        name = os.path.basename(path).replace(".winrate.tune.jsonl", "")
        table, best, all_scored = [], {}, []
        for fam, settings in grid.items():
            scored = []
            for label, (n, fn) in settings.items():
                rows = [{c: {"u": fn(st)} for c, st in item.items()} for item in cache[n]]
                wd, wr = _win(rows, "u", "distractor")["rate"], _win(rows, "u", "random")["rate"]
                scored.append((label, wd, wr))
                all_scored.append((fam, label, wd, wr))
                table.append(
                    [
                        fam,
                        label,
                        common.fmt(wd, pct=True),
                        common.fmt(wr, pct=True),
                        common.fmt((wd + wr) / 2, pct=True),
                    ]
                )
            b = max(scored, key=lambda x: (x[1] + x[2], x[1]))
            best[fam] = {"setting": b[0], "distractor": b[1], "random": b[2]}
        out[name] = {
            "n": len(recs),
            "best": best,
            "settings": {fam: {lab: (wd, wr) for f2, lab, wd, wr in all_scored if f2 == fam} for fam in grid},
        }
        lines.append(
            f"### tuning: {name} (n = {len(recs)} tuning questions)\n\n"
            + common.md_table(["family", "setting", "vs distractor (%)", "vs random (%)", "mean (%)"], table)
        )
        lines.append(
            common.md_table(
                ["family", "best setting (mean win-rate)"],
                [
                    [f, f"{b['setting']} ({common.fmt((b['distractor'] + b['random']) / 2, pct=True)})"]
                    for f, b in best.items()
                ],
            )
        )
    # the registered settings: per family, the best mean win-rate averaged over every tuning file of
    # the embedded model (both answer styles), so one setting serves both styles
    pooled = [v for k, v in out.items() if k.startswith(args.pool)]
    if pooled:
        rows, chosen = [], {}
        for fam in grid:
            means = {
                lab: sum((v["settings"][fam][lab][0] + v["settings"][fam][lab][1]) / 2 for v in pooled) / len(pooled)
                for lab in grid[fam]
            }
            lab = max(means, key=lambda x: means[x])
            chosen[fam] = lab
            rows.append([fam, lab, common.fmt(means[lab], pct=True)])
        out["chosen"] = chosen
        lines.append(
            f"### chosen settings (mean over {len(pooled)} tuning file(s) of {args.pool}*)\n\n"
            + common.md_table(["family", "setting", "mean win-rate (%)"], rows)
        )
    with open(os.path.join(args.runs, "tuning.json"), "w", encoding="utf-8") as f:
        json.dump({**common.clean(out), "meta": meta(settings=args.meta_settings)}, f, indent=1)
    print("\n\n".join(lines))
    return out


# ---------------------------------------------------------------- held-out report
def utilities(ctx: dict) -> dict[str, float]:
    """Every registered metric's utility (recomputed from the stored statistics with the current
    grogu.metrics) and the relevance baselines."""
    s = stats_of(ctx, grogu_metrics.COPY_NGRAM)
    out = {
        m: grogu_metrics.compute(m, s.h_g, s.logp_g, s.h_u, logp_u=s.logp_u, copied=s.copied).utility
        for m in grogu_metrics.METRICS
    }
    out.update(ctx["relevance"])
    return out


def report_winrate(recs: list[dict], baseline: dict[str, dict[str, bool]] | None = None) -> dict:
    """Win-rates of every metric; sign tests against KeyEntropy of the same pass and, with
    ``baseline`` ({question id: {other: KeyEntropy of the long-style pass prefers gold}}), against the
    paper's setting (long answers) on the questions both passes scored."""
    rows = [{c: utilities(v) for c, v in r["contexts"].items()} for r in recs]
    metrics = list(rows[0]["gold"])
    acc = {c: sum(r["contexts"][c]["correct"] for r in recs) / len(recs) for c in winrate.DOCS}
    toks = sum(r["contexts"][c]["n_tokens"] for r in recs for c in winrate.DOCS) / (3 * len(recs))
    win = {m: {o: _win(rows, m, o) for o in winrate.OTHERS} for m in metrics}
    tests = {}
    for m in metrics:
        if m in ("key_entropy", "bm25", "minilm"):
            continue
        for o in winrate.OTHERS:
            a = [r["gold"][m] > r[o][m] for r in rows]
            b = [r["gold"]["key_entropy"] > r[o]["key_entropy"] for r in rows]
            tests.setdefault(m, {})[o] = common.sign_test(a, b)
    passing = copied = total = 0
    for r in recs:
        for v in r["contexts"].values():
            st = stats_of(v, grogu_metrics.COPY_NGRAM)
            passing += int(((st.h_g - st.h_u).abs() > grogu_metrics.ALPHA).sum())
            copied += int(st.copied.sum())
            total += len(st)
    tokens = {"share_passing_alpha": passing / max(total, 1), "share_copied": copied / max(total, 1)}
    vs_paper = {}
    if baseline:
        both = [(r, x) for r, x in zip(recs, rows) if r["id"] in baseline]
        for m in metrics:
            for o in winrate.OTHERS:
                a = [x["gold"][m] > x[o][m] for _, x in both]
                b = [baseline[r["id"]][o] for r, _ in both]
                vs_paper.setdefault(m, {})[o] = {**common.sign_test(a, b), "n": len(both)}
    return {
        "n": len(recs),
        "accuracy": acc,
        "mean_answer_tokens": toks,
        "tokens": tokens,
        "win_rate": win,
        "sign_test_vs_key_entropy": tests,
        "sign_test_vs_long_key_entropy": vs_paper,
    }


def report_noise(recs: list[dict]) -> dict:
    rows = [{c: utilities(v) for c, v in r["contexts"].items()} for r in recs]
    outcome = [int(r["contexts"]["random"]["correct"]) - int(r["contexts"]["retrieved"]["correct"]) for r in recs]
    taus = {
        m: common.kendall_tau([x["random"][m] - x["retrieved"][m] for x in rows], outcome) for m in rows[0]["random"]
    }
    acc = {c: sum(r["contexts"][c]["correct"] for r in recs) / len(recs) for c in noise_experiment.CONTEXTS}
    return {"n": len(recs), "accuracy": acc, "discordant": sum(o != 0 for o in outcome), "tau": taus}


LABELS = {**common.METRIC_LABELS, "key_entropy": "KeyEntropy (paper default)"}


def report(args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {}
    paths = sorted(
        glob.glob(os.path.join(args.runs, f"*.{args.split}.jsonl")),
        key=lambda p: (not os.path.basename(p).startswith(common.DEFAULT_MODEL), p),
    )  # embedded model first
    baselines: dict[str, dict] = {}
    for path in paths:  # the paper's setting (long answers, KeyEntropy) of each model, per question
        tag, style, experiment = os.path.basename(path).split(".")[:3]
        if style == "long" and experiment == "winrate":
            baselines[tag] = {}
            for r in load(path)[: args.limit]:
                u = {c: utilities(v)["key_entropy"] for c, v in r["contexts"].items()}
                baselines[tag][r["id"]] = {o: u["gold"] > u[o] for o in winrate.OTHERS}
    for path in paths:
        tag, style, experiment = os.path.basename(path).split(".")[:3]
        recs = load(path)[: args.limit]
        if not recs:
            continue
        key = f"{tag}.{style}"
        if experiment == "winrate":
            res = report_winrate(recs, baselines.get(tag) if style != "long" else None)
        else:
            res = report_noise(recs)
        res["model"] = recs[0]["model"]
        res["max_new_tokens"] = recs[0]["max_new_tokens"]
        res["seconds_per_question"] = sum(r["seconds"] for r in recs) / len(recs)
        out.setdefault(key, {})[experiment] = res
    with open(os.path.join(args.runs, f"report.{args.split}.json"), "w", encoding="utf-8") as f:
        json.dump({**common.clean(out), "meta": meta(settings=args.meta_settings)}, f, indent=1)
    print(markdown(out, "held-out" if args.split == "heldout" else args.split))
    return out


def markdown(out: dict, split: str = "held-out") -> str:
    parts = []
    for key, res in out.items():
        wr, nz = res.get("winrate"), res.get("noise")
        first = wr or nz
        tag = key.rsplit(".", 1)[0]
        model = first["model"] if first["model"] == tag else f"{tag} (`{os.path.basename(first['model'])}`)"
        head = f"**{model}**, answer style `{key.split('.')[-1]}` (max_new_tokens {first['max_new_tokens']})"
        if wr:
            head += (
                f"; win-rates on n = {wr['n']} {split} questions (gold answered correctly "
                f"{common.fmt(wr['accuracy']['gold'], pct=True)} %, distractor {common.fmt(wr['accuracy']['distractor'], pct=True)} %, "
                f"random {common.fmt(wr['accuracy']['random'], pct=True)} %; {wr['mean_answer_tokens']:.1f} answer tokens on average, "
                f"{common.fmt(wr['tokens']['share_passing_alpha'], pct=True)} % of them pass alpha = 0.05, "
                f"{common.fmt(wr['tokens']['share_copied'], pct=True)} % copied from the document ({grogu_metrics.COPY_NGRAM}-grams); "
                f"{first['seconds_per_question']:.1f} s per question for its 3 contexts, 1 CPU thread, shared machine)"
            )
        if nz:
            head += (
                f"; noise: n = {nz['n']} {split} questions, {nz['discordant']} with exactly one context answered "
                f"correctly (only those count for τ)"
            )
        metrics = list((wr or {}).get("win_rate", {})) or list(nz["tau"])
        rows = []
        for m in metrics:
            row = [LABELS.get(m, m)]
            if wr:
                w = wr["win_rate"][m]
                t = wr["sign_test_vs_key_entropy"].get(m, {})
                row += [
                    common.fmt(w["distractor"]["rate"], pct=True),
                    common.fmt(w["random"]["rate"], pct=True),
                    " / ".join(common.fmt_p(t[o]["p"]) if o in t else "–" for o in winrate.OTHERS),
                ]
                vp = wr["sign_test_vs_long_key_entropy"].get(m)
                if wr["sign_test_vs_long_key_entropy"]:
                    row += [
                        " / ".join(
                            f"{vp[o]['n10']}:{vp[o]['n01']}, p={common.fmt_p(vp[o]['p'])}" for o in winrate.OTHERS
                        )
                        if vp
                        else "–"
                    ]
            if nz:
                tt = nz["tau"][m]
                row += [f"{common.fmt(tt['tau'])} ({tt['C']}/{tt['D']})"]
            rows.append(row)
        header = ["metric"]
        if wr:
            header += ["gold vs distractor (%)", "gold vs random (%)", "sign test vs KeyEntropy p (dist. / rand.)"]
            if wr["sign_test_vs_long_key_entropy"]:
                header += [
                    "vs paper setting (long answers, KeyEntropy): only this wins : only paper wins, p (dist. / rand.)"
                ]
        if nz:
            header += ["noise τ (C/D)"]
        parts.append(head + "\n\n" + common.md_table(header, rows))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="one scoring pass; per-token statistics to JSONL")
    c.add_argument("--experiment", choices=("winrate", "noise"), default="winrate")
    c.add_argument("--split", choices=("tune", "heldout"), default="heldout")
    c.add_argument("--n", type=int, default=300)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--model", default=common.DEFAULT_MODEL)
    c.add_argument("--tag", default=None, help="file-name tag of the model (default: from --model)")
    c.add_argument("--style", choices=("long", "short"), default="long")
    c.add_argument("--max-new-tokens", type=int, default=None)
    c.add_argument("--batch", type=int, default=8, help="questions per engine call")
    c.add_argument("--threads", type=int, default=1)
    c.add_argument("--out", default=OUT)
    for name in ("tune", "report"):
        sp = sub.add_parser(name, help="settings on the tuning records" if name == "tune" else "held-out table")
        sp.add_argument("--runs", default=OUT)
        sp.add_argument(
            "--pool", default="smollm2-135m-instruct", help="tune: the model tag whose files set the defaults"
        )
        sp.add_argument("--split", default="heldout", help="report: which records (heldout; tune only as a check)")
        sp.add_argument("--limit", type=int, default=None, help="report: the first N questions of each file")
    args = p.parse_args(argv)
    # the settings that differ from the command's defaults, for the records' meta
    args.meta_settings = {k: v for k, v in vars(args).items() if v != sub.choices[args.command].get_default(k)}
    if args.command == "collect":
        collect(args)
    elif args.command == "tune":
        tune(args)
    else:
        report(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
