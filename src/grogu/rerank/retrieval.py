"""Retrievers, and adapters for LlamaIndex's and LangChain's, shared by ``grogu audit`` and the
research harness (``research/``: the papers' experiments and the rewrite pairs).

- :func:`bm25_tokenize`: the one BM25 analyzer, lower-cased word tokens (``\\w+``).
- :class:`BM25Retriever`: Okapi BM25 indexed and scored with ``bm25s``, with the scores of
  ``rank_bm25.BM25Okapi`` (see the class for why the weights are set here and not by a bm25s variant).
- :class:`DenseRetriever`: cosine similarity of sentence-transformers embeddings (default: the
  packaged all-MiniLM-L6-v2; nothing is downloaded), optionally cached on disk.
- :class:`LlamaIndexRetriever`, :class:`LangChainRetriever` and :func:`as_retriever`: any LlamaIndex
  or LangChain retriever as a :class:`Retriever` (``retrieve(query, k) -> list[str]``); their
  ``records(query)`` keep each document's id and title (the audit's set-ups).

Every ranking is best first with ties in corpus order. ``bm25s`` is in the ``eval`` extra; this
module imports it and sentence-transformers only when a retriever is built.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from typing import Any, Iterable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from ..core.checks import check_positive_int
from ..core.extras import require
from .selection import order_by

DEFAULT_EMBEDDER = "all-minilm-l6-v2"
_WORD = re.compile(r"\w+")


def bm25_tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (the BM25 analyzer)."""
    return _WORD.findall(text.lower())


def as_passages(passages: Iterable[Any]) -> list[str]:
    """The corpus as strings (mappings give their ``text`` or ``page_content``); errors for a corpus
    that is not a list, a passage that is not text, and an empty corpus."""
    if isinstance(passages, (str, bytes)) or not isinstance(passages, Iterable):
        raise TypeError("the corpus must be a list of passages (strings or {'text'} mappings)")
    out = []
    for i, p in enumerate(passages):
        if isinstance(p, Mapping):
            p = p.get("text", p.get("page_content"))
        if not isinstance(p, str):
            raise TypeError(f"passage {i} must be a str or a mapping with a string 'text'")
        out.append(p)
    if not out:
        raise ValueError("the corpus is empty: give at least one passage to retrieve from")
    return out


@runtime_checkable
class Retriever(Protocol):
    """Anything that maps a query to its top-k passages (best first) as strings."""

    def retrieve(self, query: str, k: int) -> list[str]: ...


