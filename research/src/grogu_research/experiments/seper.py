"""ΔSePer against the ground-truth utility of MuSiQue paragraphs (the ΔSePer paper's utility check).

Each sampled MuSiQue question (``musique-sample``: 100 answerable 2-4 hop questions, 20 paragraphs each)
gives one data point per paragraph: ground-truth utility 1 / n_steps for a supporting paragraph
(n_steps = hops of the question's decomposition), 0 for the others. Every paragraph is scored alone as
the context (with its title), with the answer and its aliases as the references:

- ΔSePer soft and hard (N samples at temperature 1.0 with and without the paragraph) — the entailment
  kernel is either an NLI model (``nli=`` hub id / path, as in the paper) or a built-in **lexical**
  kernel (``kernel='token-f1'`` or ``'rouge-l'``): the token-F1 / ROUGE-L of the two strings after the
  question that ΔSePer prefixes to both is dropped. The lexical kernel is a cheap stand-in, *not* an
  entailment model; the result says which kernel was used.
- baselines that need no extra model, from the greedy answer with the paragraph: exact match, token-F1,
  ROUGE-L against the references (best over references), and the same minus their value for the greedy
  answer without the paragraph (Δ); Entropy utility (-mean token entropy of the grounded answer) and
  ΔEntropy (mean entropy of the ungrounded answer minus that of the grounded one); and GROGU's
  KeyEntropy utility (reference-free).

Reported: Pearson r of each measure with the ground truth over all (question, paragraph) pairs (pooled),
and the mean of the per-question r (questions where the measure is constant are left out).
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable, Sequence

from grogu_research.experiments import common
from grogu_research.testing import shared_data_path

KERNELS: dict[str, Callable[[str, str], float]] = {"token-f1": common.token_f1, "rouge-l": common.rouge_l}
MEASURES = {
    "dseper_soft": "ΔSePer (soft)",
    "dseper_hard": "ΔSePer (hard)",
    "em": "exact match",
    "f1": "token-F1",
    "rouge_l": "ROUGE-L",
    "d_em": "Δ exact match",
    "d_f1": "Δ token-F1",
    "d_rouge_l": "Δ ROUGE-L",
    "entropy": "Entropy (−mean H)",
    "d_entropy": "Δ Entropy",
    "key_entropy": "GROGU KeyEntropy",
}


class LexicalEntailment:
    """Lexical stand-in for an NLI kernel: E(p, h) = token-F1 (or ROUGE-L F) of ``p`` and ``h`` on
    SQuAD-normalised tokens, after a leading ``query`` (set per question) is removed from both. Symmetric,
    in [0, 1]; not an entailment model (it cannot tell paraphrases or negations)."""

    def __init__(self, kind: str = "token-f1") -> None:
        if kind not in KERNELS:
            raise ValueError(f"unknown lexical kernel {kind!r}; choose one of {sorted(KERNELS)}")
        self.kind, self.fn, self.query = kind, KERNELS[kind], None

    def _strip(self, text: str) -> str:
        if self.query and text.startswith(self.query):
            return text[len(self.query) :]
        return text

    def __call__(self, premises: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
        return [self.fn(self._strip(p), self._strip(h)) for p, h in zip(premises, hypotheses)]


def load_items(limit: int | None, seed: int, paragraphs: int | None) -> list[dict]:
    """Sampled MuSiQue questions with their paragraphs and ground-truth utilities. ``paragraphs``
    keeps every supporting paragraph plus a seeded sample of the others, up to that many (None: all 20)."""
    with open(shared_data_path("musique-sample", "musique_train_100_hipporag.json"), encoding="utf-8") as f:
        data = json.load(f)
    items = []
    for q in common.sample(data, limit, seed):
        n_steps = len(q["question_decomposition"])
        paras = q["paragraphs"]
        if paragraphs is not None:
            support = [p for p in paras if p["is_supporting"]]
            others = [p for p in paras if not p["is_supporting"]]
            keep = {p["idx"] for p in support}
            keep |= {
                p["idx"]
                for p in random.Random(f"{seed}-{q['id']}").sample(
                    others, max(0, min(len(others), paragraphs - len(support)))
                )
            }
            paras = [p for p in paras if p["idx"] in keep]
        items.append(
            {
                "id": q["id"],
                "question": q["question"],
                "references": [q["answer"], *q.get("answer_aliases", [])],
                "n_steps": n_steps,
                "paragraphs": [
                    {
                        "idx": p["idx"],
                        "title": p["title"],
                        "text": p["paragraph_text"],
                        "supporting": bool(p["is_supporting"]),
                        "gt": 1.0 / n_steps if p["is_supporting"] else 0.0,
                    }
                    for p in paras
                ],
            }
        )
    return items


def _mean_entropy(gen: Any) -> float:
    return float(gen.entropy.mean()) if gen.token_ids else float(gen.stop_entropy)


def summarize(items: list[dict]) -> dict:
    pairs = [p for it in items for p in it["paragraphs"]]
    gt = [p["gt"] for p in pairs]
    out = {}
    for m in MEASURES:
        per_q = [
            common.pearson([p[m] for p in it["paragraphs"]], [p["gt"] for p in it["paragraphs"]])["r"] for it in items
        ]
        defined = [r for r in per_q if r == r]
        out[m] = {
            "pooled": common.pearson([p[m] for p in pairs], gt),
            "per_question_mean_r": sum(defined) / len(defined) if defined else float("nan"),
            "per_question_defined": len(defined),
            "mean": sum(p[m] for p in pairs) / len(pairs),
        }
    return {"pearson": out, "pairs": len(pairs), "supporting_pairs": sum(p["supporting"] for p in pairs)}


def run(
    *,
    model: Any = common.DEFAULT_MODEL,
    limit: int | None = 10,
    seed: int = 0,
    nli: str | None = None,
    kernel: str = "token-f1",
    samples: int = 10,
    tau: float = 0.5,
    paragraphs: int | None = None,
    max_new_tokens: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    batch: int = 2,
    threads: int | None = None,
    retriever: str | None = None,
    out_dir: str | None = None,
    write: bool = True,
    command: str | None = None,
) -> dict:
    """ΔSePer vs ground truth on ``limit`` MuSiQue questions; ``nli`` (hub id / path) or the lexical
    ``kernel`` ('token-f1' / 'rouge-l'). ``retriever`` is accepted and unused (the paragraphs are given)."""
    from grogu.metrics.seper import NLIEntailment, SePerScorer

    clock = common.Clock()
    common.set_threads(threads)
    scorer = common.build_scorer(common.one_model(model, "seper"), max_new_tokens, device, dtype)
    if nli:
        entail: Any = NLIEntailment(nli, device=device)
        kernel_label = f"NLI model {nli}"
    else:
        entail = LexicalEntailment(kernel)
        kernel_label = f"lexical {kernel} (stand-in, not an NLI model)"
    seper = SePerScorer(
        scorer.target, entailment=entail, n_samples=samples, tau=tau, seed=seed, max_new_tokens=max_new_tokens
    )
    items = load_items(limit, seed, paragraphs)
    bar = common.progress(len(items), "seper")
    for chunk in common.chunks(items, batch):
        docs = [[{"title": p["title"], "text": p["text"]} for p in it["paragraphs"]] for it in chunk]
        greedy = scorer.score_batch([(it["question"], d) for it, d in zip(chunk, docs)])
        ungrounded = scorer.target.generate(
            [scorer.prompts.ungrounded_ids(it["question"]) for it in chunk], max_new_tokens
        )
        for it, d, results, u in zip(chunk, docs, greedy, ungrounded):
            refs = it["references"]
            it["ungrounded_answer"] = u.text
            base = {
                "em": common.exact_match(u.text, refs),
                "f1": common.best_over(common.token_f1, u.text, refs),
                "rouge_l": common.best_over(common.rouge_l, u.text, refs),
            }
            h_u = _mean_entropy(u)
            if isinstance(entail, LexicalEntailment):
                entail.query = it["question"].strip()
            dsp = seper.score(it["question"], d, refs)
            it["samples_without"] = dsp[0].samples_without if dsp else []
            for p, r, s in zip(it["paragraphs"], results, dsp):
                _fill_paragraph(p, r, s, refs, base, h_u)
        bar.update(len(chunk))
    bar.close()
    result = {
        "experiment": "seper",
        "models": common.model_names([scorer]),
        "n": len(items),
        "unit": "MuSiQue questions",
        "config": {
            "limit": limit,
            "seed": seed,
            "kernel": kernel_label,
            "samples": samples,
            "tau": tau,
            "paragraphs": paragraphs or "all (20)",
            "max_new_tokens": max_new_tokens,
            "batch": batch,
            "device": str(scorer.target.device),
            "command": command,
        },
        "summary": summarize(items),
        "items": items,
        "wall_s": clock(),
    }
    return common.finish(result, out_dir, write, markdown(result), plot)


def _fill_paragraph(p: dict, r: Any, s: Any, refs: list[str], base: dict[str, float], h_u: float) -> None:
    """One paragraph's record: its grounded answer's scores against the references and their change
    from the ungrounded answer's (``base``), its GROGU variants and its ΔSePer ``s``."""
    p["answer"] = r.answer
    p["em"] = common.exact_match(r.answer, refs)
    p["f1"] = common.best_over(common.token_f1, r.answer, refs)
    p["rouge_l"] = common.best_over(common.rouge_l, r.answer, refs)
    for k in ("em", "f1", "rouge_l"):
        p[f"d_{k}"] = p[k] - base[k]
    p["entropy"] = r.variants["entropy"]
    p["d_entropy"] = h_u + r.variants["entropy"]  # H(y_u | q) - H(y_g | q, D)
    p["key_entropy"] = r.variants["key_entropy"]
    p["dseper_soft"], p["dseper_hard"] = s.delta_soft, s.delta_hard
    p["p_soft_with"], p["p_soft_without"] = s.p_soft_with, s.p_soft_without
    p["p_hard_with"], p["p_hard_without"] = s.p_hard_with, s.p_hard_without
    p["samples_with"] = s.samples_with


