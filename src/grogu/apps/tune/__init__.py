"""``grogu tune``: fit the rerank decision to the user's own LLM and QA prompt from a few labelled questions
(:func:`tune`; the command line is :mod:`grogu.apps.tune.cli`). docs/tune.md tells the whole story."""

from __future__ import annotations

from ...core.prompts import read_prompt_file, template_from_text
from .api import collect_records, prompt_template, tune

__all__ = ["tune", "collect_records", "prompt_template", "template_from_text", "read_prompt_file"]