class BM25Retriever:
    """Okapi BM25 over ``passages`` (strings or mappings with ``text``), :func:`bm25_tokenize` tokens.

    ``bm25s`` holds the index (vocabulary and sparse term-passage matrix) and scores queries; the
    weights in the matrix are those of ``rank_bm25.BM25Okapi`` with the same ``k1``, ``b`` and
    ``epsilon``, computed with the same floating-point operations, so scores and rankings (ties in
    corpus order) are BM25Okapi's: ``sum over query tokens (a repeated one counts again) of
    idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))`` with
    ``idf(t) = ln(N - df + 0.5) - ln(df + 0.5)``. A term in more than half of the passages has a
    negative idf there; BM25Okapi floors it at ``epsilon`` times the mean idf of the vocabulary, which
    none of bm25s's own variants does ("robertson" floors it at 0, "lucene" uses ``ln(1 + ...)``,
    "atire" ``ln(N / df)``), hence the weights are set here. tests/test_retrieval.py checks the scores
    against rank_bm25 on SQuAD paragraphs.
    """

    name = "bm25"

    def __init__(self, passages: Iterable[Any], *, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        bm25s = require("bm25s", "BM25 retrieval")
        self.passages = as_passages(passages)
        tokens = [bm25_tokenize(p) for p in self.passages]
        if not any(tokens):
            raise ValueError("every passage of the corpus is empty (no word tokens): nothing to retrieve")
        self.k1, self.b, self.epsilon = k1, b, epsilon
        self._index = bm25s.BM25(k1=k1, b=b, dtype="float64")
        self._index.index(tokens, show_progress=False)
        self._index.scores["data"] = self._okapi_weights(tokens)

    def _okapi_idf(self, tokens: list[list[str]]) -> np.ndarray:
        """BM25Okapi's idf of every term, by bm25s vocabulary id (the mean for the floor is summed
        in first-seen order, as BM25Okapi does)."""
        df: dict[str, int] = {}
        for doc in tokens:
            for word in dict.fromkeys(doc):
                df[word] = df.get(word, 0) + 1
        n = len(tokens)
        idf = {w: math.log(n - f + 0.5) - math.log(f + 0.5) for w, f in df.items()}
        floor = self.epsilon * (sum(idf.values()) / len(idf))
        out = np.zeros(len(self._index.scores["indptr"]) - 1, dtype=np.float64)
        for word, value in idf.items():
            out[self._index.vocab_dict[word]] = floor if value < 0 else value
        return out

    def _okapi_weights(self, tokens: list[list[str]]) -> np.ndarray:
        """The term-passage weights of BM25Okapi, in the order of bm25s's sparse matrix."""
        indptr, rows = self._index.scores["indptr"], self._index.scores["indices"].astype(np.int64)
        n_vocab = len(indptr) - 1
        cols = np.repeat(np.arange(n_vocab, dtype=np.int64), np.diff(indptr))
        doc_len = np.array([len(d) for d in tokens], dtype=np.int64)
        ids = np.fromiter(
            (self._index.vocab_dict[t] for d in tokens for t in d), dtype=np.int64, count=int(doc_len.sum())
        )
        keys, counts = np.unique(np.repeat(np.arange(len(tokens)), doc_len) * n_vocab + ids, return_counts=True)
        tf = counts[np.searchsorted(keys, rows * n_vocab + cols)]
        k1, b, avgdl = self.k1, self.b, int(doc_len.sum()) / len(tokens)
        return self._okapi_idf(tokens)[cols] * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len[rows] / avgdl)))

    @property
    def size(self) -> int:
        return len(self.passages)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for the query, corpus order: [n_passages] float64."""
        ids = self._index.get_tokens_ids(bm25_tokenize(query))
        if not ids:
            return np.zeros(len(self.passages), dtype=np.float64)
        return np.asarray(self._index.get_scores_from_ids(ids), dtype=np.float64)

    def score_ids(self, query: str, ids: Sequence[int]) -> list[float]:
        """BM25 scores of the passages ``ids`` (statistics of the whole corpus)."""
        return [float(s) for s in self.scores(query)[list(ids)]]

    def retrieve(self, query: str, k: int) -> list[str]:
        k = check_positive_int("k", k)
        return [self.passages[i] for i in order_by(self.scores(query).tolist())[:k]]

    def __repr__(self) -> str:
        return f"BM25Retriever({len(self.passages)} passages)"


def _cache_dir() -> str:
    return os.environ.get("GROGU_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "grogu"))


class DenseRetriever:
    """Cosine similarity of normalised sentence-transformers embeddings over ``passages`` (embedded once).

    embedder: a SentenceTransformer, an embedded alias ('all-minilm-l6-v2', the packaged model), a local
    path or a hub id (see :func:`grogu.runtime.embedders.load_embedder`). ``passages`` may be None to only score
    given (query, text) pairs. ``cache``: keep the passage embeddings in ``$GROGU_CACHE`` (default
    ``~/.cache/grogu``), keyed by the embedder and a hash of the texts, so a second run does not re-encode.
    """

    name = "dense"

    def __init__(
        self,
        passages: Iterable[Any] | None = None,
        embedder: Any = DEFAULT_EMBEDDER,
        *,
        device: str | None = None,
        batch_size: int = 64,
        cache: bool = False,
    ) -> None:
        from ..runtime.embedders import load_embedder

        self.embedder = load_embedder(embedder, device)
        self.embedder_name = embedder if isinstance(embedder, str) else type(embedder).__name__
        self.batch_size = batch_size
        self.passages = None if passages is None else as_passages(passages)
        self.matrix = None if self.passages is None else self._corpus(self.passages, cache)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised embeddings: [len(texts), dim] float32."""
        return np.asarray(
            self.embedder.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            ),
            dtype=np.float32,
        )

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

    def _need_corpus(self) -> np.ndarray:
        if self.matrix is None:
            raise ValueError("this DenseRetriever has no passages; give passages to rank them")
        return self.matrix

    def scores(self, query: str) -> np.ndarray:
        """Cosine similarity of every passage to the query, corpus order: [n_passages]."""
        return self._need_corpus() @ self.encode([query])[0]

    def pair_scores(self, queries: Sequence[str], texts: Sequence[str]) -> list[float]:
        """Cosine similarity of each (query, text) pair."""
        q, t = self.encode(queries), self.encode(texts)
        return [float(x) for x in (q * t).sum(axis=1)]

    def retrieve_batch(self, queries: Sequence[str], k: int) -> list[list[str]]:
        """Top-k passages of each query (ties in corpus order), all queries encoded at once."""
        matrix = self._need_corpus()
        k = min(check_positive_int("k", k), len(self.passages))
        if not queries:
            return []
        sims = self.encode(list(queries)) @ matrix.T
        return [[self.passages[i] for i in order_by(row.tolist())[:k]] for row in sims]

    def retrieve(self, query: str, k: int) -> list[str]:
        return self.retrieve_batch([query], k)[0]

    def __repr__(self) -> str:
        return f"DenseRetriever({len(self.passages or [])} passages)"


