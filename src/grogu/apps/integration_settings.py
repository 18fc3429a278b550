"""The settings both integrations share, declared once.

:class:`SharedSettings` is a pydantic model: LlamaIndex's ``GroguRerank`` and LangChain's ``GroguCompressor``
and ``GroguRetriever`` inherit its fields. Each field has one default, one description and grogu's own check
(:mod:`grogu.core.checks`), run before pydantic's coercion, so a bool is not a count and NaN not a threshold. A
default changed here changes in both frameworks. Both integrations bring pydantic (v2); grogu's core does not
import this module.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Callable, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from ..core.checks import check_choice, check_positive_int, check_threshold, check_top_n
from ..core.prompts import PromptTemplate
from ..metrics.defaults import metric_name
from ..metrics.scales import check_score_scale
from ..rerank.settings import DEFAULT_TOP_N
from ..runtime.engine.config import EngineConfig

#: what a reranker does on a scoring failure
ON_ERROR = ("raise", "passthrough")


def checked(check: Callable[..., Any], *args: Any, none_ok: bool = False, **kwargs: Any) -> BeforeValidator:
    """A field's validator: grogu's ``check(*args, value, **kwargs)``; with ``none_ok``, None passes as 'the
    default'."""
    bound = functools.partial(check, *args, **kwargs)
    return BeforeValidator(lambda value: None if none_ok and value is None else bound(value))


def check_engine_config(value: Any) -> EngineConfig:
    """A grogu.EngineConfig as it is (a mapping is not turned into one)."""
    if not isinstance(value, EngineConfig):
        raise TypeError(f"engine_config must be a grogu.EngineConfig, got {type(value).__name__}")
    return value


class SharedSettings(BaseModel):
    """The reranker settings of both integrations (see the module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    top_n: Annotated[Optional[int], checked(check_top_n)] = Field(
        default=DEFAULT_TOP_N, description="Most documents kept, best first (None: all)."
    )
    threshold: Annotated[Optional[float], checked(check_threshold)] = Field(
        default=None,
        description="Per-document modes: keep only those with utility >= threshold, before top_n "
        "(a number in [0, 1] with score_scale='probability'). Not in the context mode.",
    )
    metric: Annotated[Optional[str], checked(metric_name, none_ok=True)] = Field(
        default=None,
        description="The GROGU variant, a name from grogu.METRICS. None: key_entropy, or ppl for an LLM behind "
        "a chat API. Once built: the metric used.",
    )
    max_new_tokens: Annotated[Optional[int], checked(check_positive_int, "max_new_tokens", none_ok=True)] = Field(
        default=None,
        description="Longest grounded answer generated per context. None: the LLM's own budget when scoring with "
        "the pipeline's prompt, else 64 (16 with answer_style='short'). Once built: the budget used.",
    )
    template: Optional[PromptTemplate] = Field(
        default=None, description="grogu's scoring prompt text (a grogu.PromptTemplate; not with the pipeline's)."
    )
    answer_style: Literal["long", "short"] = Field(
        default="long", description="'short': ask for the answer only and cut it at its first line (small models)."
    )
    score_scale: Annotated[Literal["utility", "probability"], checked(check_score_scale)] = Field(
        default="utility",
        description="Scale of the per-document score and of threshold: 'utility' (unbounded) or 'probability' "
        "(in [0, 1], the same order; grogu.metrics.scales). LangChain's classes default to 'probability', the "
        "scale of relevance_score there.",
    )
    on_error: Annotated[Literal["raise", "passthrough"], checked(check_choice, "on_error", choices=ON_ERROR)] = Field(
        default="raise",
        description="On a scoring failure: 'raise' it, or 'passthrough': every input back in its order, "
        "unscored, the error logged and in metadata['grogu']['error'].",
    )
    device: Optional[str] = Field(default=None, description="Device of a model given by name.")
    dtype: Optional[str] = Field(default=None, description="dtype of a model given by name.")
    batch_size: Annotated[Optional[int], checked(check_positive_int, "batch_size", none_ok=True)] = Field(
        default=None,
        description="Most prompts in one forward pass (grogu.EngineConfig.max_batch_size). It sets the "
        "process-wide engine of the model.",
    )
    engine_config: Annotated[Optional[EngineConfig], checked(check_engine_config, none_ok=True)] = Field(
        default=None, description="The engine's whole grogu.EngineConfig, in place of batch_size."
    )


__all__ = ["SharedSettings", "ON_ERROR", "checked", "check_engine_config"]
