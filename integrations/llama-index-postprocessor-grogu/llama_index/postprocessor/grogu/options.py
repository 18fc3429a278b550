"""GroguRerank's settings: grogu's checks of its fields, and the prompt it scores with (the scorer
itself comes from grogu.scorer_factory.build_scorer)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Optional, Tuple

from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.prompts.chat_prompts import CHAT_TEXT_QA_PROMPT
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_TEXT_QA_PROMPT_SEL

import grogu
from grogu.checks import check_choice, check_positive_int, check_threshold, check_top_n
from grogu.metrics import metric_name
from grogu.scales import check_score_scale
from grogu.scorer import DEFAULT_MAX_NEW_TOKENS

from .prompts import template_from_llama_index
from .utils import answer_budget

ON_ERROR = ("raise", "passthrough")


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``check`` for a setting whose None means "the default"."""
    return lambda value: None if value is None else check(value)


def check_engine_config(value: Any) -> grogu.EngineConfig:
    """A grogu.EngineConfig as it is (a mapping is not turned into one)."""
    if not isinstance(value, grogu.EngineConfig):
        raise TypeError(f"engine_config must be a grogu.EngineConfig, got {type(value).__name__}")
    return value


def callback_manager(value: Any) -> Any:
    """None: a callback manager of its own, as LlamaIndex's components make one."""
    return CallbackManager([]) if value is None else value


#: each field's check, given the value before pydantic reads it: grogu's own checks (grogu.checks), so a
#: bad value is the same error here as in grogu (a bool is not a count; NaN or inf is not a threshold)
FIELD_CHECKS: Dict[str, Callable[[Any], Any]] = {
    "top_n": check_top_n,
    "threshold": check_threshold,
    "metric": optional(metric_name),
    "max_new_tokens": optional(functools.partial(check_positive_int, "max_new_tokens")),
    "batch_size": optional(functools.partial(check_positive_int, "batch_size")),
    "score_scale": check_score_scale,
    "on_error": functools.partial(check_choice, "on_error", choices=ON_ERROR),
    "engine_config": optional(check_engine_config),
    "callback_manager": callback_manager,
}


def scoring_prompt(
    qa_template: Any,
    template: Optional[grogu.PromptTemplate],
    mode: str,
    llm: Optional[LLM],
    max_new_tokens: Optional[int],
    answer_style: str = "long",
) -> Tuple[Optional[grogu.PromptTemplate], int]:
    """The prompt grogu scores with and the answer budget, from ``qa_template`` / ``template`` (see
    ``GroguRerank``): with the pipeline's own prompt, the LLM's own ``max_new_tokens`` (``max_tokens``) by default."""
    if isinstance(qa_template, str):
        if qa_template != "auto":
            raise ValueError(
                f"qa_template must be 'auto', None, a query engine, a synthesizer or a prompt, got {qa_template!r}"
            )
        # the context mode scores what the LLM reads in LlamaIndex's default synthesizer: its QA prompt for
        # the LLM given, or without one (a name, a server, the service) its chat version, which a chat LLM
        # reads; the per-node modes measured best with grogu's own prompt (README, "Which rerank mode")
        auto = mode == "context" and template is None
        qa_template = (DEFAULT_TEXT_QA_PROMPT_SEL if llm is not None else CHAT_TEXT_QA_PROMPT) if auto else None
    if qa_template is not None:
        if template is not None:
            raise ValueError("give template (grogu's prompt text) or qa_template (the pipeline's prompt), not both")
        template = template_from_llama_index(qa_template, llm)
        if max_new_tokens is None and answer_budget(llm) is not None:
            max_new_tokens = answer_budget(llm)  # the answer the LLM gives, so GroguSynthesizer can reuse it
    return template, DEFAULT_MAX_NEW_TOKENS[answer_style] if max_new_tokens is None else max_new_tokens
