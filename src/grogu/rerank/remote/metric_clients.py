"""The clients of the other metrics' routes: :class:`RemoteInfluenceScorer`, :class:`RemoteSePerScorer` and
:class:`RemoteACUScorer` (see :mod:`grogu.rerank.remote.client`)."""

from __future__ import annotations

from typing import Any, Sequence

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
from . import wire
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

    def score_batch(self, items: Sequence[tuple[str, str, str]]):
        rows = [{"claim": c, "evidence": e, "stance": s} for c, e, s in items]
        return self._run("/acu", {**self.settings, "items": rows}, lambda d: [wire.decode_acu(r) for r in d["results"]])

    def score(self, claim: str, evidence: str, stance: str):
        return self.score_batch([(claim, evidence, stance)])[0]
