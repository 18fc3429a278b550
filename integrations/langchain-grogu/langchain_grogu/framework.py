"""LangChain as grogu sees it: the adapter that lets ``grogu.tune`` read LangChain prompts and LLMs.

The package registers it on import and advertises it in the ``grogu.frameworks`` entry-point group
(:mod:`grogu.core.frameworks`). grogu itself imports nothing of this package.
"""

from __future__ import annotations

from typing import Any

from grogu.core.frameworks import FrameworkAdapter

from .prompts import template_from_langchain
from .target import answer_budget, resolve_engine


def owns(obj: Any) -> bool:
    """Whether ``obj`` is a LangChain object (its class lives in a ``langchain*`` module)."""
    return (type(obj).__module__ or "").startswith("langchain")


FRAMEWORK = FrameworkAdapter(
    name="langchain",
    owns=owns,
    prompt_template=template_from_langchain,
    resolve_engine=resolve_engine,
    answer_budget=answer_budget,
)

__all__ = ["FRAMEWORK", "owns"]