class LlamaIndexRetriever:
    """Adapter for any LlamaIndex ``BaseRetriever`` (e.g. ``index.as_retriever(similarity_top_k=10)``):
    the text of its nodes, best first, at most k. Configure the wrapped retriever to return >= k."""

    name = "llama_index"

    def __init__(self, retriever: Any) -> None:
        if not callable(getattr(retriever, "retrieve", None)):
            raise TypeError("expected a LlamaIndex retriever (an object with .retrieve(query))")
        self.retriever = retriever

    def records(self, query: str) -> list[dict[str, Any]]:
        """Every node retrieved, best first: its ``text``, ``id`` and ``title`` (from its metadata)."""
        out = []
        for n in self.retriever.retrieve(query):
            node = getattr(n, "node", n)
            title = (getattr(node, "metadata", None) or {}).get("title")
            out.append({"text": node.get_content(), "id": getattr(node, "node_id", None), "title": title})
        return out

    def retrieve(self, query: str, k: int) -> list[str]:
        k = check_positive_int("k", k)
        return [r["text"] for r in self.records(query)][:k]


class LangChainRetriever:
    """Adapter for any LangChain retriever (``BaseRetriever`` or any runnable ``str -> list[Document]``,
    e.g. ``vectorstore.as_retriever(search_kwargs={"k": 10})``): ``page_content`` of its documents,
    best first, at most k. Configure the wrapped retriever to return >= k."""

    name = "langchain"

    def __init__(self, retriever: Any) -> None:
        if not callable(getattr(retriever, "invoke", None)):
            raise TypeError("expected a LangChain retriever (an object with .invoke(query))")
        self.retriever = retriever

    def records(self, query: str) -> list[dict[str, Any]]:
        """Every document retrieved, best first: its ``text``, ``id`` and ``title`` (from its metadata)."""
        return [
            {"text": d.page_content, "id": getattr(d, "id", None), "title": (d.metadata or {}).get("title")}
            for d in self.retriever.invoke(query)
        ]

    def retrieve(self, query: str, k: int) -> list[str]:
        k = check_positive_int("k", k)
        return [r["text"] for r in self.records(query)][:k]


def from_framework(obj: Any, prefix: str) -> bool:
    """Whether ``obj``'s class, or one it inherits from, is defined under the package ``prefix``."""
    return any((getattr(c, "__module__", "") or "").startswith(prefix) for c in type(obj).__mro__)


def as_retriever(obj: Any) -> Retriever:
    """A :class:`Retriever` from our retrievers, any object with ``retrieve(query, k)``, a LlamaIndex
    retriever or a LangChain retriever (recognised by duck typing; neither framework is imported)."""
    if isinstance(obj, (BM25Retriever, DenseRetriever, LlamaIndexRetriever, LangChainRetriever)):
        return obj
    if from_framework(obj, "llama_index") and callable(getattr(obj, "retrieve", None)):
        return LlamaIndexRetriever(obj)
    if from_framework(obj, "langchain") and callable(getattr(obj, "invoke", None)):
        return LangChainRetriever(obj)
    if callable(getattr(obj, "retrieve", None)):
        return obj
    if callable(getattr(obj, "invoke", None)):
        return LangChainRetriever(obj)
    raise TypeError(
        f"cannot use {type(obj).__name__} as a retriever: give a grogu BM25Retriever/DenseRetriever, "
        "a LlamaIndex or LangChain retriever, or an object with retrieve(query, k) -> list[str]"
    )


def retrieve_all(retriever: Retriever, queries: Sequence[str], k: int) -> list[list[str]]:
    """Top-k passages of each query (batched when the retriever has ``retrieve_batch``)."""
    batch = getattr(retriever, "retrieve_batch", None)
    if callable(batch):
        return [list(r) for r in batch(list(queries), k)]
    out = []
    for q in queries:
        docs = retriever.retrieve(q, k)
        if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
            raise TypeError(f"{type(retriever).__name__}.retrieve must return a list of str passages")
        out.append(docs[:k])
    return out


__all__ = [
    "bm25_tokenize",
    "as_passages",
    "Retriever",
    "BM25Retriever",
    "DenseRetriever",
    "LlamaIndexRetriever",
    "LangChainRetriever",
    "as_retriever",
    "from_framework",
    "retrieve_all",
    "DEFAULT_EMBEDDER",
]
