"""GroguCompressor: rerank and prune retrieved documents by their GROGU utility to the target LLM.

>>> from langchain_grogu import GroguCompressor
>>> compressor = GroguCompressor(model=llm, top_n=3)      # llm: a HuggingFacePipeline, or a model name
>>> docs = compressor.compress_documents(retrieved_docs, "Who wrote Hamlet?")
>>> docs[0].metadata["grogu"]["score"]

Each document is scored alone as the grounding context of the query (DESIGN.md §2.1): the target LLM
answers greedily with the document, and the score is minus the mean entropy (nats) of the answer's key
tokens, so higher means the document makes the LLM surer of its grounded answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from grogu import DEFAULT_METRIC, DocumentScore, PromptTemplate, UtilityScorer
from grogu.checks import check_alpha, check_fraction, check_positive_int, check_threshold, check_top_n
from grogu.metrics import ALPHA, TOP_K_FRAC, metric_name
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import BaseModel, ConfigDict, PrivateAttr, field_validator
from typing_extensions import override

from ._target import model_label, resolve_engine

logger = logging.getLogger(__name__)

#: The key of ``Document.metadata`` that receives the GROGU score and its details.
METADATA_KEY = "grogu"


class GroguScoring(BaseModel):
    """Options shared by :class:`GroguCompressor` and :class:`~langchain_grogu.GroguRetriever`, and the
    reranking they both do. The scorer is built (and a model given by name loaded, once per process)
    when the object is created."""

    model: Any = "smollm2-135m-instruct"
    """The target LLM that will read the documents: a model name/path/hub id, a ``grogu.Engine``, a
    ``(model, tokenizer)`` pair, a ``HuggingFacePipeline`` (its model and tokenizer are reused), a
    ``ChatHuggingFace`` over one, or a transformers text-generation pipeline."""
    top_n: int | None = 3
    """Most documents returned, best first; None keeps every document that passes ``threshold``."""
    threshold: float | None = None
    """Keep only documents whose utility is >= threshold (minus key-token entropy in nats for the
    default metric: e.g. -1.5 keeps documents whose answer key tokens have at most 1.5 nats)."""
    metric: str = DEFAULT_METRIC
    """A name from ``grogu.METRICS``: 'key_entropy' (default), 'entropy', 'ppl', 'key_ppl' (DESIGN.md
    §2.1), or a small-model variant (see ``grogu.metrics``)."""
    alpha: float = ALPHA
    """Key-token threshold on |H_grounded - H_ungrounded| in nats."""
    top_k_frac: float = TOP_K_FRAC
    """Fraction of answer tokens kept (by grounded entropy) when no token passes ``alpha``."""
    max_new_tokens: int = 64
    """Longest grounded answer generated per document."""
    template: PromptTemplate | None = None
    """Override of grogu's grounded/ungrounded prompt text."""
    answer_style: Literal["long", "short"] = "long"
    """'short': ask for the answer only and cut it at its first line/sentence (small models)."""
    title_key: str | None = None
    """Metadata key whose value is shown to the LLM as the document's title (e.g. 'title'); None shows
    the page content only."""
    device: str | None = None
    """Device for a model given by name (default: CUDA when available, else CPU)."""
    dtype: str | None = None
    """dtype for a model given by name (default: bf16 on CUDA, float32 on CPU)."""
    on_error: Literal["raise", "passthrough"] = "raise"
    """What to do when scoring fails: 'raise' the error, or 'passthrough' every input document
    unchanged in its input order with ``metadata['grogu']['error']`` set (logged as a warning).
    Documents are never dropped silently."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    # The settings are checked by grogu's own checks (grogu.checks), before pydantic's coercion, so a
    # bad value is the same error here as in grogu (bool is not a count, NaN or inf is not a threshold).
    @field_validator("top_n", mode="before")
    @classmethod
    def _check_top_n(cls, value: Any) -> int | None:
        return check_top_n(value)

    @field_validator("threshold", mode="before")
    @classmethod
    def _check_threshold(cls, value: Any) -> float | None:
        return check_threshold(value)

    @field_validator("alpha", mode="before")
    @classmethod
    def _check_alpha(cls, value: Any) -> float:
        return check_alpha(value)

    @field_validator("top_k_frac", mode="before")
    @classmethod
    def _check_top_k_frac(cls, value: Any) -> float:
        return check_fraction("top_k_frac", value)

    @field_validator("max_new_tokens", mode="before")
    @classmethod
    def _check_max_new_tokens(cls, value: Any) -> int:
        return check_positive_int("max_new_tokens", value)

    @field_validator("metric", mode="before")
    @classmethod
    def _check_metric(cls, value: Any) -> str:
        return metric_name(value)

    _scorer: UtilityScorer = PrivateAttr()
    _model_label: str = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        engine = resolve_engine(self.model, self.device, self.dtype)
        self._scorer = UtilityScorer(
            engine, metric=self.metric, alpha=self.alpha, top_k_frac=self.top_k_frac,
            max_new_tokens=self.max_new_tokens, template=self.template, answer_style=self.answer_style,
        )
        self._model_label = model_label(self.model, engine)

    @property
    def model_name(self) -> str:
        """A readable name of the target LLM (also written to ``metadata['grogu']['model']``)."""
        return self._model_label

    @property
    def scorer(self) -> UtilityScorer:
        """The :class:`grogu.UtilityScorer` used (its ``engine`` is the shared engine of the model)."""
        return self._scorer

    # ------------------------------------------------------------------ helpers
    def _check(self, documents: Sequence[Document], query: str) -> list[Document]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if isinstance(documents, (str, bytes, Document)) or not isinstance(documents, Sequence):
            raise TypeError(f"documents must be a sequence of langchain Documents, got {type(documents).__name__}")
        docs = list(documents)
        for i, doc in enumerate(docs):
            if not isinstance(doc, Document):
                raise TypeError(f"document {i} is a {type(doc).__name__}, not a langchain_core Document")
        return docs

    def _grogu_docs(self, docs: list[Document]) -> list[dict[str, Any]]:
        out = []
        for doc in docs:
            title = doc.metadata.get(self.title_key) if self.title_key else None
            out.append({"text": doc.page_content, "title": title if isinstance(title, str) and title else None})
        return out

    def _annotate(self, docs: list[Document], ranked: list[DocumentScore]) -> list[Document]:
        out = []
        for rank, r in enumerate(ranked, start=1):
            info = {
                "score": r.score, "metric": r.metric, "confidence": r.confidence, "rank": rank, "index": r.index,
                "answer": r.answer, "answer_finished": r.answer_finished, "n_tokens": r.n_tokens,
                "n_key_tokens": r.n_key_tokens, "variants": dict(r.variants), "model": self._model_label,
            }
            doc = docs[r.index]
            out.append(doc.model_copy(update={"metadata": {**doc.metadata, METADATA_KEY: info}}))
        return out

    def _passthrough(self, docs: list[Document], query: str, exc: Exception) -> list[Document]:
        message = f"{type(exc).__name__}: {exc}"
        logger.warning("grogu scoring failed for query %r; passing %d documents through unscored: %s",
                       query[:200], len(docs), message)
        info = {"score": None, "error": message, "model": self._model_label}
        return [d.model_copy(update={"metadata": {**d.metadata, METADATA_KEY: {**info, "index": i}}})
                for i, d in enumerate(docs)]

    def rerank_documents(self, documents: Sequence[Document], query: str) -> list[Document]:
        """The documents sorted by utility (ties keep the input order), cut by ``threshold`` and
        ``top_n``, as copies with ``metadata['grogu']`` added (score, metric, confidence, rank from 1,
        input index, grounded answer, token counts, all metric variants, model)."""
        docs = self._check(documents, query)
        if not docs:
            return []
        try:
            ranked = self._scorer.rerank(query, self._grogu_docs(docs), top_n=self.top_n, threshold=self.threshold)
        except Exception as exc:  # noqa: BLE001 - on_error decides
            if self.on_error == "raise":
                raise
            return self._passthrough(docs, query, exc)
        return self._annotate(docs, ranked)

    async def arerank_documents(self, documents: Sequence[Document], query: str) -> list[Document]:
        """Async :meth:`rerank_documents`: scoring runs off the event loop, and concurrent calls share
        one engine batch. Same result as the sync call."""
        docs = self._check(documents, query)
        if not docs:
            return []
        try:
            ranked = await self._scorer.arerank(query, self._grogu_docs(docs), top_n=self.top_n,
                                                threshold=self.threshold)
        except Exception as exc:  # noqa: BLE001 - on_error decides
            if self.on_error == "raise":
                raise
            return self._passthrough(docs, query, exc)
        return self._annotate(docs, ranked)


class GroguCompressor(GroguScoring, BaseDocumentCompressor):
    """Document compressor that reranks documents by their GROGU utility to the target LLM.

    Use it on its own or in ``ContextualCompressionRetriever``. Each returned document is a copy of
    the input with ``metadata['grogu']`` added; existing metadata is kept.

    Example:
        ```python
        from langchain_classic.retrievers import ContextualCompressionRetriever
        from langchain_grogu import GroguCompressor

        compressor = GroguCompressor(model=llm, top_n=3)   # llm: HuggingFacePipeline, or a model name
        retriever = ContextualCompressionRetriever(
            base_compressor=compressor, base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10})
        )
        ```
    """

    @override
    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Rerank documents by GROGU utility; keep ``top_n`` and those with score >= ``threshold``.

        Args:
            documents: The retrieved documents.
            query: The query the target LLM will answer from them.
            callbacks: Unused (scoring emits no LangChain events).

        Returns:
            Copies of the kept documents, best first, with ``metadata['grogu']`` added.
        """
        return self.rerank_documents(documents, query)

    @override
    async def acompress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Async :meth:`compress_documents`; does not block the event loop."""
        return await self.arerank_documents(documents, query)
