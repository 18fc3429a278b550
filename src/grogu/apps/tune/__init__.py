"""``grogu tune``: fit the rerank decision to the user's own LLM and QA prompt from a few labelled questions
(:func:`tune`; the command line is :mod:`grogu.apps.tune.cli`). docs/tune.md tells the whole story."""

from __future__ import annotations

from .api import collect_records, prompt_template, template_from_text, tune

__all__ = ["tune", "collect_records", "prompt_template", "template_from_text"]
