"""Models and scoring in the harness: model lists, the scorer, batched context scores, threads, progress."""

from __future__ import annotations

import sys
from typing import Any, Iterable, Sequence

GROGU_METRICS = ("ppl", "key_ppl", "entropy", "key_entropy")


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
    from grogu.rerank.scorer import UtilityScorer

    return UtilityScorer(model, max_new_tokens=max_new_tokens, device=device, dtype=dtype)


def score_contexts(scorer: Any, jobs: Sequence[tuple[str, Sequence[Any]]], return_details: bool = False) -> list[Any]:
    """GROGU of (query, ordered documents) contexts of *many* queries in one batched engine pass."""
    return [
        got for (got,) in scorer.score_contexts_batch([(q, [docs]) for q, docs in jobs], return_details=return_details)
    ]


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
        yield items[start : start + size]


__all__ = [
    "GROGU_METRICS",
    "model_list",
    "one_model",
    "build_scorer",
    "score_contexts",
    "set_threads",
    "progress",
    "chunks",
]
