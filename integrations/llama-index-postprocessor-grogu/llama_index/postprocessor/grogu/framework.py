"""LlamaIndex as grogu sees it: the adapter that lets ``grogu.tune`` read LlamaIndex prompts and LLMs.

The package registers it on import and advertises it in the ``grogu.frameworks`` entry-point group
(:mod:`grogu.core.frameworks`). grogu itself imports nothing of this package.
"""

from __future__ import annotations

from typing import Any

from llama_index.postprocessor.grogu.prompts import template_from_llama_index
from llama_index.postprocessor.grogu.utils import answer_budget, resolve_engine

from grogu.core.frameworks import FrameworkAdapter


def owns(obj: Any) -> bool:
    """Whether ``obj`` is a LlamaIndex object (its class lives in a ``llama_index`` module)."""
    return (type(obj).__module__ or "").startswith("llama_index")


FRAMEWORK = FrameworkAdapter(
    name="llama_index",
    owns=owns,
    prompt_template=template_from_llama_index,
    resolve_engine=resolve_engine,
    answer_budget=answer_budget,
)

__all__ = ["FRAMEWORK", "owns"]
