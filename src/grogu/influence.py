"""Influence Score (DocImpact): how much each document of a context shaped the answer.

With k documents, G(.) the greedy answer of the target LLM and F a sentence-embedding model:
IS_i = cos(F(G(i)), F(G(1..k))) - cos(F(G(1..k without i)), F(G(1..k))).
G(1..k) is the full-context answer, or the answer the pipeline actually gave when passed in; then
2k (else 2k + 1) generations: every leave-one-out and every single-document context, all in one
batched engine call. With k = 1 the leave-one-out context is empty: the query alone.
Higher = more influence; IS_i lies in [-2, 2].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .batching import Coalescer
from .engine import get_engine
from .models import EMBEDDED_EMBEDDERS, embedded_embedder_path
from .prompts import Document, PromptBuilder, PromptTemplate
from .scorer import check_documents, check_query


@dataclass(kw_only=True)
class InfluenceResult:
    """Per-document Influence Scores (input order) and the answers they come from."""

    scores: list[float]
    answer: str
    leave_one_out_answers: list[str]
    single_answers: list[str]
    model: str
    embedder: str


def influence_scores(full: torch.Tensor, leave_one_out: torch.Tensor, single: torch.Tensor) -> list[float]:
    """IS_i from embeddings: full [d], leave_one_out [k, d], single [k, d] (any scale; cosines are used)."""
    full = torch.nn.functional.normalize(full.float(), dim=-1)
    loo = torch.nn.functional.normalize(leave_one_out.float(), dim=-1)
    one = torch.nn.functional.normalize(single.float(), dim=-1)
    return (one @ full - loo @ full).tolist()


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
        raise ValueError(f"Could not load the sentence-transformers model {embedder!r} (tried {path!r}; "
                         f"embedded aliases: {sorted(EMBEDDED_EMBEDDERS)}): {exc}") from exc


def _model_path(embedder: Any) -> str:
    try:
        return str(embedder[0].auto_model.config._name_or_path)
    except Exception:  # noqa: BLE001 - a custom module stack: fall back to the class name
        return type(embedder).__name__


class InfluenceScorer:
    """Influence Score of each document of a context for one target LLM.

    Args:
        model: a grogu Engine, a model name/path/hub id, or a loaded (model, tokenizer) pair.
        embedder: sentence-transformers model (default: the packaged all-MiniLM-L6-v2).
        max_new_tokens: longest answer generated per context (default 64).
        template: prompt text override (:class:`~grogu.prompts.PromptTemplate`).
    """

    def __init__(self, model: Any = "smollm2-135m-instruct", *, embedder: Any = "all-minilm-l6-v2",
                 max_new_tokens: int = 64, template: PromptTemplate | None = None,
                 device: str | None = None, dtype: str | None = None) -> None:
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        self.engine = get_engine(model, device=device, dtype=dtype)
        self.embedder = load_embedder(embedder, device=device)
        self.embedder_name = embedder if isinstance(embedder, str) else _model_path(self.embedder)
        self.max_new_tokens = max_new_tokens
        self.prompts = PromptBuilder(self.engine.tokenizer, self.engine.max_context_tokens, max_new_tokens, template)
        self._coalescer = Coalescer(self._run_jobs)

    def _prompt(self, query: str, docs: list[Document]) -> list[int]:
        return self.prompts.grounded_ids(query, docs) if docs else self.prompts.ungrounded_ids(query)

    def _run_jobs(self, jobs: list[tuple[str, list[Document], str | None]]) -> list[tuple[list[float], str, list[str], list[str]]]:
        """All generations of many (query, documents, answer-or-None) jobs in one engine call."""
        prompts: list[list[int]] = []
        for query, docs, answer in jobs:
            k = len(docs)
            if answer is None:
                prompts.append(self._prompt(query, docs))
            prompts += [self._prompt(query, docs[:i] + docs[i + 1:]) for i in range(k)]
            prompts += [self._prompt(query, [d]) for d in docs]
        texts = iter(g.text for g in self.engine.generate(prompts, self.max_new_tokens))
        answers = []
        for query, docs, answer in jobs:
            full = answer if answer is not None else next(texts)
            loo = [next(texts) for _ in docs]
            single = [next(texts) for _ in docs]
            answers.append((full, loo, single))
        flat = [t for full, loo, single in answers for t in [full, *loo, *single]]
        emb = self.embedder.encode(flat, convert_to_tensor=True, show_progress_bar=False).cpu() if flat else None
        out, start = [], 0
        for full, loo, single in answers:
            k = len(loo)
            block = emb[start:start + 1 + 2 * k]
            start += 1 + 2 * k
            out.append((influence_scores(block[0], block[1:1 + k], block[1 + k:]), full, loo, single))
        return out

    def _job(self, query: str, documents: Sequence[Any], answer: str | None):
        query, docs = check_query(query), check_documents(documents)
        if answer is not None and not isinstance(answer, str):
            raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
        return (query, docs, answer)

    def _result(self, raw) -> InfluenceResult:
        scores, full, loo, single = raw
        return InfluenceResult(scores=scores, answer=full, leave_one_out_answers=loo, single_answers=single,
                               model=str(self.engine.model_name), embedder=str(self.embedder_name))

    def score(self, query: str, documents: Sequence[Any], answer: str | None = None) -> InfluenceResult:
        """Influence Score of each document for the answer to ``query`` (generated from all documents
        when ``answer`` is None). No documents give an empty result."""
        return self._result(self._run_jobs([self._job(query, documents, answer)])[0])

    def score_batch(self, items: Sequence[tuple[str, Sequence[Any], str | None]]) -> list[InfluenceResult]:
        """Influence Scores of many (query, documents, answer-or-None) triples in one engine call."""
        return [self._result(r) for r in self._run_jobs([self._job(*item) for item in items])]

    async def ascore(self, query: str, documents: Sequence[Any], answer: str | None = None) -> InfluenceResult:
        """Async :meth:`score`: runs off the event loop, batched with concurrent requests."""
        return self._result((await self._coalescer.run([self._job(query, documents, answer)]))[0])
