"""Clients of the scoring service (``grogu serve``) with the methods and results of the in-process
classes: :class:`RemoteScorer` (:class:`grogu.UtilityScorer`), :class:`RemoteInfluenceScorer`
(:class:`grogu.influence.InfluenceScorer`), :class:`RemoteSePerScorer` and :class:`RemoteACUScorer`.

>>> scorer = RemoteScorer("http://127.0.0.1:8000", token=None)     # token: or GROGU_SERVE_TOKEN
>>> kept = scorer.rerank("Who wrote Hamlet?", docs, top_n=3)        # DocumentScore, as in-process

Inputs are checked here with the checks the in-process classes use (a bad query is the same
TypeError / ValueError without a round trip). Only each document's text and title are sent; results
come back on the caller's own document objects. Connection errors, 502/503/504 answers and a 500 that
grogu did not write (the replica died under the request) are retried with exponential backoff (``retries`` times: ``backoff``, 2x, 4x ... seconds, at most 8 s apart); a
4xx answer raises at once with the server's message: :class:`ServiceValueError` (a ``ValueError``) for
a bad value or a request over the limits, :class:`ServiceTypeError`, :class:`ServiceAuthError` (401).
Prompt templates are checked here as the service checks them (:func:`grogu.serve.wire.check_template`):
a placeholder the service would refuse is a ValueError when the client is made.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from typing_extensions import Unpack

from .. import metrics
from ..attribution import FORWARD_METHODS
from ..checks import (
    check_alpha,
    check_choice,
    check_document_list,
    check_fraction,
    check_influence_items,
    check_pairs,
    check_positive_int,
    check_query,
    check_relevance,
    check_threshold,
    check_top_n,
)
from ..influence import METHODS
from ..prompts import SHORT_ANSWER_TEMPLATE, PromptTemplate
from ..rerank import ModeOverrides, ModeSettings
from ..scorer import ANSWER_STYLES, DEFAULT_MAX_NEW_TOKENS
from . import wire
from .transport import (
    ServiceError,
    ServiceUnavailable,  # noqa: F401
    Transport,
)


def _check_template(template: Any) -> PromptTemplate | None:
    """None, or a PromptTemplate whose placeholders the service takes (ValueError naming the field)."""
    if template is None:
        return None
    if not isinstance(template, PromptTemplate):
        raise TypeError(f"template must be a grogu.PromptTemplate or None, got {type(template).__name__}")
    wire.check_template(dataclasses.asdict(template))
    return template


class _Remote:
    """A client bound to a transport: each call is a (path, body, decode) triple run sync or async."""

    def __init__(self, url: Any, token: str | None, timeout: float, retries: int, backoff: float) -> None:
        self.transport = (
            url
            if isinstance(url, Transport)
            else Transport(url, token, timeout=timeout, retries=retries, backoff=backoff)
        )
        self._info: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return self.transport.url

    def _run(self, path: str, body: Any, decode: Callable[[Any], Any]) -> Any:
        return decode(self.transport.request("POST", path, body))

    async def _arun(self, path: str, body: Any, decode: Callable[[Any], Any]) -> Any:
        return decode(await self.transport.arequest("POST", path, body))

    def info(self) -> dict[str, Any]:
        """The service's model, device, limits and batching (GET /info; cached)."""
        if self._info is None:
            self._info = self.transport.request("GET", "/info")
        return self._info

    def close(self) -> None:
        """Close this client's connections (a transport shared with other clients is closed for them too)."""
        self.transport.close()

    def __enter__(self) -> "_Remote":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def health(self) -> bool:
        return self.transport.request("GET", "/health").get("status") == "ok"

    @property
    def model_name(self) -> str:
        """The served model's name; the URL while the service cannot be reached."""
        try:
            return str(self.info()["model"])
        except ServiceError:
            return self.url


