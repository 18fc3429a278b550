"""GroguRerank's settings: grogu's checks of its fields, and the prompt it scores with (the scorer
itself comes from grogu.rerank.factory.build_scorer)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from llama_index.core.callbacks import CallbackManager
from llama_index.core.llms import LLM
from llama_index.core.prompts.chat_prompts import CHAT_TEXT_QA_PROMPT
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_TEXT_QA_PROMPT_SEL

import grogu
from grogu.rerank.scorer import DEFAULT_MAX_NEW_TOKENS

from .prompts import source_llm, template_from_llama_index
from .utils import answer_budget


def callback_manager(value: Any) -> Any:
    """None: a callback manager of its own, as LlamaIndex's components make one."""
    return CallbackManager([]) if value is None else value


#: each LlamaIndex-only field's check, given the value before pydantic reads it (the settings both
#: integrations share carry grogu's checks in grogu.apps.integration_settings)
FIELD_CHECKS: Dict[str, Callable[[Any], Any]] = {"callback_manager": callback_manager}


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
        # scored on a name, a server or the service, the prompt is still read by the pipeline's own LLM
        reader = llm if llm is not None else source_llm(qa_template)
        template = template_from_llama_index(qa_template, reader)
        if max_new_tokens is None and answer_budget(reader) is not None:
            max_new_tokens = answer_budget(reader)  # the answer the LLM gives, so GroguSynthesizer can reuse it
    return template, DEFAULT_MAX_NEW_TOKENS[answer_style] if max_new_tokens is None else max_new_tokens
