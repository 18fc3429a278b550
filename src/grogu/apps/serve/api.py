"""Request bodies of the scoring service (pydantic): a wrong type or a missing field is a 422 that
names the field. Settings are those of the Python classes, with the same defaults; their values are
checked while the request is parsed, with the checks the classes use (:mod:`grogu.core.checks`), so a bad
value is a 422 with the message it has in Python, before any work. Templates are checked by
:func:`grogu.rerank.remote.wire.check_template` (the client runs the same check)."""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ...core import checks
from ...core.prompts import check_text
from ...metrics import grogu as metrics
from ...metrics import influence, seper
from ...rerank.remote import wire
from ...rerank.settings import DEFAULT_TOP_N, ModeSettings


def _check(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a grogu check inside a validator: its TypeError becomes a ValueError (pydantic reports only
    ValueErrors as validation errors), with the same message."""
    try:
        return fn(*args)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def _query(value: str) -> str:
    return _check(checks.check_query, value)


#: a query: a non-empty str (grogu.core.checks.check_query)
Query = Annotated[str, AfterValidator(_query)]


class _Strict(BaseModel):
    # unknown fields are errors: a misspelt setting must not be silently ignored
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="after")
    def _utf8(self) -> "_Strict":
        """Every text field encodes as UTF-8 (a JSON "\\ud800" escape is a lone surrogate)."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for i, text in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(text, str):
                    _check(check_text, name if not isinstance(value, list) else f"{name}[{i}]", text)
        return self


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

    @model_validator(mode="after")
    def _placeholders(self) -> "TemplateIn":
        wire.check_template(self.model_dump())
        return self


class ScorerSettings(_Strict):
    """Settings of :class:`grogu.UtilityScorer` (see its docstring)."""

    metric: str = metrics.DEFAULT_METRIC
    alpha: float = metrics.ALPHA
    top_k_frac: float = metrics.TOP_K_FRAC
    max_new_tokens: Optional[int] = None
    answer_style: Literal["long", "short"] = "long"
    template: Optional[TemplateIn] = None
    copy_ngram: int = metrics.COPY_NGRAM

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check(metrics.metric_name, v)

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, v: float) -> float:
        return _check(checks.check_alpha, v)

    @field_validator("top_k_frac")
    @classmethod
    def _top_k_frac(cls, v: float) -> float:
        return _check(checks.check_fraction, "top_k_frac", v)

    @field_validator("max_new_tokens")
    @classmethod
    def _max_new_tokens(cls, v: Optional[int]) -> Optional[int]:
        return None if v is None else _check(checks.check_positive_int, "max_new_tokens", v)

    @field_validator("copy_ngram")
    @classmethod
    def _copy_ngram(cls, v: int) -> int:
        return _check(checks.check_positive_int, "copy_ngram", v)

    def scorer_key(self) -> str:
        return self.model_dump_json(include=set(ScorerSettings.model_fields))

    def answer_tokens(self) -> int:
        """The answer tokens each scored context may generate (the scorer's default when not given)."""
        from ...rerank.scorer import DEFAULT_MAX_NEW_TOKENS

        return self.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[self.answer_style]


class ScoreRequest(ScorerSettings):
    query: Query
    documents: list[Doc]
    return_details: bool = False


class ScoreBatchItem(_Strict):
    query: Query
    documents: list[Doc]


class ScoreBatchRequest(ScorerSettings):
    items: list[ScoreBatchItem]
    return_details: bool = False


class ContextsRequest(ScorerSettings):
    query: Query
    contexts: list[list[Doc]]
    return_details: bool = False


class ContextsBatchItem(_Strict):
    query: Query
    contexts: list[list[Doc]]


class ContextsBatchRequest(ScorerSettings):
    items: list[ContextsBatchItem]
    return_details: bool = False


class LayoutRequest(ScorerSettings):
    query: Query
    layouts: list[list[Doc]]


class RerankRequest(ScorerSettings):
    """``UtilityScorer.rerank``'s arguments. The rerank settings (:class:`grogu.ModeSettings`: ``mode``,
    ``weight``, ``family``, ...) come as top-level fields, each optional, and are checked by
    ModeSettings itself (a field it does not know is a 422 naming the ones it does)."""

    query: Query
    documents: list[Doc]
    top_n: Optional[int] = DEFAULT_TOP_N
    threshold: Optional[float] = None
    relevance: Optional[list[float]] = None
    settings: dict[str, Any] = Field(default_factory=dict)
    return_details: bool = False

    @model_validator(mode="before")
    @classmethod
    def _gather_settings(cls, data: Any) -> Any:
        """The top-level rerank settings gathered into ``settings`` (one object, checked as a whole)."""
        if not isinstance(data, dict):
            return data
        if "settings" in data:
            raise ValueError("give the rerank settings as top-level fields (mode, weight, family, ...)")
        names = set(ModeSettings.names())
        return {
            **{k: v for k, v in data.items() if k not in names},
            "settings": {k: v for k, v in data.items() if k in names},
        }

    @model_validator(mode="after")
    def _rerank_settings(self) -> "RerankRequest":
        _check(checks.check_top_n, self.top_n)
        _check(checks.check_threshold, self.threshold)
        self.mode_settings().check_threshold(self.threshold)
        if self.relevance is not None:
            _check(checks.check_relevance, self.relevance, len(self.documents))
        return self

    def mode_settings(self) -> ModeSettings:
        return _check(ModeSettings.build, self.settings)


