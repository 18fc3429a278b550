"""GroguScoring: the settings and the reranking that GroguCompressor and GroguRetriever share.

Each setting is declared once, as a typed pydantic field with grogu's own check (``grogu.core.checks``), so a
bad value is the same error here as in grogu; those LlamaIndex's GroguRerank shares, in
``grogu.apps.integration_settings``. The rerank settings are one ``grogu.ModeSettings``; each of
them may also be given by name (``mode="fusion", weight=0.4``), as ``UtilityScorer.rerank`` takes them.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Annotated, Any, Literal

from langchain_core.documents import Document
from langchain_core.prompts.chat import BaseChatPromptTemplate
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from grogu.apps.integration_settings import SharedSettings, checked
from grogu.core.checks import check_alpha, check_fraction, check_top_n
from grogu.core.prompts import RAG_QA_TEMPLATE
from grogu.metrics import ALPHA, TOP_K_FRAC
from grogu.metrics.scales import check_score_scale, utility_threshold
from grogu.rerank import ModeSettings, split_settings
from grogu.rerank.factory import Scorer, build_scorer, remote_target
from grogu.rerank.scorer import DEFAULT_MAX_NEW_TOKENS
from grogu.rerank.tuned import TunedSettings, build_settings
from grogu.runtime.models import DEFAULT_MODEL

from . import spans
from .document_scores import (
    METADATA_KEY,
    check_documents,
    grogu_documents,
    retrieval_scores,
    scored_documents,
    unscored_documents,
)
from .prompts import template_from_langchain
from .target import answer_budget, model_label, resolve_engine

logger = logging.getLogger(__name__)


class GroguScoring(SharedSettings):
    """Settings shared by :class:`~langchain_grogu.GroguCompressor` and :class:`~langchain_grogu.GroguRetriever`,
    and the reranking they both do. The settings LlamaIndex's GroguRerank has too (``top_n``, ``threshold``,
    ``metric``, ``max_new_tokens``, ``template``, ``answer_style``, ``score_scale``, ``on_error``, ``device``,
    ``dtype``, ``batch_size``, ``engine_config``) are declared once, in ``grogu.apps.integration_settings``. Without
    ``qa_prompt``, the context mode scores with ``grogu.core.prompts.RAG_QA_TEMPLATE``. The scorer is built (a model
    given by name loaded once per process) when the object is created. The package README has each setting."""

    model: Any = DEFAULT_MODEL
    """The target LLM that reads the documents: a name, a loaded model, a LangChain LLM, a server or a service URL."""
    alpha: Annotated[float, checked(check_alpha)] = ALPHA
    """Key-token threshold on |H_grounded - H_ungrounded| in nats."""
    top_k_frac: Annotated[float, checked(check_fraction, "top_k_frac")] = TOP_K_FRAC
    """Fraction of answer tokens kept (by grounded entropy) when no token passes ``alpha``."""
    title_key: str | None = None
    """Metadata key whose value the LLM sees as the document's title; None shows the page content only."""
    settings: ModeSettings = Field(default_factory=ModeSettings)
    """The rerank settings (``grogu.ModeSettings``: ``mode``, ``weight``, ...); each may also be given by name."""
    qa_prompt: Any = None
    """The chain's own QA prompt: documents are scored on what the LLM reads (``template_from_langchain``)."""
    context_key: str = "context"
    """Variable of ``qa_prompt`` that receives the documents (joined by blank lines)."""
    question_key: str = "question"
    """Variable of ``qa_prompt`` that receives the question."""
    relevance_key: str | None = None
    """Metadata key holding the retriever's relevance score (fusion); None: the retrieval order."""
    score_scale: Annotated[Literal["utility", "probability"], checked(check_score_scale)] = "probability"
    """Scale of ``metadata['relevance_score']`` and of ``threshold``: 'probability' (default: in [0, 1], as
    LangChain's rerankers give it; the utility stays in ``metadata['grogu']``) or 'utility' (unbounded)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _gather_settings(cls, data: Any) -> Any:
        """The rerank settings given by name (``mode``, ``weight``, ...) folded into ``settings``,
        checked once by ``grogu.ModeSettings``."""
        if not isinstance(data, dict):
            return data
        named, rest = split_settings(data)
        if named or "settings" in rest:
            rest["settings"] = build_settings(rest.get("settings"), **named)
        return rest

    _scorer: Scorer = PrivateAttr()
    _model_label: str = PrivateAttr()
    _prompt: str = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        self.settings.check_threshold(self.threshold)
        template, self._prompt = self.template, "template" if self.template is not None else "grogu"
        if self.qa_prompt is None and template is None and self.mode == "context":
            # the prompt the gate was tuned on (LlamaIndex's default QA prompt), not grogu's own long one
            template, self._prompt = RAG_QA_TEMPLATE, "rag_qa"
            warnings.warn(
                f"{type(self).__name__} without qa_prompt scores the documents with LlamaIndex's QA prompt "
                "(grogu.core.prompts.RAG_QA_TEMPLATE), not the prompt your chain sends: pass qa_prompt=<the "
                "chain's prompt> (and use as_qa_chain()) to score what your LLM reads",
                UserWarning,
                stacklevel=3,
            )
        if self.qa_prompt is not None:
            self._prompt = "qa_prompt"
            if template is not None:
                raise ValueError("give template (grogu's prompt text) or qa_prompt (the chain's prompt), not both")
            # a service, or a chat prompt for a model given by name: its messages, through the chat template
            chat = isinstance(self.qa_prompt, BaseChatPromptTemplate) and isinstance(self.model, str)
            llm = None if chat or remote_target(self.model) is not None else self.model
            template = template_from_langchain(
                self.qa_prompt, llm, context_key=self.context_key, question_key=self.question_key
            )
            if self.max_new_tokens is None:  # the answer the chain's LLM gives, so as_qa_chain() can reuse it
                self.max_new_tokens = answer_budget(self.model)
        if self.max_new_tokens is None:
            self.max_new_tokens = DEFAULT_MAX_NEW_TOKENS[self.answer_style]
        # a service (documents' metadata stay here), or the model / server run for this process
        self._scorer, self._model_label = build_scorer(
            self.model,
            self,
            resolve_engine=resolve_engine,
            model_label=model_label,
            template=template,
            max_new_tokens=self.max_new_tokens,
            alpha=self.alpha,
            top_k_frac=self.top_k_frac,
        )
        self.metric = self._scorer.metric  # None: the target's default
        if self.score_scale == "probability":
            utility_threshold(self.metric, self.threshold)  # a ValueError unless in [0, 1]

    @property
    def prompt(self) -> str:
        """Which prompt the documents were scored with (also ``metadata['grogu']['prompt']``): 'qa_prompt'
        (the chain's), 'rag_qa' (``grogu.core.prompts.RAG_QA_TEMPLATE``), 'template' (the one given) or 'grogu'."""
        return self._prompt

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

    def tune(self, examples: Any, out: str | os.PathLike | None = None, **kwargs: Any) -> TunedSettings:
        """Fit the rerank settings to this object's LLM, QA prompt and ``top_n`` (``grogu.tune``).

        ``examples``: labelled questions, a JSONL path or a list of dicts with ``question``, ``answers`` and
        ``documents`` (the retriever's order). The LLM answers them with the prompt the documents are scored
        with (``self.scorer.template``) and with ``max_new_tokens``. So the result fits this object exactly.
        ``out``: a folder for ``settings.json``, the report and the records (None: nothing is written).
        ``kwargs`` go to ``grogu.tune`` (``folds``, ``judge``, ``max_cost``, ``progress``...).
        Returns the ``TunedSettings``. Use them with ``settings=`` (or the file: ``settings="OUT/settings.json"``).
        A grogu service cannot be tuned from here (ValueError): tune where the model runs.
        """
        from grogu.apps.tune import tune

        target = getattr(self.scorer, "target", None)
        if target is None:
            raise ValueError(
                f"{type(self).__name__} scores through a grogu service: run grogu.tune where the model runs"
            )
        return tune(
            examples,
            model=target,
            qa_prompt=self.scorer.template,
            top_n=self.top_n,
            out=out,
            max_new_tokens=self.max_new_tokens,
            **kwargs,
        )

    def call_top_n(self, options: dict[str, Any]) -> int | None:
        """The ``top_n`` of one call: ``options['top_n']`` when given (taken out of ``options`` and checked,
        as ``invoke(query, top_n=1)`` passes it), else the ``top_n`` setting."""
        return check_top_n(options.pop("top_n")) if "top_n" in options else self.top_n

    def rerank_documents(
        self, documents: Sequence[Document], query: str, top_n: int | None, callbacks: Any = None
    ) -> list[Document]:
        """The documents chosen by the rerank mode, cut by ``threshold`` and ``top_n``, best first, as copies
        with ``metadata['grogu']`` and ``metadata['relevance_score']`` (:mod:`langchain_grogu.document_scores`).
        ``callbacks``: the run's callback or run manager, whose traced span (OpenInference) parents the
        ``grogu.rerank`` OpenTelemetry span (``grogu.observe.tracing``)."""
        docs = check_documents(documents, query)
        if not docs:
            return []
        with self._reranking(docs, query, top_n, callbacks) as run:
            run.ranked = self._scorer.rerank(
                query, grogu_documents(docs, self.title_key), **self._rerank_kwargs(docs, top_n)
            )
        return run.out

    async def arerank_documents(
        self, documents: Sequence[Document], query: str, top_n: int | None, callbacks: Any = None
    ) -> list[Document]:
        """Async :meth:`rerank_documents`: scoring runs off the event loop, and concurrent calls share
        one engine batch. Same result as the sync call."""
        docs = check_documents(documents, query)
        if not docs:
            return []
        with self._reranking(docs, query, top_n, callbacks) as run:
            run.ranked = await self._scorer.arerank(
                query, grogu_documents(docs, self.title_key), **self._rerank_kwargs(docs, top_n)
            )
        return run.out

    def _rerank_kwargs(self, docs: list[Document], top_n: int | None) -> dict[str, Any]:
        threshold = self.threshold
        if self.score_scale == "probability":  # the utility threshold keeping probability >= threshold
            threshold = utility_threshold(self.metric, threshold)
        relevance = retrieval_scores(docs, self.relevance_key)
        return {"top_n": top_n, "threshold": threshold, "settings": self.settings, "relevance": relevance}

    @contextmanager
    def _reranking(self, docs: list[Document], query: str, top_n: int | None, callbacks: Any) -> Iterator[Any]:
        """One rerank inside its ``grogu.rerank`` span: the body sets ``run.ranked``; ``run.out`` is then
        the scored documents, or, when scoring failed and ``on_error`` is 'passthrough', every input."""
        run = SimpleNamespace(ranked=None, out=None)
        with spans.rerank_span(self, docs, query, top_n, callbacks) as span:
            try:
                yield run
            except Exception as exc:  # noqa: BLE001 - on_error decides
                if self.on_error == "raise":
                    raise
                span.fail(exc)
                message = f"{type(exc).__name__}: {exc}"
                logger.warning(
                    "grogu scoring failed for query %r; passing %d documents through unscored: %s",
                    query[:200],
                    len(docs),
                    message,
                )
                run.out = unscored_documents(docs, model=self._model_label, error=message)
            else:
                run.out = scored_documents(
                    docs,
                    run.ranked,
                    mode=self.mode,
                    model=self._model_label,
                    score_scale=self.score_scale,
                    prompt=self._prompt,
                )
            spans.finish(span, self, run.out, METADATA_KEY)
