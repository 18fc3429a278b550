"""Score with the prompt the chain's LLM actually reads: a grogu template from a LangChain prompt."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.prompts import BasePromptTemplate

from grogu import PromptTemplate
from grogu.core.prompts import template_from_messages
from grogu.core.target import Target

_CONTEXT, _QUERY = "\x00grogu-context\x00", "\x00grogu-query\x00"
_ROLES = {"system": "system", "human": "user"}


def template_from_langchain(
    prompt: BasePromptTemplate,
    llm: Any = None,
    *,
    context_key: str = "context",
    question_key: str = "question",
    separator: str = "\n\n",
) -> PromptTemplate:
    """A grogu template that renders exactly what ``llm`` reads from ``prompt``.

    ``prompt``: the chain's prompt, with the documents in ``context_key`` (joined by ``separator``, as
    the usual ``format_docs`` does) and the question in ``question_key``. A chat model
    (``ChatHuggingFace``, ``ChatOpenAI``, a ``grogu.ServerTarget`` on a chat API) reads the messages
    through its chat template; a completion LLM (``HuggingFacePipeline``) reads the prompt as one
    string, which is scored as it is.
    """
    if not isinstance(prompt, BasePromptTemplate):
        raise TypeError(f"prompt must be a LangChain prompt template, got {type(prompt).__name__}")
    missing = {context_key, question_key} - set(prompt.input_variables)
    if missing:
        raise ValueError(f"the prompt has no {sorted(missing)} variable(s); its variables: {prompt.input_variables}")
    value = prompt.invoke({context_key: _CONTEXT, question_key: _QUERY})
    chat = isinstance(llm, BaseChatModel) or (isinstance(llm, Target) and llm.takes_messages)  # a chat-API target
    if llm is not None and not chat:
        return template_from_messages(
            [("user", value.to_string())], context=_CONTEXT, query=_QUERY, separator=separator, chat=False
        )
    messages = []
    for m in value.to_messages():
        if m.type not in _ROLES:
            raise ValueError(f"grogu can score system and human messages, not {m.type!r} ones")
        if not isinstance(m.content, str):
            raise ValueError("grogu can score text messages only")
        messages.append((_ROLES[m.type], m.content))
    return template_from_messages(messages, context=_CONTEXT, query=_QUERY, separator=separator)
