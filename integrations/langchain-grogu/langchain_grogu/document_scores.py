"""LangChain documents in and out of grogu: the text grogu scores, and the scores written to the copies returned.

A returned document is a copy of the input with ``metadata['grogu']`` (the details of its scoring) and
``metadata['relevance_score']`` (its score in the chosen mode, where LangChain's rerankers put theirs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document

from grogu import DocumentScore
from grogu.metrics.scales import probability

#: The key of ``Document.metadata`` that receives the GROGU score and its details.
METADATA_KEY = "grogu"
#: The key of ``Document.metadata`` that receives the document's score in the chosen mode, where
#: LangChain's rerankers (langchain-cohere, ``ContextualCompressionRetriever`` examples) put theirs.
RELEVANCE_KEY = "relevance_score"


def check_documents(documents: Sequence[Document], query: str) -> list[Document]:
    """The documents as a list, after checking that they are LangChain Documents and the query a str."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, got {type(query).__name__}")
    if isinstance(documents, (str, bytes, Document)) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a sequence of langchain Documents, got {type(documents).__name__}")
    docs = list(documents)
    for i, doc in enumerate(docs):
        if not isinstance(doc, Document):
            raise TypeError(f"document {i} is a {type(doc).__name__}, not a langchain_core Document")
    return docs


def grogu_documents(docs: Sequence[Document], title_key: str | None) -> list[dict[str, Any]]:
    """LangChain documents as grogu documents: the text, and ``metadata[title_key]`` as the title the
    LLM sees (when ``title_key`` is set and the value is a non-empty str)."""
    out = []
    for doc in docs:
        title = doc.metadata.get(title_key) if title_key else None
        out.append({"text": doc.page_content, "title": title if isinstance(title, str) and title else None})
    return out


def retrieval_scores(docs: Sequence[Document], relevance_key: str | None) -> list[float]:
    """The retriever's scores from ``metadata[relevance_key]``, else the retrieval order as ranks."""
    if relevance_key is None:
        return [float(len(docs) - i) for i in range(len(docs))]
    values = [d.metadata.get(relevance_key) for d in docs]
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"document {i} has no numeric metadata[{relevance_key!r}] (relevance_key; got {v!r})")
    return [float(v) for v in values]


def scored_documents(
    docs: Sequence[Document],
    ranked: Sequence[DocumentScore],
    *,
    mode: str,
    model: str,
    score_scale: str,
    prompt: str | None = None,
) -> list[Document]:
    """Copies of the kept documents, in ``ranked`` order, with ``metadata['grogu']`` and
    ``metadata['relevance_score']`` on ``score_scale``.

    The relevance score is the chosen context's score in the context mode (shared by its documents), the
    fused score (in [0, 1]) in the fusion mode, and the document's own utility in the document and prune
    modes. A ``relevance_score`` the document had is kept in ``metadata['grogu']['previous_relevance_score']``.
    ``prompt``: which prompt the documents were scored with (``GroguScoring.prompt``).
    """
    to_probability = score_scale == "probability"
    out = []
    for rank, r in enumerate(ranked, start=1):
        info: dict[str, Any] = {"mode": mode, "rank": rank, "index": r.index, "model": model, "metric": r.metric}
        if prompt is not None:
            info["prompt"] = prompt
        utility = probability(r.metric, r.score) if to_probability else r.score
        relevance = utility if r.rank_score is None else r.rank_score
        if r.context is not None:  # context mode: the chosen context's GROGU, shared by its documents
            info["context"] = {
                "score": r.score,
                "confidence": r.confidence,
                "answer": r.answer,
                "indices": [x.index for x in ranked],
            }
            if to_probability:
                info["context"]["probability"] = relevance
            if r.gate is not None:  # the verdict on the retriever's own context: act on it (abstain, retrieve more)
                info["context"]["gate"] = r.gate.as_dict()
        else:
            info.update(
                score=r.score,
                confidence=r.confidence,
                answer=r.answer,
                answer_finished=r.answer_finished,
                n_tokens=r.n_tokens,
                n_key_tokens=r.n_key_tokens,
                variants=dict(r.variants),
            )
            if r.rank_score is not None:
                info["fused_score"] = r.rank_score
            if to_probability:
                info["probability"] = utility
        doc = docs[r.index]
        if RELEVANCE_KEY in doc.metadata:
            info["previous_relevance_score"] = doc.metadata[RELEVANCE_KEY]
        metadata = {**doc.metadata, METADATA_KEY: info, RELEVANCE_KEY: relevance}
        out.append(doc.model_copy(update={"metadata": metadata}))
    return out


def unscored_documents(docs: Sequence[Document], *, model: str, error: str) -> list[Document]:
    """Copies of every document, in input order, with ``metadata['grogu']`` saying that scoring failed."""
    info = {"score": None, "error": error, "model": model}
    return [
        d.model_copy(update={"metadata": {**d.metadata, METADATA_KEY: {**info, "index": i}}})
        for i, d in enumerate(docs)
    ]
