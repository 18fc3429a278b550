"""The client of the GROGU utility routes: :class:`RemoteScorer`, :class:`grogu.UtilityScorer` served by
``grogu serve`` (see :mod:`grogu.rerank.remote.client`)."""

from __future__ import annotations

from typing import Any, Sequence

from typing_extensions import Unpack

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
from ..settings import ANSWER_STYLES, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TOP_N, ModeOverrides, ModeSettings
from ..tuned import call_settings
from . import wire
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

    # ------------------------------------------------------------------ requests
    def _score_call(self, items: Any, return_details: bool, single: bool):
        checked = []
        for query, documents in check_pairs("items", items, "(query, documents)"):
            originals, docs = check_document_list(documents)
            checked.append((check_query(query), docs, originals))
        body = {
            **self._settings(),
            "return_details": bool(return_details),
            "items": [{"query": q, "documents": wire.encode_documents(d)} for q, d, _ in checked],
        }

        def decode(data: Any) -> Any:
            out = [wire.decode_document_scores(rows, orig) for rows, (_, _, orig) in zip(data["results"], checked)]
            return out[0] if single else out

        return "/score_batch", body, decode

    def _contexts_call(self, items: Any, return_details: bool, single: bool):
        checked = []
        for query, contexts in check_pairs("items", items, "(query, contexts)"):
            query = check_query(query)
            if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
                raise TypeError("contexts must be a list of document lists")
            checked.append((query, [check_document_list(c) for c in contexts]))
        body = {
            **self._settings(),
            "return_details": bool(return_details),
            "items": [{"query": q, "contexts": [wire.encode_documents(d) for _, d in pairs]} for q, pairs in checked],
        }

        def decode(data: Any) -> Any:
            out = [
                [wire.decode_context(r, orig) for r, (orig, _) in zip(rows, pairs)]
                for rows, (_, pairs) in zip(data["results"], checked)
            ]
            return out[0] if single else out

        return "/score_contexts_batch", body, decode

    def _layout_call(self, query: str, layouts: Sequence[Sequence[Any]]):
        if len(layouts) == 0:
            raise ValueError("best_layout needs at least one layout")
        query = check_query(query)
        pairs = [check_document_list(c) for c in layouts]
        body = {**self._settings(), "query": query, "layouts": [wire.encode_documents(d) for _, d in pairs]}
        return "/best_layout", body, lambda data: wire.decode_layout(data, [orig for orig, _ in pairs])

    def _rerank_call(self, query, documents, top_n, threshold, settings, relevance, return_details):
        top_n, threshold = check_top_n(top_n), check_threshold(threshold)
        settings.check_threshold(threshold)
        query = check_query(query)
        originals, docs = check_document_list(documents)
        if relevance is not None:
            relevance = check_relevance(relevance, len(docs))
        body = {
            **self._settings(),
            **settings.as_dict(),
            "query": query,
            "documents": wire.encode_documents(docs),
            "top_n": top_n,
            "threshold": threshold,
            "relevance": relevance,
            "return_details": bool(return_details),
        }
        return "/rerank", body, lambda data: wire.decode_ranked(data, originals)

    # ------------------------------------------------------------------ the UtilityScorer API
    def score(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        """Each document alone as the context; results in input order (``UtilityScorer.score``)."""
        return self._run(*self._score_call([(query, documents)], return_details, True))

    def score_batch(self, items: Sequence[tuple[str, Sequence[Any]]], *, return_details: bool = False):
        return self._run(*self._score_call(items, return_details, False))

    def score_context(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        return self.score_contexts(query, [documents], return_details=return_details)[0]

    def score_contexts(self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False):
        if isinstance(contexts, (str, bytes)):
            raise TypeError("contexts must be a list of document lists")
        return self._run(*self._contexts_call([(query, contexts)], return_details, True))

    def score_contexts_batch(
        self, items: Sequence[tuple[str, Sequence[Sequence[Any]]]], *, return_details: bool = False
    ):
        return self._run(*self._contexts_call(items, return_details, False))

    def best_layout(self, query: str, layouts: Sequence[Sequence[Any]]):
        return self._run(*self._layout_call(query, layouts))

    def rerank(
        self,
        query: str,
        documents: Sequence[Any],
        top_n: int | None = DEFAULT_TOP_N,
        threshold: float | None = None,
        *,
        settings: ModeSettings | str | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[ModeOverrides],
    ):
        """The documents to give the LLM, in order (``UtilityScorer.rerank``; the server computes the
        MiniLM relevance when none is given)."""
        settings = call_settings(settings, overrides, self, top_n)
        return self._run(*self._rerank_call(query, documents, top_n, threshold, settings, relevance, return_details))

    def ungrounded(self, query: str):
        body = {**self._settings(), "query": check_query(query)}
        return self._run("/ungrounded", body, wire.decode_ungrounded)

    # async twins
    async def ascore(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        return await self._arun(*self._score_call([(query, documents)], return_details, True))

    async def ascore_batch(self, items: Sequence[tuple[str, Sequence[Any]]], *, return_details: bool = False):
        return await self._arun(*self._score_call(items, return_details, False))

    async def ascore_contexts(self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False):
        if isinstance(contexts, (str, bytes)):
            raise TypeError("contexts must be a list of document lists")
        return await self._arun(*self._contexts_call([(query, contexts)], return_details, True))

    async def ascore_context(self, query: str, documents: Sequence[Any], *, return_details: bool = False):
        return (await self.ascore_contexts(query, [documents], return_details=return_details))[0]

    async def abest_layout(self, query: str, layouts: Sequence[Sequence[Any]]):
        return await self._arun(*self._layout_call(query, layouts))

    async def arerank(
        self,
        query: str,
        documents: Sequence[Any],
        top_n: int | None = DEFAULT_TOP_N,
        threshold: float | None = None,
        *,
        settings: ModeSettings | str | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[ModeOverrides],
    ):
        settings = call_settings(settings, overrides, self, top_n)
        return await self._arun(
            *self._rerank_call(query, documents, top_n, threshold, settings, relevance, return_details)
        )
