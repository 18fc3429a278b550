"""GroguCompressor: rerank and prune retrieved documents by their GROGU utility to the target LLM.

>>> from langchain_grogu import GroguCompressor
>>> compressor = GroguCompressor(model=llm, top_n=3)      # llm: a HuggingFacePipeline, or a model name
>>> docs = compressor.compress_documents(retrieved_docs, "Who wrote Hamlet?")
>>> docs[0].metadata["relevance_score"], docs[0].metadata["grogu"]["score"]

Each document is scored alone as the grounding context of the query (GROGU, Hua et al.; see
``grogu.metrics``): the target LLM answers greedily with the document, and the score is minus the mean
entropy (nats) of the answer's key tokens, so higher means the document makes the LLM surer of its
grounded answer. ``metadata["relevance_score"]`` is the document's score in the chosen mode (where
LangChain's rerankers put theirs); ``score_scale="probability"`` puts it, and ``threshold``, in [0, 1]
(:mod:`grogu.scales`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Literal

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from typing_extensions import override

from grogu import DocumentScore, EngineConfig, PromptTemplate
from grogu.checks import check_alpha, check_fraction, check_positive_int, check_threshold, check_top_n
from grogu.metrics import ALPHA, TOP_K_FRAC, metric_name
from grogu.models import DEFAULT_MODEL
from grogu.rerank import ModeSettings, split_settings
from grogu.scales import check_score_scale, probability, utility_threshold
from grogu.scorer_factory import Scorer, build_scorer, remote_target

from . import _tracing
from ._target import model_label, resolve_engine
from .prompts import template_from_langchain

#: each scalar field's check (grogu's own, so a bad value is the same error here as in grogu)
_FIELD_CHECKS: dict[str, Callable[[Any], Any]] = {
    "top_n": check_top_n,
    "threshold": check_threshold,
    "alpha": check_alpha,
    "metric": lambda value: None if value is None else metric_name(value),
    "top_k_frac": functools.partial(check_fraction, "top_k_frac"),
    "score_scale": check_score_scale,
    "max_new_tokens": functools.partial(check_positive_int, "max_new_tokens"),
    "batch_size": lambda value: None if value is None else check_positive_int("batch_size", value),
}

logger = logging.getLogger(__name__)

#: The key of ``Document.metadata`` that receives the GROGU score and its details.
METADATA_KEY = "grogu"
#: The key of ``Document.metadata`` that receives the document's score in the chosen mode, where
#: LangChain's rerankers (langchain-cohere, ``ContextualCompressionRetriever`` examples) put theirs.
RELEVANCE_KEY = "relevance_score"
_DEFAULT = object()


def grogu_documents(docs: Sequence[Document], title_key: str | None) -> list[dict[str, Any]]:
    """LangChain documents as grogu documents: the text, and ``metadata[title_key]`` as the title the
    LLM sees (when ``title_key`` is set and the value is a non-empty str)."""
    out = []
    for doc in docs:
        title = doc.metadata.get(title_key) if title_key else None
        out.append({"text": doc.page_content, "title": title if isinstance(title, str) and title else None})
    return out


class GroguScoring(BaseModel):
    """Options shared by :class:`GroguCompressor` and :class:`~langchain_grogu.GroguRetriever`, and the
    reranking they both do. The scorer is built (and a model given by name loaded, once per process)
    when the object is created."""

    model: Any = DEFAULT_MODEL
    """The target LLM that will read the documents: a model name/path/hub id, a ``grogu.Engine``, a
    ``(model, tokenizer)`` pair, a ``HuggingFacePipeline`` (its model and tokenizer are reused), a
    ``ChatHuggingFace`` over one, a transformers text-generation pipeline, a ``ChatOpenAI`` / ``OpenAI``
    on an OpenAI-compatible server or a ``grogu.ServerTarget`` (the OpenAI API and Ollama: grounded-only,
    ``metric="entropy"`` or ``"ppl"``), or the shared scoring service: its URL (``"http://host:8000"``,
    see ``grogu serve``) or a ``grogu.RemoteScorer``."""
    top_n: int | None = 3
    """Most documents returned, best first; None keeps every document that passes ``threshold``."""
    threshold: float | None = None
    """Keep only documents whose utility is >= threshold (minus key-token entropy in nats for the
    default metric: e.g. -1.5 keeps documents whose answer key tokens have at most 1.5 nats); with
    ``score_scale='probability'`` a number in [0, 1] on that scale."""
    metric: str | None = None
    """A name from ``grogu.METRICS``: 'key_entropy', 'entropy', 'ppl', 'key_ppl' (the GROGU paper's four
    variants), or a small-model variant (see ``grogu.metrics``). None (default): 'key_entropy', or 'ppl'
    for an LLM behind a chat API (which cannot teacher-force); after construction, the metric used."""
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
    settings: ModeSettings = Field(default_factory=ModeSettings)
    """How utility becomes the documents the LLM reads (``grogu.ModeSettings``). Its settings can also be
    given by name, e.g. ``GroguCompressor(mode="fusion", weight=0.4)``: ``mode`` 'context' (default):
    candidate contexts of ``top_n`` documents from the retrieval order (by default, ``family``
    'swap_orders': the retriever's own top-n, the top-n with its last document swapped for each of the
    next ``swaps`` ones, and each of those reversed; ``family`` names other candidate sets), each scored
    as one context; the best under ``rule`` (by default the LLM's confidence in its answer plus the share of
    the answer's words found in the candidate's documents) is kept, in its own order, if it beats the
    retriever's own by ``margin``. 'document': each document scored alone and sorted by utility (the
    paper's per-document GROGU). 'fusion': utility rank fused with retrieval rank (``weight`` on
    utility). 'prune': documents that leave the LLM less sure than no document are dropped. Which to
    pick: the package README."""
    qa_prompt: Any = None
    """The chain's own QA prompt (a LangChain prompt template with ``context_key`` and ``question_key``
    variables): documents are scored with what the LLM will actually read (``template_from_langchain``).
    In the context mode the answer generated while scoring (``metadata['grogu']['context']['answer']``)
    is then the answer the chain's LLM gives for the kept documents."""
    context_key: str = "context"
    """Variable of ``qa_prompt`` that receives the documents (joined by blank lines)."""
    question_key: str = "question"
    """Variable of ``qa_prompt`` that receives the question."""
    relevance_key: str | None = None
    """Metadata key holding the retriever's relevance score (fusion); None: the retrieval order."""
    on_error: Literal["raise", "passthrough"] = "raise"
    """What to do when scoring fails: 'raise' the error, or 'passthrough' every input document
    unchanged in its input order with ``metadata['grogu']['error']`` set (logged as a warning).
    Documents are never dropped silently."""
    score_scale: Literal["utility", "probability"] = "utility"
    """The scale of ``metadata['relevance_score']`` and of ``threshold``. 'utility' (default): grogu's
    utility (minus key-token entropy in nats for the default metric; unbounded). 'probability': the
    utility mapped to [0, 1] in the same order (``grogu.scales``: exp(-entropy) for the entropy
    metrics, 1/perplexity for the PPL ones), so rankings are unchanged and ``threshold`` is a number in
    [0, 1] (e.g. 0.3 keeps documents whose answer key tokens average at most ln(1/0.3) = 1.2 nats).
    ``metadata['grogu']['score']`` stays the utility; ``metadata['grogu']['probability']`` is added."""
    batch_size: int | None = None
    """Most prompts the engine runs in one forward pass (``EngineConfig.max_batch_size``; default 32 on
    CPU, 64 on GPU): lower it to bound memory. Sets the process-wide engine of the model, shared by
    every component scoring with it. Not for the grogu service (it chooses its own)."""
    engine_config: EngineConfig | None = None
    """The engine's whole configuration (``grogu.EngineConfig``: ``max_batch_tokens``,
    ``logits_budget_mb`` bound the memory of a forward pass), in place of ``batch_size``."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    # The settings are checked by grogu's own checks (grogu.checks), before pydantic's coercion, so a
    # bad value is the same error here as in grogu (bool is not a count, NaN or inf is not a threshold).
    @model_validator(mode="before")
    @classmethod
    def _gather_settings(cls, data: Any) -> Any:
        """The rerank settings given by name (``mode``, ``weight``, ...) folded into ``settings``,
        checked once by ``grogu.ModeSettings``."""
        if not isinstance(data, dict):
            return data
        named, rest = split_settings(data)
        if named or "settings" in rest:
            rest["settings"] = ModeSettings.build(rest.get("settings"), **named)
        return rest

    @field_validator(*_FIELD_CHECKS, mode="before")
    @classmethod
    def _check_field(cls, value: Any, info: ValidationInfo) -> Any:
        return _FIELD_CHECKS[info.field_name](value)

    _scorer: Scorer = PrivateAttr()
    _model_label: str = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self.settings.check_threshold(self.threshold)
        template = self.template
        if self.qa_prompt is not None:
            if template is not None:
                raise ValueError("give template (grogu's prompt text) or qa_prompt (the chain's prompt), not both")
            llm = None if remote_target(self.model) is not None else self.model  # a service: chat messages
            template = template_from_langchain(
                self.qa_prompt, llm, context_key=self.context_key, question_key=self.question_key
            )
        options = dict(
            metric=self.metric,
            alpha=self.alpha,
            top_k_frac=self.top_k_frac,
            max_new_tokens=self.max_new_tokens,
            template=template,
            answer_style=self.answer_style,
        )
        # a service (documents' metadata stay here), or the model / server run for this process
        self._scorer, self._model_label = build_scorer(
            self.model,
            resolve_engine=resolve_engine,
            model_label=model_label,
            device=self.device,
            dtype=self.dtype,
            batch_size=self.batch_size,
            engine_config=self.engine_config,
            **options,
        )
        self.metric = self._scorer.metric  # None: the target's default
        if self.score_scale == "probability":
            utility_threshold(self.metric, self.threshold)  # a ValueError unless in [0, 1]

    @property
    def mode(self) -> str:
        """The rerank mode (``self.settings.mode``)."""
        return self.settings.mode

    @property
    def model_name(self) -> str:
        """A readable name of the target LLM (also written to ``metadata['grogu']['model']``)."""
        return self._model_label

    @property
    def scorer(self) -> Scorer:
        """The scorer used: a :class:`grogu.UtilityScorer` (its ``engine`` is the shared engine of the model,
        or the ServerTarget of a served LLM) or a :class:`grogu.RemoteScorer` (the grogu service)."""
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
        return grogu_documents(docs, self.title_key)

    def _rerank_kwargs(self, docs: list[Document], top_n: int | None) -> dict[str, Any]:
        threshold = self.threshold
        if self.score_scale == "probability":  # the utility threshold keeping probability >= threshold
            threshold = utility_threshold(self.metric, threshold)
        return {"top_n": top_n, "threshold": threshold, "settings": self.settings, "relevance": self._relevance(docs)}

    def _relevance(self, docs: list[Document]) -> list[float]:
        """The retriever's scores from ``relevance_key``, else the retrieval order as ranks."""
        if self.relevance_key is None:
            return [float(len(docs) - i) for i in range(len(docs))]
        values = [d.metadata.get(self.relevance_key) for d in docs]
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ValueError(
                    f"document {i} has no numeric metadata[{self.relevance_key!r}] (relevance_key; got {v!r})"
                )
        return [float(v) for v in values]

    def _scaled(self, metric: str, utility: float) -> float:
        """A utility on ``score_scale``."""
        return probability(metric, utility) if self.score_scale == "probability" else utility

    def _annotate(self, docs: list[Document], ranked: list[DocumentScore]) -> list[Document]:
        """Copies of the kept documents with ``metadata['grogu']`` and ``metadata['relevance_score']``:
        the chosen context's score in the context mode (shared by its documents), the fused score
        (in [0, 1]) in the fusion mode, the document's own utility in the document and prune modes;
        on ``score_scale``. A ``relevance_score`` the document had is kept in
        ``metadata['grogu']['previous_relevance_score']``."""
        out = []
        for rank, r in enumerate(ranked, start=1):
            info: dict[str, Any] = {
                "mode": self.mode,
                "rank": rank,
                "index": r.index,
                "model": self._model_label,
                "metric": r.metric,
            }
            relevance = self._scaled(r.metric, r.score) if r.rank_score is None else r.rank_score
            if r.context is not None:  # context mode: the chosen context's GROGU, shared by its documents
                info["context"] = {
                    "score": r.score,
                    "confidence": r.confidence,
                    "answer": r.answer,
                    "indices": [x.index for x in ranked],
                }
                if self.score_scale == "probability":
                    info["context"]["probability"] = relevance
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
                if self.score_scale == "probability":
                    info["probability"] = probability(r.metric, r.score)
            doc = docs[r.index]
            if RELEVANCE_KEY in doc.metadata:
                info["previous_relevance_score"] = doc.metadata[RELEVANCE_KEY]
            metadata = {**doc.metadata, METADATA_KEY: info, RELEVANCE_KEY: relevance}
            out.append(doc.model_copy(update={"metadata": metadata}))
        return out

    def _top_n(self, top_n: Any) -> int | None:
        """A per-call ``top_n`` (``invoke(query, top_n=1)``), else the configured one."""
        if top_n is _DEFAULT:
            return self.top_n
        if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
            raise ValueError(f"top_n must be a positive int or None, got {top_n!r}")
        return top_n

    def _passthrough(self, docs: list[Document], query: str, exc: Exception) -> list[Document]:
        message = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "grogu scoring failed for query %r; passing %d documents through unscored: %s",
            query[:200],
            len(docs),
            message,
        )
        info = {"score": None, "error": message, "model": self._model_label}
        return [
            d.model_copy(update={"metadata": {**d.metadata, METADATA_KEY: {**info, "index": i}}})
            for i, d in enumerate(docs)
        ]

    def rerank_documents(
        self, documents: Sequence[Document], query: str, top_n: Any = _DEFAULT, callbacks: Any = None
    ) -> list[Document]:
        """The documents sorted by utility (ties keep the input order), cut by ``threshold`` and
        ``top_n``, as copies with ``metadata['grogu']`` added (score, metric, confidence, rank from 1,
        input index, grounded answer, token counts, all metric variants, model). ``callbacks``: the
        run's callback or run manager, whose traced span (OpenInference) parents the ``grogu.rerank``
        OpenTelemetry span (``grogu.tracing``)."""
        docs = self._check(documents, query)
        top_n = self._top_n(top_n)
        if not docs:
            return []
        with self._reranking(docs, query, top_n, callbacks) as run:
            run.ranked = self._scorer.rerank(query, self._grogu_docs(docs), **self._rerank_kwargs(docs, top_n))
        return run.out

    async def arerank_documents(
        self, documents: Sequence[Document], query: str, top_n: Any = _DEFAULT, callbacks: Any = None
    ) -> list[Document]:
        """Async :meth:`rerank_documents`: scoring runs off the event loop, and concurrent calls share
        one engine batch. Same result as the sync call."""
        docs = self._check(documents, query)
        top_n = self._top_n(top_n)
        if not docs:
            return []
        with self._reranking(docs, query, top_n, callbacks) as run:
            run.ranked = await self._scorer.arerank(query, self._grogu_docs(docs), **self._rerank_kwargs(docs, top_n))
        return run.out

    @contextmanager
    def _reranking(self, docs: list[Document], query: str, top_n: int | None, callbacks: Any) -> Iterator[Any]:
        """One rerank inside its ``grogu.rerank`` span: the body sets ``run.ranked``; ``run.out`` is then
        the annotated documents, or, when scoring failed and ``on_error`` is 'passthrough', every input."""
        run = SimpleNamespace(ranked=None, out=None)
        with _tracing.rerank_span(self, docs, query, top_n, callbacks) as span:
            try:
                yield run
            except Exception as exc:  # noqa: BLE001 - on_error decides
                if self.on_error == "raise":
                    raise
                span.fail(exc)
                run.out = self._passthrough(docs, query, exc)
            else:
                run.out = self._annotate(docs, run.ranked)
            _tracing.finish(span, self, run.out, METADATA_KEY)


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
            callbacks: The run's callbacks: no LangChain event is emitted; a tracer's span of the run
                (OpenInference) parents grogu's ``grogu.rerank`` OpenTelemetry span.

        Returns:
            Copies of the kept documents, best first, with ``metadata['grogu']`` added.
        """
        return self.rerank_documents(documents, query, callbacks=callbacks)

    @override
    async def acompress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Async :meth:`compress_documents`; does not block the event loop."""
        return await self.arerank_documents(documents, query, callbacks=callbacks)
