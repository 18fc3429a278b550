"""Sentence-embedding models: loading them, and the query-document relevance they give.

Influence Score compares answers by their embeddings. The retriever-free API (bare Python, the command
line) fuses GROGU utility with the relevance an embedder gives. Both load through :func:`load_embedder`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import torch

from .models import EMBEDDED_EMBEDDERS, embedded_embedder_path


def load_embedder(embedder: Any, device: str | torch.device | None = None):
    """A SentenceTransformer from an instance, an embedded alias ('all-minilm-l6-v2', the packaged
    model), a local path or a hub id."""
    from sentence_transformers import SentenceTransformer

    if isinstance(embedder, SentenceTransformer):
        return embedder
    if not isinstance(embedder, str):
        raise TypeError(f"embedder must be a SentenceTransformer, a name or a path, got {type(embedder).__name__}")
    path = embedded_embedder_path(embedder.lower()) if embedder.lower() in EMBEDDED_EMBEDDERS else embedder
    try:
        return SentenceTransformer(path, device=str(device) if device is not None else None)
    except Exception as exc:
        raise ValueError(
            f"Could not load the sentence-transformers model {embedder!r} (tried {path!r}; "
            f"embedded aliases: {sorted(EMBEDDED_EMBEDDERS)}): {exc}"
        ) from exc


def embedder_name(embedder: Any) -> str:
    """The name or path a loaded embedder came from (its class name for a custom module stack)."""
    try:
        return str(embedder[0].auto_model.config._name_or_path)
    except Exception:  # noqa: BLE001 - a custom module stack: fall back to the class name
        return type(embedder).__name__


@lru_cache(maxsize=2)
def shared_embedder(name: str) -> Any:
    """One CPU instance of the embedder ``name`` per process (two at most are kept)."""
    return load_embedder(name, device="cpu")


def relevance_scores(query: str, texts: Sequence[str], embedder: str = "all-minilm-l6-v2") -> list[float]:
    """Cosine similarity of the query and each text under a sentence-transformers model (the packaged
    all-MiniLM-L6-v2 by default): the relevance the retriever-free API (bare Python, CLI) fuses with."""
    if not texts:
        return []
    model = shared_embedder(embedder)
    vectors = model.encode([query, *texts], normalize_embeddings=True, convert_to_numpy=True)
    return [float(v @ vectors[0]) for v in vectors[1:]]
