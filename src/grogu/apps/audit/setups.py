"""Retrieval set-ups to audit: for each query, the documents one retrieval set-up returned, best first.

A set-up comes from a JSONL file (one ``{"query": ..., "documents": [...]}`` object a line, the
documents as strings or ``{"text", "title", "id"}`` objects), or from a retriever the user already has:
a LlamaIndex retriever or index, or a LangChain retriever (:func:`from_retriever`). Documents are kept
as plain dicts ``{"key", "text", "title"}``; ``key`` is the document's id where it has one, else a hash
of its title and text, so the same document retrieved by two set-ups is one document.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from ...rerank.retrieval import LangChainRetriever, LlamaIndexRetriever, from_framework


@dataclass
class Setup:
    """One retrieval set-up: ``runs`` maps each query to its retrieved documents (best first)."""

    name: str
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def documents(self, query: str, top_n: int | None = None) -> list[dict[str, Any]]:
        """The first ``top_n`` documents retrieved for ``query`` (all of them for None)."""
        docs = self.runs[query]
        return docs if top_n is None else docs[:top_n]


def document(raw: Any, where: str = "document") -> dict[str, Any]:
    """A retrieved document as ``{"key", "text", "title"}`` from a string or a mapping with ``text``
    (or ``page_content``) and optional ``title`` and ``id``."""
    if isinstance(raw, str):
        text, title, ident = raw, None, None
    elif isinstance(raw, Mapping):
        text = raw.get("text", raw.get("page_content"))
        title, ident = raw.get("title"), raw.get("id")
    else:
        raise TypeError(f"{where} must be a string or a {{'text', 'title', 'id'}} object, got {type(raw).__name__}")
    if not isinstance(text, str):
        raise TypeError(f"{where} needs a string 'text'")
    key = str(ident) if ident is not None else hashlib.sha1(f"{title or ''}\x00{text}".encode()).hexdigest()[:12]
    return {"key": key, "text": text, "title": title if isinstance(title, str) else None}


def _json(line: str, path: str, n: int) -> Any:
    """Line ``n`` of the JSONL file ``path``, parsed; a ValueError naming the file, line and column."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{n}: not valid JSON ({e.msg}, column {e.colno})") from None


def read_setup(path: str, name: str | None = None) -> Setup:
    """A set-up from a JSONL file of ``{"query", "documents"}`` objects (name: the file's stem by default).
    A query given twice keeps its first line."""
    setup = Setup(name or os.path.splitext(os.path.basename(path))[0])
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            item = _json(line, path, n)
            if not isinstance(item, dict) or "query" not in item or "documents" not in item:
                raise ValueError(f"{path}:{n}: each line needs 'query' and 'documents'")
            if not isinstance(item["documents"], list):
                raise ValueError(f"{path}:{n}: 'documents' must be a list")
            docs = [document(d, f"{path}:{n}: document {i}") for i, d in enumerate(item["documents"])]
            setup.runs.setdefault(str(item["query"]), docs)
    if not setup.runs:
        raise ValueError(f"{path} holds no query")
    return setup


def read_queries(path: str) -> list[str]:
    """Queries from a JSONL file (``{"query"}`` objects or JSON strings) or a text file (one a line)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if path.endswith(".jsonl"):
                item = _json(line, path, n)
                if isinstance(item, dict) and "query" not in item:
                    raise ValueError(f"{path}:{n}: a query object needs 'query'")
                out.append(str(item["query"] if isinstance(item, dict) else item))
            else:
                out.append(line)
    return out


def from_retriever(name: str, retriever: Any, queries: Iterable[str], *, top_k: int | None = None) -> Setup:
    """A set-up from a LlamaIndex retriever, a LlamaIndex index (its ``as_retriever(similarity_top_k=top_k)``)
    or a LangChain retriever (``invoke``), run on each query."""
    if from_framework(retriever, "llama_index") and hasattr(retriever, "as_retriever"):
        retriever = retriever.as_retriever(**({} if top_k is None else {"similarity_top_k": top_k}))
    if from_framework(retriever, "llama_index") and hasattr(retriever, "retrieve"):
        adapter: LlamaIndexRetriever | LangChainRetriever = LlamaIndexRetriever(retriever)
    elif hasattr(retriever, "invoke"):
        adapter = LangChainRetriever(retriever)
    else:
        raise TypeError(
            f"{type(retriever).__name__} is neither a LlamaIndex retriever or index nor a LangChain "
            "retriever; write its results to a JSONL file of {'query', 'documents'} lines instead"
        )
    setup = Setup(name)
    for q in queries:
        docs = adapter.records(q)
        setup.runs[q] = [document(d) for d in (docs if top_k is None else docs[:top_k])]
    return setup


def common_queries(setups: Sequence[Setup], queries: Sequence[str] | None = None) -> list[str]:
    """The queries every set-up has run (in the order of ``queries``, else of the first set-up)."""
    if not setups:
        raise ValueError("give at least one set-up to audit")
    order = list(queries) if queries is not None else list(setups[0].runs)
    return [q for q in dict.fromkeys(order) if all(q in s.runs for s in setups)]