class RemoteScorer(_Remote):
    """:class:`grogu.UtilityScorer` served by ``grogu serve`` at ``url``: same methods, same results.

    Args:
        url: the service (``http://host:port``, plus the model's route prefix when it serves several),
            or a :class:`Transport` shared with other clients.
        token: the bearer token (default: the GROGU_SERVE_TOKEN environment variable, if set).
        timeout: seconds per HTTP request; retries / backoff: see the module docstring.
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
        self._template = _check_template(template)

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
        top_n: int | None = None,
        threshold: float | None = None,
        *,
        settings: ModeSettings | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[ModeOverrides],
    ):
        """The documents to give the LLM, in order (``UtilityScorer.rerank``; the server computes the
        MiniLM relevance when none is given)."""
        settings = ModeSettings.build(settings, **overrides)
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
        top_n: int | None = None,
        threshold: float | None = None,
        *,
        settings: ModeSettings | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[ModeOverrides],
    ):
        settings = ModeSettings.build(settings, **overrides)
        return await self._arun(
            *self._rerank_call(query, documents, top_n, threshold, settings, relevance, return_details)
        )


class RemoteInfluenceScorer(_Remote):
    """:class:`grogu.influence.InfluenceScorer` served by ``grogu serve`` (the embedder is the server's,
    ``--embedder``). Settings as in-process; connection arguments as :class:`RemoteScorer`."""

    def __init__(
        self,
        url: Any,
        token: str | None = None,
        *,
        timeout: float = 300.0,
        retries: int = 4,
        backoff: float = 0.25,
        max_new_tokens: int = 64,
        template: PromptTemplate | None = None,
        method: str = "exact",
        n_ablations: int | None = None,
        seed: int | None = 0,
        lasso_alpha: float = 0.01,
    ) -> None:
        super().__init__(url, token, timeout, retries, backoff)
        self.max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        self.method = check_choice("method", method, METHODS)
        self.n_ablations = None if n_ablations is None else check_positive_int("n_ablations", n_ablations)
        self.template, self.seed, self.lasso_alpha = _check_template(template), seed, float(lasso_alpha)

    @property
    def forward_only(self) -> bool:
        """True for the methods that read log-probabilities only (no answers embedded)."""
        return self.method in FORWARD_METHODS

    @property
    def embedder_name(self) -> str:
        try:
            return str(self.info()["embedder"])
        except ServiceError:
            return "remote"

    def _call(self, items: Any, return_ablations: bool):
        checked = []
        for query, documents, answer in check_influence_items(items):
            query = check_query(query)
            _, docs = check_document_list(documents)
            if answer is not None and not isinstance(answer, str):
                raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
            checked.append({"query": query, "documents": wire.encode_documents(docs), "answer": answer})
        body = {
            "items": checked,
            "return_ablations": bool(return_ablations),
            "max_new_tokens": self.max_new_tokens,
            "template": wire.encode_template(self.template),
            "method": self.method,
            "n_ablations": self.n_ablations,
            "seed": self.seed,
            "lasso_alpha": self.lasso_alpha,
        }
        return "/influence", body, lambda data: [wire.decode_influence(r) for r in data["results"]]

    def score(self, query: str, documents: Sequence[Any], answer: str | None = None, *, return_ablations: bool = False):
        return self._run(*self._call([(query, documents, answer)], return_ablations))[0]

    def score_batch(self, items: Sequence[Any], *, return_ablations: bool = False):
        items = list(items)
        return self._run(*self._call(items, return_ablations)) if items else []

    async def ascore(
        self, query: str, documents: Sequence[Any], answer: str | None = None, *, return_ablations: bool = False
    ):
        return (await self._arun(*self._call([(query, documents, answer)], return_ablations)))[0]


class RemoteSePerScorer(_Remote):
    """:class:`grogu.seper.SePerScorer` served by ``grogu serve --nli MODEL``."""

    def __init__(
        self,
        url: Any,
        token: str | None = None,
        *,
        timeout: float = 300.0,
        retries: int = 4,
        backoff: float = 0.25,
        n_samples: int = 10,
        temperature: float = 1.0,
        tau: float = 0.5,
        max_new_tokens: int = 32,
        seed: int | None = 0,
        template: PromptTemplate | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retries, backoff)
        self.settings = {
            "n_samples": check_positive_int("n_samples", n_samples),
            "temperature": temperature,
            "tau": tau,
            "max_new_tokens": check_positive_int("max_new_tokens", max_new_tokens),
            "seed": seed,
            "template": wire.encode_template(_check_template(template)),
        }

    def _body(self, query: str, documents: Sequence[Any], references: Any, as_context: bool) -> dict[str, Any]:
        _, docs = check_document_list(documents)
        refs = [references] if isinstance(references, str) else list(references)
        return {
            **self.settings,
            "query": check_query(query),
            "documents": wire.encode_documents(docs),
            "references": refs,
            "as_context": as_context,
        }

    def score(self, query: str, documents: Sequence[Any], references: Any):
        return self._run(
            "/seper",
            self._body(query, documents, references, False),
            lambda data: [wire.decode_seper(r) for r in data["results"]],
        )

    def score_context(self, query: str, documents: Sequence[Any], references: Any):
        return self._run(
            "/seper", self._body(query, documents, references, True), lambda data: wire.decode_seper(data["results"][0])
        )


class RemoteACUScorer(_Remote):
    """:class:`grogu.acu.ACUScorer` served by ``grogu serve``."""

    def __init__(
        self,
        url: Any,
        token: str | None = None,
        *,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float = 0.25,
        labels: Sequence[str] = ("True", "None", "False"),
        prompt_with: str | None = None,
        prompt_without: str | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retries, backoff)
        if prompt_with is not None:
            wire.check_format("prompt_with", prompt_with, ("claim", "evidence"))
        if prompt_without is not None:
            wire.check_format("prompt_without", prompt_without, ("claim",))
        self.settings = {"labels": list(labels), "prompt_with": prompt_with, "prompt_without": prompt_without}

    def score_batch(self, items: Sequence[tuple[str, str, str]]):
        rows = [{"claim": c, "evidence": e, "stance": s} for c, e, s in items]
        return self._run("/acu", {**self.settings, "items": rows}, lambda d: [wire.decode_acu(r) for r in d["results"]])

    def score(self, claim: str, evidence: str, stance: str):
        return self.score_batch([(claim, evidence, stance)])[0]
