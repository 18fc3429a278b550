"""``grogu tune``: fit the rerank decision to the user's own LLM and QA prompt from a few labelled questions
(:func:`tune`; the command line is :mod:`grogu.apps.tune.cli`). docs/tune.md tells the whole story."""

from typing import TYPE_CHECKING

from ...core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported on first use
    from grogu.core.prompts import read_prompt_file, template_from_text  # noqa: F401

    from .api import collect_records, prompt_template, tune  # noqa: F401

#: the public names, each imported on first use (``grogu --help`` loads no model code)
__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "tune": ".api",
        "collect_records": ".api",
        "prompt_template": ".api",
        "template_from_text": "grogu.core.prompts",
        "read_prompt_file": "grogu.core.prompts",
    },
)

__all__ = ["tune", "collect_records", "prompt_template", "template_from_text", "read_prompt_file"]
