"""The clients of the other metrics' routes: :class:`RemoteInfluenceScorer`, :class:`RemoteSePerScorer` and
:class:`RemoteACUScorer` (see :mod:`grogu.rerank.remote.client`)."""

from __future__ import annotations

from typing import Any, Sequence

from ...core.aio import blocking
from ...core.checks import (
    check_choice,
    check_document_list,
    check_influence_items,
    check_positive_int,
    check_query,
)
from ...core.prompts import PromptTemplate
from ...metrics.defaults import FORWARD_METHODS
from ...metrics.defaults import INFLUENCE_METHODS as METHODS
from . import schema, wire
from .client_base import RemoteClient, check_prompt_template
from .transport import ServiceError


class RemoteInfluenceScorer(RemoteClient):
    """:class:`grogu.metrics.influence.InfluenceScorer` served by ``grogu serve`` (the embedder is the server's,
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
        self.template, self.seed, self.lasso_alpha = check_prompt_template(template), seed, float(lasso_alpha)

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

    async def ascore_batch(self, items: Sequence[Any], *, return_ablations: bool = False):
        """Influence Scores of (query, documents, answer) items (``InfluenceScorer.score_batch``)."""
        checked = []
        for query, documents, answer in check_influence_items(list(items)):
            query = check_query(query)
            _, docs = check_document_list(documents)
            if answer is not None and not isinstance(answer, str):
                raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
            checked.append({"query": query, "documents": wire.encode_documents(docs), "answer": answer})
        if not checked:
            return []
        request = schema.build(
            schema.InfluenceRequest,
            {
                "items": checked,
                "return_ablations": bool(return_ablations),
                "max_new_tokens": self.max_new_tokens,
                "template": wire.encode_template(self.template),
                "method": self.method,
                "n_ablations": self.n_ablations,
                "seed": self.seed,
                "lasso_alpha": self.lasso_alpha,
            },
        )
        return (await self._call("/influence", request, schema.InfluenceResponse)).results

    async def ascore(
        self, query: str, documents: Sequence[Any], answer: str | None = None, *, return_ablations: bool = False
    ):
        """Influence Scores of the documents on the answer (``InfluenceScorer.score``)."""
        return (await self.ascore_batch([(query, documents, answer)], return_ablations=return_ablations))[0]

    score = blocking(ascore)
    score_batch = blocking(ascore_batch)


class RemoteSePerScorer(RemoteClient):
    """:class:`grogu.metrics.seper.SePerScorer` served by ``grogu serve --nli MODEL``."""

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
            "template": wire.encode_template(check_prompt_template(template)),
        }

    async def _seper(self, query: str, documents: Sequence[Any], references: Any, as_context: bool):
        _, docs = check_document_list(documents)
        refs = [references] if isinstance(references, str) else list(references)
        request = schema.build(
            schema.SePerRequest,
            {
                **self.settings,
                "query": check_query(query),
                "documents": wire.encode_documents(docs),
                "references": refs,
                "as_context": as_context,
            },
        )
        return (await self._call("/seper", request, schema.SePerResponse)).results

    async def ascore(self, query: str, documents: Sequence[Any], references: Any):
        """ΔSePer of each document alone (``SePerScorer.score``)."""
        return await self._seper(query, documents, references, False)

    async def ascore_context(self, query: str, documents: Sequence[Any], references: Any):
        """ΔSePer of the documents as one context (``SePerScorer.score_context``)."""
        return (await self._seper(query, documents, references, True))[0]

    score = blocking(ascore)
    score_context = blocking(ascore_context)


class RemoteACUScorer(RemoteClient):
    """:class:`grogu.metrics.acu.ACUScorer` served by ``grogu serve``."""

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

    async def ascore_batch(self, items: Sequence[tuple[str, str, str]]):
        """ACU of (claim, evidence, stance) items (``ACUScorer.score_batch``)."""
        rows = [{"claim": c, "evidence": e, "stance": s} for c, e, s in items]
        request = schema.build(schema.ACURequest, {**self.settings, "items": rows})
        return (await self._call("/acu", request, schema.ACUResponse)).results

    async def ascore(self, claim: str, evidence: str, stance: str):
        return (await self.ascore_batch([(claim, evidence, stance)]))[0]

    score = blocking(ascore)
    score_batch = blocking(ascore_batch)
