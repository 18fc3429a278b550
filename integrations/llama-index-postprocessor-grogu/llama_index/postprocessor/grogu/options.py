"""GroguRerank's settings: the checks that tie them together and the prompt it scores with (the scorer
itself comes from grogu.scorer_factory.build_scorer)."""

from __future__ import annotations

from typing import Any, Optional, Tuple

from llama_index.core.llms import LLM
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_TEXT_QA_PROMPT_SEL

import grogu
from grogu.checks import check_choice
from grogu.rerank import DEFAULT_MODE

from .prompts import template_from_llama_index
from .utils import answer_budget

LAYOUT_MODES = ("after", "only")


def layout_and_mode(
    layout: Optional[str], mode: Optional[str], threshold: Optional[float]
) -> Tuple[Optional[str], str]:
    """The checked layout and the rerank mode it implies (a layout needs per-node rankings)."""
    layout = check_choice("layout", layout, (None, *LAYOUT_MODES))
    if layout == "only" and threshold is not None:
        raise ValueError(
            "threshold needs per-node utilities, which layout='only' does not compute; "
            "use layout='after' or drop the threshold"
        )
    if mode is None:
        return layout, "document" if layout is not None else DEFAULT_MODE
    if layout is not None and mode != "document":
        raise ValueError(f"layout chooses among orders of per-node rankings: it needs mode='document', got {mode!r}")
    return layout, mode


def scoring_prompt(
    qa_template: Any,
    template: Optional[grogu.PromptTemplate],
    mode: str,
    llm: Optional[LLM],
    max_new_tokens: Optional[int],
) -> Tuple[Optional[grogu.PromptTemplate], int]:
    """The prompt grogu scores with and the answer budget, from ``qa_template`` / ``template`` (see
    ``GroguRerank``): with the pipeline's own prompt, the LLM's own ``max_new_tokens`` (``max_tokens``) by default."""
    if isinstance(qa_template, str):
        if qa_template != "auto":
            raise ValueError(
                f"qa_template must be 'auto', None, a query engine, a synthesizer or a prompt, got {qa_template!r}"
            )
        # the context mode scores what the LLM reads in LlamaIndex's default synthesizer; the
        # per-node modes measured best with grogu's own prompt (README, "Which rerank mode")
        auto = mode == "context" and llm is not None and template is None
        qa_template = DEFAULT_TEXT_QA_PROMPT_SEL if auto else None
    if qa_template is not None:
        if template is not None:
            raise ValueError("give template (grogu's prompt text) or qa_template (the pipeline's prompt), not both")
        template = template_from_llama_index(qa_template, llm)
        if max_new_tokens is None and answer_budget(llm) is not None:
            max_new_tokens = answer_budget(llm)  # the answer the LLM gives, so GroguSynthesizer can reuse it
    return template, 64 if max_new_tokens is None else max_new_tokens
