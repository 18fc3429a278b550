"""Score with the prompt the pipeline's LLM actually reads: a grogu template from LlamaIndex's QA prompt."""

from __future__ import annotations

from typing import Any, Optional

from llama_index.core.prompts import BasePromptTemplate, SelectorPromptTemplate

import grogu
from grogu.core.prompts import template_from_messages

_CONTEXT, _QUERY = "\x00grogu-context\x00", "\x00grogu-query\x00"


def text_qa_prompt(source: Any) -> BasePromptTemplate:
    """The ``text_qa_template`` of a query engine or response synthesizer (or the prompt itself)."""
    if isinstance(source, BasePromptTemplate):
        return source
    get_prompts = getattr(source, "get_prompts", None)
    if callable(get_prompts):
        prompts = get_prompts()
        for name in ("text_qa_template", "response_synthesizer:text_qa_template"):
            if name in prompts:
                return prompts[name]
    raise TypeError(
        f"cannot find a text_qa_template in {type(source).__name__}: pass a query engine, a response "
        "synthesizer or a LlamaIndex prompt template"
    )


def source_llm(source: Any) -> Optional[Any]:
    """The LLM a response synthesizer or query engine answers with; None for a prompt or another object."""
    synthesizer = getattr(source, "_response_synthesizer", source)
    return getattr(synthesizer, "_llm", None)


def template_from_llama_index(source: Any, llm: Optional[Any] = None) -> grogu.PromptTemplate:
    """A grogu template that renders exactly what ``llm`` reads through ``source``'s QA prompt.

    ``source``: a query engine, a response synthesizer or a prompt template (a selector prompt is
    resolved for ``llm``: LlamaIndex's default has a chat and a completion version). Without ``llm``,
    a synthesizer's or query engine's own LLM, which is what reads the prompt. The context is the
    nodes' LLM text joined by blank lines, as the compact synthesizer packs it.
    """
    prompt = text_qa_prompt(source)
    if isinstance(prompt, SelectorPromptTemplate):
        prompt = prompt.select(llm if llm is not None else source_llm(source))
    variables = set(getattr(prompt, "template_vars", []) or [])
    missing = {"context_str", "query_str"} - variables if variables else set()
    if missing:
        raise ValueError(f"the QA prompt has no {sorted(missing)} variable(s): it is not a text QA prompt")
    messages = prompt.format_messages(context_str=_CONTEXT, query_str=_QUERY)
    return template_from_messages([(m.role.value, m.content or "") for m in messages], context=_CONTEXT, query=_QUERY)
