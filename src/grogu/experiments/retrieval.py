"""Retrievers over a fixed list of paragraphs: BM25 (rank_bm25, Okapi) and dense MiniLM
(the packaged all-MiniLM-L6-v2, cosine similarity). Both give one relevance score per
(query, paragraph); higher = more relevant.

The MiniLM paragraph embeddings of a corpus are cached in ``$GROGU_CACHE`` (default
``~/.cache/grogu``), keyed by the model and a hash of the texts, so a second run does not re-encode.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Sequence

import numpy as np

from .common import holds_answer

RETRIEVERS = ("bm25", "minilm")
_WORD = re.compile(r"\w+")


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased word tokens (``\\w+``)."""
    return _WORD.findall(text.lower())


class BM25Retriever:
    """Okapi BM25 (k1 = 1.5, b = 0.75, rank_bm25's defaults) over ``texts``."""

    name = "bm25"

    def __init__(self, texts: Sequence[str]) -> None:
        from rank_bm25 import BM25Okapi

        self.index = BM25Okapi([bm25_tokens(t) for t in texts])
        self.size = len(texts)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every paragraph for ``query``: [n_paragraphs]."""
        return np.asarray(self.index.get_scores(bm25_tokens(query)), dtype=np.float64)

    def score_ids(self, query: str, ids: Sequence[int]) -> list[float]:
        """BM25 scores of the paragraphs ``ids`` (corpus statistics of the whole index)."""
        return [float(s) for s in self.index.get_batch_scores(bm25_tokens(query), list(ids))]


def _cache_dir() -> str:
    return os.environ.get("GROGU_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "grogu"))


class MiniLMRetriever:
    """Dense retrieval with a sentence-transformers model (default: the packaged all-MiniLM-L6-v2):
    cosine similarity of normalised embeddings. ``texts`` may be None to only score given pairs."""

    name = "minilm"

    def __init__(self, texts: Sequence[str] | None = None, embedder: Any = "all-minilm-l6-v2",
                 device: str | None = None, cache: bool = True) -> None:
        from ..influence import load_embedder

        self.model = load_embedder(embedder, device=device)
        self.embedder_name = embedder if isinstance(embedder, str) else type(embedder).__name__
        self.matrix = None if texts is None else self._corpus(list(texts), cache)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                            convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def _corpus(self, texts: list[str], cache: bool) -> np.ndarray:
        digest = hashlib.sha1("\n\x00".join([self.embedder_name, *texts]).encode()).hexdigest()[:16]
        path = os.path.join(_cache_dir(), f"embeddings-{digest}.npy")
        if cache and os.path.exists(path):
            matrix = np.load(path)
            if matrix.shape[0] == len(texts):
                return matrix
        matrix = self.encode(texts)
        if cache:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                np.save(path, matrix)
            except OSError:
                pass
        return matrix

    def scores(self, query: str) -> np.ndarray:
        if self.matrix is None:
            raise ValueError("this MiniLMRetriever has no corpus; give texts to rank paragraphs")
        return self.matrix @ self.encode([query])[0]

    def pair_scores(self, queries: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Cosine similarity of each (query, text) pair."""
        q, t = self.encode(queries), self.encode(texts)
        return [float(x) for x in (q * t).sum(axis=1)]


def make_retriever(name: str, texts: Sequence[str], device: str | None = None):
    """``bm25`` or ``minilm`` over ``texts``."""
    if name == "bm25":
        return BM25Retriever(texts)
    if name == "minilm":
        return MiniLMRetriever(texts, device=device)
    raise ValueError(f"unknown retriever {name!r}; choose one of {RETRIEVERS}")


def hard_negatives(scores: np.ndarray, texts: Sequence[str], answers: Sequence[str], exclude: set[int],
                   k: int) -> list[int]:
    """The ``k`` highest-scoring paragraph ids outside ``exclude`` that hold no answer string
    (ties: lower id first)."""
    out: list[int] = []
    for pid in np.argsort(-scores, kind="stable"):
        pid = int(pid)
        if pid in exclude or holds_answer(texts[pid], answers):
            continue
        out.append(pid)
        if len(out) == k:
            break
    return out
