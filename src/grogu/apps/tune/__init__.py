"""``grogu tune``: fit the rerank decision to the user's own LLM and QA prompt from a few labelled questions
(:func:`tune`; the command line is :mod:`grogu.apps.tune.cli`). docs/tune.md tells the whole story."""

from ...core.exports import lazy_names

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
