"""The client of the GROGU utility routes: :class:`RemoteScorer`, :class:`grogu.UtilityScorer` served by
``grogu serve`` (see :mod:`grogu.rerank.remote.client`)."""

from __future__ import annotations

from typing import Any, Sequence

from ...core.aio import blocking
from ...core.checks import (
    check_alpha,
    check_choice,
    check_document_list,
    check_fraction,
    check_pairs,
    check_positive_int,
    check_query,
    check_relevance,
    check_threshold,
    check_top_n,
)
from ...core.prompts import SHORT_ANSWER_TEMPLATE, PromptTemplate
from ...metrics import defaults as metrics
from ..arguments import RerankCall, takes_rerank_arguments
from ..settings import ANSWER_STYLES, DEFAULT_MAX_NEW_TOKENS, ModeSettings
from ..tuned import call_settings
from . import schema, wire
from .client_base import RemoteClient, check_prompt_template


class RemoteScorer(RemoteClient):
    """:class:`grogu.UtilityScorer` served by ``grogu serve`` at ``url``: same methods, same results.

    Args:
        url: the service (``http://host:port``, plus the model's route prefix when it serves several),
            or a :class:`Transport` shared with other clients.
        token: the bearer token (default: the GROGU_SERVE_TOKEN environment variable, if set).
        timeout: seconds per HTTP request; retries / backoff: see :mod:`grogu.rerank.remote.client`.
        metric, alpha, top_k_frac, max_new_tokens, template, answer_style, copy_ngram: the settings of
            :class:`grogu.UtilityScorer`, sent with every request.
    """

    def __init__(
        self,
        url: Any,
        token: str | None = None,
        *,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.25,
        metric: str | None = None,
        alpha: float = metrics.ALPHA,
        top_k_frac: float = metrics.TOP_K_FRAC,
        max_new_tokens: int | None = None,
        template: PromptTemplate | None = None,
        answer_style: str = "long",
        copy_ngram: int = metrics.COPY_NGRAM,
    ) -> None:
        super().__init__(url, token, timeout, retries, backoff)
        self.metric = metrics.DEFAULT_METRIC if metric is None else metrics.metric_name(metric)
        self.alpha, self.top_k_frac = check_alpha(alpha), check_fraction("top_k_frac", top_k_frac)
        self.answer_style = check_choice("answer_style", answer_style, ANSWER_STYLES)
        self.copy_ngram = check_positive_int("copy_ngram", copy_ngram)
        self.max_new_tokens = check_positive_int(
            "max_new_tokens", DEFAULT_MAX_NEW_TOKENS[answer_style] if max_new_tokens is None else max_new_tokens
        )
        self._template = check_prompt_template(template)

    def with_settings(self, **settings: Any) -> "RemoteScorer":
        """A scorer on the same service and connection with other settings (those not given are kept;
        ``metric=None`` keeps this scorer's metric)."""
        if settings.get("metric", "") is None:
            del settings["metric"]
        current = dict(
            metric=self.metric,
            alpha=self.alpha,
            top_k_frac=self.top_k_frac,
            max_new_tokens=self.max_new_tokens,
            template=self._template,
            answer_style=self.answer_style,
            copy_ngram=self.copy_ngram,
        )
        if "answer_style" in settings and "max_new_tokens" not in settings:
            current["max_new_tokens"] = None
        return RemoteScorer(self.transport, **{**current, **settings})

    @property
    def template(self) -> PromptTemplate:
        """The prompt the service scores with."""
        if self._template is not None:
            return self._template
        return SHORT_ANSWER_TEMPLATE if self.answer_style == "short" else PromptTemplate()

    def _settings(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "alpha": self.alpha,
            "top_k_frac": self.top_k_frac,
            "max_new_tokens": self.max_new_tokens,
            "answer_style": self.answer_style,
            "template": wire.encode_template(self._template),
            "copy_ngram": self.copy_ngram,
        }

    # ------------------------------------------------------------------ the UtilityScorer API, async at the core
    async def ascore_batch(self, items: Sequence[tuple[str, Sequence[Any]]], *, return_details: bool = False):
        """Each document of each (query, documents) item alone as the context (``UtilityScorer.score_batch``)."""
        checked = []
        for query, documents in check_pairs("items", items, "(query, documents)"):
            originals, docs = check_document_list(documents)
            checked.append((check_query(query), docs, originals))
        request = schema.build(
            schema.ScoreBatchRequest,
            {
                **self._settings(),
                "return_details": bool(return_details),
                "items": [{"query": q, "documents": wire.encode_documents(d)} for q, d, _ in checked],
            },
        )
        answer = await self._call("/score_batch", request, schema.ScoresBatchResponse)
        return [wire.decode_document_scores(rows, orig) for rows, (_, _, orig) in zip(answer.results, checked)]

    async def ascore(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        """Each document alone as the context; results in input order (``UtilityScorer.score``)."""
        return (await self.ascore_batch([(query, documents)], return_details=return_details))[0]

    async def ascore_contexts_batch(
        self, items: Sequence[tuple[str, Sequence[Sequence[Any]]]], *, return_details: bool = False
    ):
        """Each context of each (query, contexts) item (``UtilityScorer.score_contexts_batch``)."""
        checked = []
        for query, contexts in check_pairs("items", items, "(query, contexts)"):
            query = check_query(query)
            if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
                raise TypeError("contexts must be a list of document lists")
            checked.append((query, [check_document_list(c) for c in contexts]))
        request = schema.build(
            schema.ContextsBatchRequest,
            {
                **self._settings(),
                "return_details": bool(return_details),
                "items": [
                    {"query": q, "contexts": [wire.encode_documents(d) for _, d in pairs]} for q, pairs in checked
                ],
            },
        )
        answer = await self._call("/score_contexts_batch", request, schema.ScoresBatchResponse)
        return [
            [wire.decode_context(r, orig) for r, (orig, _) in zip(rows, pairs)]
            for rows, (_, pairs) in zip(answer.results, checked)
        ]

    async def ascore_contexts(self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False):
        """Each ordered document list as one context (``UtilityScorer.score_contexts``)."""
        if isinstance(contexts, (str, bytes)):
            raise TypeError("contexts must be a list of document lists")
        return (await self.ascore_contexts_batch([(query, contexts)], return_details=return_details))[0]

    async def ascore_context(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        """The documents as one context (``UtilityScorer.score_context``)."""
        return (await self.ascore_contexts(query, [documents], return_details=return_details))[0]

    async def abest_layout(self, query: str, layouts: Sequence[Sequence[Any]]):
        """The most useful of several orders of the documents (``UtilityScorer.best_layout``)."""
        if len(layouts) == 0:
            raise ValueError("best_layout needs at least one layout")
        query = check_query(query)
        pairs = [check_document_list(c) for c in layouts]
        request = schema.build(
            schema.LayoutRequest,
            {**self._settings(), "query": query, "layouts": [wire.encode_documents(d) for _, d in pairs]},
        )
        answer = await self._call("/best_layout", request, schema.LayoutResponse)
        return wire.decode_layout(answer, [orig for orig, _ in pairs])

    @takes_rerank_arguments
    async def arerank(self, call: RerankCall):
        """The documents to give the LLM, in order (``UtilityScorer.rerank``; the server computes the
        MiniLM relevance when none is given)."""
        if call.settings is not None and not isinstance(call.settings, ModeSettings):
            await self._known()  # a grogu tune file is checked against the served model's name
        settings = call_settings(call.settings, call.overrides, self, call.top_n)
        top_n, threshold = check_top_n(call.top_n), check_threshold(call.threshold)
        settings.check_threshold(threshold)
        query = check_query(call.query)
        originals, docs = check_document_list(call.documents)
        relevance = None if call.relevance is None else check_relevance(call.relevance, len(docs))
        request = schema.build(
            schema.RerankRequest,
            {
                **self._settings(),
                **settings.as_dict(),
                "query": query,
                "documents": wire.encode_documents(docs),
                "top_n": top_n,
                "threshold": threshold,
                "relevance": relevance,
                "return_details": bool(call.return_details),
            },
        )
        return await self._call("/rerank", request, schema.RerankResponse, lambda a: wire.decode_ranked(a, originals))

    async def aungrounded(self, query: str):
        """The ungrounded answer and its KeyEntropy (``UtilityScorer.ungrounded``)."""
        request = schema.build(schema.UngroundedRequest, {**self._settings(), "query": check_query(query)})
        return await self._call("/ungrounded", request, schema.UngroundedResponse)

    # the sync twins: each waits for its async method
    score = blocking(ascore)
    score_batch = blocking(ascore_batch)
    score_contexts = blocking(ascore_contexts)
    score_contexts_batch = blocking(ascore_contexts_batch)
    score_context = blocking(ascore_context)
    best_layout = blocking(abest_layout)
    rerank = blocking(arerank)
    ungrounded = blocking(aungrounded)