class UngroundedRequest(ScorerSettings):
    query: Query


class InfluenceSettings(_Strict):
    """Settings of :class:`grogu.metrics.influence.InfluenceScorer` (the embedder is the server's)."""

    max_new_tokens: int = influence.DEFAULT_MAX_NEW_TOKENS
    template: Optional[TemplateIn] = None
    method: str = "exact"  # grogu.metrics.influence.METHODS, checked by InfluenceScorer
    n_ablations: Optional[int] = None  # None: the method's default
    seed: Optional[int] = 0
    lasso_alpha: float = 0.01

    @model_validator(mode="after")
    def _influence_settings(self) -> "InfluenceSettings":
        from ...metrics.influence import METHODS

        _check(checks.check_positive_int, "max_new_tokens", self.max_new_tokens)
        _check(checks.check_choice, "method", self.method, METHODS)
        if self.n_ablations is not None:
            _check(checks.check_positive_int, "n_ablations", self.n_ablations)
        _check(checks.check_positive_float, "lasso_alpha", self.lasso_alpha)
        return self

    def scorer_key(self) -> str:
        return self.model_dump_json(include=set(InfluenceSettings.model_fields))


class InfluenceItem(_Strict):
    query: Query
    documents: list[Doc]
    answer: Optional[str] = None


class InfluenceRequest(InfluenceSettings):
    items: list[InfluenceItem] = Field(min_length=1)
    return_ablations: bool = False


class SePerRequest(_Strict):
    """ΔSePer of each document alone (``as_context=False``) or of all of them as one context."""

    query: Query
    documents: list[Doc]
    references: list[str]
    as_context: bool = False
    n_samples: int = 10
    temperature: float = 1.0
    tau: float = 0.5
    max_new_tokens: int = seper.DEFAULT_MAX_NEW_TOKENS
    seed: Optional[int] = 0
    template: Optional[TemplateIn] = None

    @model_validator(mode="after")
    def _seper_settings(self) -> "SePerRequest":
        _check(checks.check_positive_int, "n_samples", self.n_samples)
        _check(checks.check_temperature, self.temperature)
        _check(checks.check_probability, "tau (an entailment probability threshold)", self.tau)
        _check(checks.check_positive_int, "max_new_tokens", self.max_new_tokens)
        return self


class ACUItem(_Strict):
    claim: str
    evidence: str
    stance: str


class ACURequest(_Strict):
    items: list[ACUItem]
    labels: list[str] = ["True", "None", "False"]
    prompt_with: Optional[str] = None
    prompt_without: Optional[str] = None

    @model_validator(mode="after")
    def _prompts(self) -> "ACURequest":
        if self.prompt_with is not None:
            wire.check_format("prompt_with", self.prompt_with, ("claim", "evidence"))
        if self.prompt_without is not None:
            wire.check_format("prompt_without", self.prompt_without, ("claim",))
        return self


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


def text_chars(value: Any) -> int:
    """Characters of every string a request holds (queries, documents, titles, templates, answers ...)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, BaseModel):
        return sum(text_chars(getattr(value, name)) for name in type(value).model_fields)
    if isinstance(value, (list, tuple)):
        return sum(text_chars(v) for v in value)
    return 0


def queries_of(body: Any) -> list[str]:
    """Every query a request carries (for the query limit)."""
    if isinstance(body, (ScoreBatchRequest, ContextsBatchRequest, InfluenceRequest)):
        return [it.query for it in body.items]
    query = getattr(body, "query", None)
    return [query] if isinstance(query, str) else []


def templates_of(body: Any) -> list[tuple[str, int]]:
    """(name, characters) of each prompt a request brings (for the template limit)."""
    out = []
    template = getattr(body, "template", None)
    if template is not None:
        out.append(("template", wire.template_chars(template.model_dump())))
    for name in ("prompt_with", "prompt_without"):
        if getattr(body, name, None) is not None:
            out.append((name, len(getattr(body, name))))
    return out


def plain_docs(docs: list[Doc]) -> list[Any]:
    """Documents as grogu takes them: a str or a {"text", "title"} dict."""
    return [d if isinstance(d, str) else d.model_dump(exclude_none=True) for d in docs]
