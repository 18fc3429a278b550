"""The harness's retrievers over a fixed list of paragraphs: ``bm25`` and ``minilm`` (the packaged
all-MiniLM-L6-v2, cosine similarity), both from :mod:`grogu.rerank.retrieval`, with one relevance score per
(query, paragraph); higher = more relevant. The MiniLM paragraph embeddings of a corpus are cached in
``$GROGU_CACHE`` (default ``~/.cache/grogu``), so a second run does not re-encode.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from grogu.rerank.retrieval import BM25Retriever, DenseRetriever
from grogu.rerank.selection import order_by
from grogu_research.experiments.common import holds_answer

RETRIEVERS = ("bm25", "minilm")


def make_retriever(name: str, texts: Sequence[str], device: str | None = None):
    """``bm25`` or ``minilm`` over ``texts``."""
    if name == "bm25":
        return BM25Retriever(texts)
    if name == "minilm":
        return DenseRetriever(texts, device=device, cache=True)
    raise ValueError(f"unknown retriever {name!r}; choose one of {RETRIEVERS}")


def hard_negatives(
    scores: np.ndarray, texts: Sequence[str], answers: Sequence[str], exclude: set[int], k: int
) -> list[int]:
    """The ``k`` highest-scoring paragraph ids outside ``exclude`` that hold no answer string
    (ties: lower id first)."""
    out: list[int] = []
    for pid in order_by(np.asarray(scores).tolist()):
        if pid in exclude or holds_answer(texts[pid], answers):
            continue
        out.append(pid)
        if len(out) == k:
            break
    return out


__all__ = ["RETRIEVERS", "make_retriever", "hard_negatives", "BM25Retriever", "DenseRetriever"]