def markdown(result: dict) -> str:
    s = result["summary"]
    rows = [
        [
            label,
            common.fmt(s["pearson"][m]["pooled"]["r"]),
            common.fmt_p(s["pearson"][m]["pooled"]["p"]),
            f"{common.fmt(s['pearson'][m]['per_question_mean_r'])} ({s['pearson'][m]['per_question_defined']})",
            common.fmt(s["pearson"][m]["mean"]),
        ]
        for m, label in MEASURES.items()
    ]
    table = common.md_table(
        ["measure", "Pearson r (pooled)", "p", "mean per-question r (questions)", "mean value"], rows
    )
    return (
        common.header(result, "ΔSePer vs ground-truth utility on MuSiQue (1/n_steps per supporting paragraph)")
        + f"- entailment kernel: **{result['config']['kernel']}**\n"
        + f"- {s['pairs']} (question, paragraph) pairs, {s['supporting_pairs']} supporting\n\n"
        + table
        + "\n"
    )


def plot(result: dict, path: str) -> None:
    import matplotlib.pyplot as plt

    pairs = [p for it in result["items"] for p in it["paragraphs"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    r = {m: result["summary"]["pearson"][m]["pooled"]["r"] for m in MEASURES}
    axes[0].barh(list(MEASURES.values())[::-1], [v if v == v else 0.0 for v in list(r.values())[::-1]])
    axes[0].axvline(0, color="grey", lw=0.8)
    axes[0].set_xlabel("Pearson r with ground-truth utility (pooled)")
    jitter = random.Random(0)
    axes[1].scatter(
        [p["gt"] + jitter.uniform(-0.02, 0.02) for p in pairs], [p["dseper_soft"] for p in pairs], s=8, alpha=0.5
    )
    axes[1].set_xlabel("ground-truth utility (1/n_steps, jittered)")
    axes[1].set_ylabel("ΔSePer (soft)")
    fig.suptitle(
        f"ΔSePer on MuSiQue — {', '.join(result['models'])}, N={result['n']} questions, "
        f"kernel: {result['config']['kernel']}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
