"""The request bodies of the scoring service (see :mod:`grogu.rerank.remote.schema`)."""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ....core import checks
from ....core.prompts import check_text
from ....metrics import defaults
from ...settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_TOP_N, ModeSettings
from .. import wire


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

    def body(self) -> dict[str, Any]:
        """The JSON body this request is sent as."""
        return self.model_dump(mode="json")


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

    metric: str = defaults.DEFAULT_METRIC
    alpha: float = defaults.ALPHA
    top_k_frac: float = defaults.TOP_K_FRAC
    max_new_tokens: Optional[int] = None
    answer_style: Literal["long", "short"] = "long"
    template: Optional[TemplateIn] = None
    copy_ngram: int = defaults.COPY_NGRAM

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        return _check(defaults.metric_name, v)

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

    def body(self) -> dict[str, Any]:
        """The JSON body: the rerank settings as top-level fields, as the route takes them."""
        out = self.model_dump(mode="json")
        return {**out.pop("settings"), **out}


class UngroundedRequest(ScorerSettings):
    query: Query


class InfluenceSettings(_Strict):
    """Settings of :class:`grogu.metrics.influence.InfluenceScorer` (the embedder is the server's)."""

    max_new_tokens: int = defaults.INFLUENCE_MAX_NEW_TOKENS
    template: Optional[TemplateIn] = None
    method: str = "exact"  # grogu.metrics.defaults.INFLUENCE_METHODS
    n_ablations: Optional[int] = None  # None: the method's default
    seed: Optional[int] = 0
    lasso_alpha: float = 0.01

    @model_validator(mode="after")
    def _influence_settings(self) -> "InfluenceSettings":
        _check(checks.check_positive_int, "max_new_tokens", self.max_new_tokens)
        _check(checks.check_choice, "method", self.method, defaults.INFLUENCE_METHODS)
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
    max_new_tokens: int = defaults.SEPER_MAX_NEW_TOKENS
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


class CompatRerankRequest(BaseModel):
    """A Cohere (v1, v2) or Jina rerank request (:mod:`grogu.apps.serve.compat`). Unknown fields are
    accepted (vendors add their own)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: Optional[str] = Field(None, description="the target LLM: the model this service serves")
    query: str
    documents: list[Union[str, dict[str, Any]]] = Field(
        description="strings, or objects with a 'text' field (or the fields named in rank_fields)"
    )
    top_n: Optional[int] = Field(None, description="documents to return; absent or 0: all")
    return_documents: Optional[bool] = None
    rank_fields: Optional[list[str]] = Field(None, description="the fields of object documents to rank on")
    grogu: Optional[dict[str, Any]] = Field(None, description="grogu's own rerank settings (see /rerank)")

    def ignored(self) -> list[str]:
        """The fields this request sent that grogu does not use, sorted."""
        return sorted(self.model_extra or {})
