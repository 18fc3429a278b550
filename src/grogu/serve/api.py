"""Request bodies of the scoring service (pydantic): a wrong type or a missing field is a 422 that
names the field. Settings are those of the Python classes, with the same defaults; their values are
checked by the classes themselves (:mod:`grogu.checks`), so a bad value reads as it does in Python."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .. import metrics as M
from ..rerank import DEFAULT_FAMILY, DEFAULT_MARGIN, DEFAULT_WEIGHT


class _Strict(BaseModel):
    # unknown fields are errors: a misspelt setting must not be silently ignored
    model_config = ConfigDict(extra="forbid", strict=True)


class DocumentIn(_Strict):
    """A document: text and optional title; other keys (a caller's metadata) are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)
    text: str
    title: Optional[str] = None


Doc = Union[str, DocumentIn]


class TemplateIn(_Strict):
    """:class:`grogu.PromptTemplate` field by field (defaults: grogu's own prompt)."""

    grounded: str = "Answer the question based on the given document.\n\n{context}\n\nQuestion: {query}"
    ungrounded: str = "Answer the question.\n\nQuestion: {query}"
    document: str = "Document: {text}"
    titled_document: str = "Document ({title}): {text}"
    separator: str = "\n\n"
    system: Optional[str] = None
    plain_suffix: str = "\nAnswer:"
    chat: bool = True


class ScorerSettings(_Strict):
    """Settings of :class:`grogu.UtilityScorer` (see its docstring)."""

    metric: str = M.DEFAULT_METRIC
    alpha: float = M.ALPHA
    top_k_frac: float = M.TOP_K_FRAC
    max_new_tokens: Optional[int] = None
    answer_style: Literal["long", "short"] = "long"
    template: Optional[TemplateIn] = None
    copy_ngram: int = M.COPY_NGRAM

    def scorer_key(self) -> str:
        return self.model_dump_json(include=set(ScorerSettings.model_fields))


class ScoreRequest(ScorerSettings):
    query: str
    documents: list[Doc]
    return_details: bool = False


class ScoreBatchItem(_Strict):
    query: str
    documents: list[Doc]


class ScoreBatchRequest(ScorerSettings):
    items: list[ScoreBatchItem]
    return_details: bool = False


class ContextsRequest(ScorerSettings):
    query: str
    contexts: list[list[Doc]]
    return_details: bool = False


class ContextsBatchItem(_Strict):
    query: str
    contexts: list[list[Doc]]


class ContextsBatchRequest(ScorerSettings):
    items: list[ContextsBatchItem]
    return_details: bool = False


class LayoutRequest(ScorerSettings):
    query: str
    layouts: list[list[Doc]]


class RerankRequest(ScorerSettings):
    query: str
    documents: list[Doc]
    top_n: Optional[int] = None
    threshold: Optional[float] = None
    mode: Optional[str] = None
    relevance: Optional[list[float]] = None
    weight: float = DEFAULT_WEIGHT
    family: str = DEFAULT_FAMILY
    swaps: int = 2
    margin: float = DEFAULT_MARGIN
    return_details: bool = False


class UngroundedRequest(ScorerSettings):
    query: str


class InfluenceSettings(_Strict):
    """Settings of :class:`grogu.influence.InfluenceScorer` (the embedder is the server's)."""

    max_new_tokens: int = 64
    template: Optional[TemplateIn] = None
    method: str = "exact"            # grogu.influence.METHODS, checked by InfluenceScorer
    n_ablations: Optional[int] = None  # None: the method's default
    seed: Optional[int] = 0
    lasso_alpha: float = 0.01

    def scorer_key(self) -> str:
        return self.model_dump_json(include=set(InfluenceSettings.model_fields))


class InfluenceItem(_Strict):
    query: str
    documents: list[Doc]
    answer: Optional[str] = None


class InfluenceRequest(InfluenceSettings):
    items: list[InfluenceItem] = Field(min_length=1)
    return_ablations: bool = False


class SePerRequest(_Strict):
    """ΔSePer of each document alone (``as_context=False``) or of all of them as one context."""

    query: str
    documents: list[Doc]
    references: list[str]
    as_context: bool = False
    n_samples: int = 10
    temperature: float = 1.0
    tau: float = 0.5
    max_new_tokens: int = 32
    seed: Optional[int] = 0
    template: Optional[TemplateIn] = None


class ACUItem(_Strict):
    claim: str
    evidence: str
    stance: str


class ACURequest(_Strict):
    items: list[ACUItem]
    labels: list[str] = ["True", "None", "False"]
    prompt_with: Optional[str] = None
    prompt_without: Optional[str] = None


def docs_of(body: Any) -> list[list[Any]]:
    """Every document list a request carries (for the per-request limits)."""
    if isinstance(body, (ScoreRequest, RerankRequest, SePerRequest)):
        return [body.documents]
    if isinstance(body, ScoreBatchRequest):
        return [it.documents for it in body.items]
    if isinstance(body, ContextsRequest):
        return list(body.contexts)
    if isinstance(body, ContextsBatchRequest):
        return [c for it in body.items for c in it.contexts]
    if isinstance(body, LayoutRequest):
        return list(body.layouts)
    if isinstance(body, InfluenceRequest):
        return [it.documents for it in body.items]
    return []


def plain_docs(docs: list[Doc]) -> list[Any]:
    """Documents as grogu takes them: a str or a {"text", "title"} dict."""
    return [d if isinstance(d, str) else d.model_dump(exclude_none=True) for d in docs]
