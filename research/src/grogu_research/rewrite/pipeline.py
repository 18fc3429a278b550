"""The whole run, :func:`build_rewrite_pairs`: candidates, retrieval, GROGU, pairs, and the files."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from grogu.core.checks import check_positive_int
from grogu.rerank.retrieval import as_retriever
from grogu.runtime.models import DEFAULT_MODEL
from grogu_research.rewrite.candidates import DEFAULT_N_CANDIDATES, candidates_for_turns
from grogu_research.rewrite.pairs import DEFAULT_DROP_RATIO, PreferencePair, check_drop_ratio, drop_smallest_gaps
from grogu_research.rewrite.scoring import DEFAULT_K, TurnResult, score_turns
from grogu_research.rewrite.turns import DEFAULT_INSTRUCTION, Turn, turn_from_dict

if TYPE_CHECKING:  # pragma: no cover
    from grogu.rerank.scorer import UtilityScorer


@dataclass
class RewritePairs:
    """Everything :func:`build_rewrite_pairs` produced: per-turn results, the DPO pairs kept and
    dropped by the gap rule, and a summary (counts, settings, timings)."""

    results: list[TurnResult]
    kept: list[PreferencePair]
    dropped: list[PreferencePair]
    summary: dict[str, Any]

    def sft_records(self) -> list[dict[str, str]]:
        """One ``{"prompt", "completion"}`` record per turn: the highest-GROGU rewrite."""
        return [{"prompt": r.prompt, "completion": r.best.rewrite} for r in self.results]

    def dpo_records(self) -> list[dict[str, str]]:
        """One ``{"prompt", "chosen", "rejected"}`` record per kept pair (turn order)."""
        return [p.record() for p in self.kept]

    def score_records(self) -> list[dict[str, Any]]:
        """Per turn: every rewrite with its score, answer and retrieved passages, and what became of it."""
        kept = {p.turn_index for p in self.kept}
        out = []
        for i, r in enumerate(self.results):
            choice = r.choice
            out.append(
                {
                    "id": r.turn.id,
                    "question": r.turn.question,
                    "history": r.turn.history,
                    "prompt": r.prompt,
                    "generated": r.generated,
                    "n_raw_candidates": r.n_raw_candidates,
                    "best": r.best_index,
                    "worst": choice[1] if choice else None,
                    "pair": "kept" if i in kept else ("dropped" if choice else r.no_pair_reason),
                    "rewrites": [vars(x) for x in r.rewrites],
                }
            )
        return out

    def write(self, out_dir: str) -> dict[str, str]:
        """Write sft.jsonl, dpo.jsonl, scores.jsonl and summary.json into ``out_dir``; returns the paths."""
        os.makedirs(out_dir, exist_ok=True)
        paths = {
            name: os.path.join(out_dir, name) for name in ("sft.jsonl", "dpo.jsonl", "scores.jsonl", "summary.json")
        }
        write_jsonl(paths["sft.jsonl"], self.sft_records())
        write_jsonl(paths["dpo.jsonl"], self.dpo_records())
        write_jsonl(paths["scores.jsonl"], self.score_records())
        with open(paths["summary.json"], "w", encoding="utf-8") as f:
            json.dump(self.summary, f, indent=2, ensure_ascii=False)
            f.write("\n")
        return paths


def write_jsonl(path: str, records: Iterable[Mapping[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def summarize(
    results: Sequence[TurnResult], kept: Sequence[PreferencePair], dropped: Sequence[PreferencePair], drop_ratio: float
) -> dict[str, Any]:
    """Counts of a run: turns, candidates, turns without a pair (and why), pairs kept/dropped, gaps."""
    reasons = [r.no_pair_reason for r in results]
    gaps_kept = [p.gap for p in kept]
    gaps_dropped = [p.gap for p in dropped]
    n_unique = [len(r.rewrites) for r in results]
    generated = [r for r in results if r.generated]

    def stats(xs: Sequence[float]) -> dict[str, float] | None:
        return {"min": min(xs), "mean": sum(xs) / len(xs), "max": max(xs)} if xs else None

    return {
        "turns": len(results),
        "turns_generated_candidates": len(generated),
        "raw_candidates_generated": sum(r.n_raw_candidates for r in generated),
        "unique_candidates_per_turn_mean": (sum(n_unique) / len(n_unique)) if n_unique else 0.0,
        "sft_records": len(results),
        "sft_chose_original_question": sum(r.best.is_original for r in results),
        "turns_without_pair": {
            "single_candidate": reasons.count("single_candidate"),
            "zero_gap": reasons.count("zero_gap"),
        },
        "pairs_before_drop": len(kept) + len(dropped),
        "drop_ratio": drop_ratio,
        "pairs_dropped_small_gap": len(dropped),
        "pairs_kept": len(kept),
        "gap_kept": stats(gaps_kept),
        "gap_dropped": stats(gaps_dropped),
    }


def _scorer(model: Any, **kwargs: Any) -> "UtilityScorer":
    from grogu.rerank.scorer import UtilityScorer

    if isinstance(model, UtilityScorer):
        return model
    return UtilityScorer(model, **{k: v for k, v in kwargs.items() if v is not None})


def build_rewrite_pairs(
    turns: Sequence[Turn | Mapping[str, Any]],
    retriever: Any,
    model: Any = DEFAULT_MODEL,
    *,
    rewriter: Any = None,
    n_candidates: int = DEFAULT_N_CANDIDATES,
    temperature: float = 0.8,
    seed: int = 0,
    rewrite_max_new_tokens: int = 48,
    include_original: bool = True,
    k: int = DEFAULT_K,
    drop_ratio: float = DEFAULT_DROP_RATIO,
    metric: str | None = None,
    max_new_tokens: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    instruction: str = DEFAULT_INSTRUCTION,
    turns_per_batch: int = 8,
    progress: bool = False,
) -> RewritePairs:
    """GROGU-ranked SFT and DPO data for a query rewriter; see the :mod:`grogu_research.rewrite` docstring.

    Args:
        turns: :class:`Turn` objects or ``{"question", "history"?, "candidates"?, "id"?}`` mappings.
            Turns without candidates get ``n_candidates`` sampled rewrites from ``rewriter``.
        retriever: a :class:`BM25Retriever`, :class:`DenseRetriever`, LlamaIndex or LangChain
            retriever, or anything with ``retrieve(query, k) -> list[str]``.
        model: the target LLM scored by GROGU: a :class:`~grogu.UtilityScorer` (its metric and answer
            length are used) or anything it accepts (name, path, Engine, (model, tokenizer)).
        rewriter: the LLM that samples candidates (default: the target LLM's engine).
        temperature, seed, rewrite_max_new_tokens: sampling of the candidates.
        include_original: always rank the original question as a candidate too (default True).
        k: passages retrieved per rewrite, scored together as one context (default 10).
        drop_ratio: fraction of DPO pairs with the smallest GROGU gap that is dropped (default 0.5).
        metric, max_new_tokens, device, dtype: for the UtilityScorer when ``model`` is not one.
        instruction: the rewriting prompt template ({history}, {question}).
        turns_per_batch: turns whose contexts share engine batches."""
    k = check_positive_int("k", k)
    check_drop_ratio(drop_ratio)
    turns = [t if isinstance(t, Turn) else turn_from_dict(t, i) for i, t in enumerate(turns)]
    retriever = as_retriever(retriever)
    scorer = _scorer(model, metric=metric, max_new_tokens=max_new_tokens, device=device, dtype=dtype)
    t0 = time.perf_counter()
    raw, candidates, generated = candidates_for_turns(
        turns,
        scorer.target if rewriter is None else rewriter,
        n_candidates,
        include_original=include_original,
        temperature=temperature,
        max_new_tokens=rewrite_max_new_tokens,
        seed=seed,
        instruction=instruction,
    )
    t1 = time.perf_counter()
    results = score_turns(
        scorer,
        turns,
        candidates,
        retriever,
        k,
        turns_per_batch=turns_per_batch,
        instruction=instruction,
        progress=progress,
    )
    timings = {"generate_s": round(t1 - t0, 3), "retrieve_and_score_s": round(time.perf_counter() - t1, 3)}
    for i, r in enumerate(results):
        r.generated = i in generated
        r.n_raw_candidates = len(raw[i])
    kept, dropped = drop_smallest_gaps([p for i, r in enumerate(results) if (p := r.pair(i)) is not None], drop_ratio)
    summary = summarize(results, kept, dropped, drop_ratio)
    summary["settings"] = _settings(
        scorer,
        rewriter,
        retriever,
        n_candidates=n_candidates,
        temperature=temperature,
        seed=seed,
        include_original=include_original,
        k=k,
    )
    summary["timings"] = timings
    return RewritePairs(results=results, kept=kept, dropped=dropped, summary=summary)


def _settings(scorer: "UtilityScorer", rewriter: Any, retriever: Any, **chosen: Any) -> dict[str, Any]:
    """The settings of a run for summary.json: the target LLM's, the rewriter's name, the retriever's."""
    if rewriter is None:
        rewriter_name = scorer.model_name
    elif isinstance(rewriter, str):
        rewriter_name = rewriter
    else:
        rewriter_name = getattr(rewriter, "model_name", None) or type(rewriter).__name__
    return {
        "model": scorer.model_name,
        "metric": scorer.metric,
        "max_new_tokens": scorer.max_new_tokens,
        "rewriter": str(rewriter_name),
        **chosen,
        "retriever": getattr(retriever, "name", type(retriever).__name__),
    }


__all__ = ["RewritePairs", "write_jsonl", "summarize", "build_rewrite_pairs"]
