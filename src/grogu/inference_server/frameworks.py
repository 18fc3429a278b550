"""A pipeline's own LLM object that talks to an OpenAI-compatible server, turned into a ServerTarget.

The one place both integrations read a framework LLM's connection: LlamaIndex's ``OpenAILike`` and
``OpenAI`` (``api_base``, ``api_key``, ``model``, ``max_tokens``) and LangChain's ``ChatOpenAI`` and
``OpenAI`` (``openai_api_base``, ``openai_api_key``, ``model_name``, ``max_tokens``; no base URL means
``OPENAI_BASE_URL`` or the hosted OpenAI API, as the ``openai`` client reads it). vLLM, SGLang and
llama-cpp-python servers give a full target. llama.cpp's llama-server gives a grounded-only one unless
``grammar_forcing=True`` is among the settings. The hosted OpenAI API, Ollama and other chat-only
servers give a grounded-only one (``api="chat"``: ``metric="entropy"`` or ``"ppl"``, see
:mod:`grogu.inference_server.server_target`).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from .server_target import ServerTarget

_TARGETS: dict[tuple, ServerTarget] = {}
_LOCK = threading.Lock()

_URL_FIELDS = ("api_base", "openai_api_base", "base_url")
_KEY_FIELDS = ("api_key", "openai_api_key")
_MODEL_FIELDS = ("model", "model_name")
_DEFAULT_OPENAI = "https://api.openai.com/v1"


def _first(obj: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def server_connection(llm: Any) -> dict[str, Any] | None:
    """``{"base_url", "model", "api_key", "max_tokens"}`` of a framework LLM that calls an OpenAI-compatible
    server, or None when ``llm`` is not one."""
    url = _first(llm, _URL_FIELDS)
    if url is None and hasattr(llm, "openai_api_base") and getattr(llm, "azure_endpoint", None) is None:
        url = os.environ.get("OPENAI_BASE_URL") or _DEFAULT_OPENAI  # LangChain's OpenAI classes: the client's default
    model = _first(llm, _MODEL_FIELDS)
    if not isinstance(url, str) or not isinstance(model, str):
        return None
    key = _first(llm, _KEY_FIELDS)
    if hasattr(key, "get_secret_value"):  # pydantic SecretStr (LangChain)
        key = key.get_secret_value()
    budget = getattr(llm, "max_tokens", None)
    return {
        "base_url": url,
        "model": model,
        "api_key": key if isinstance(key, str) and key else None,
        "max_tokens": budget if isinstance(budget, int) and budget > 0 else None,
    }


def target_from_llm(llm: Any, **settings: Any) -> ServerTarget | None:
    """The :class:`ServerTarget` of a framework LLM that calls an OpenAI-compatible server (its URL, model
    name and key; ``settings`` go to ServerTarget: ``api``, ``tokenizer``, ``top_logprobs``...), else None.
    The hosted OpenAI API and servers grogu does not know as vLLM, SGLang, llama-cpp-python or llama-server
    (Ollama...) give a grounded-only chat target (``api="chat"``, :func:`grogu.inference_server.apis.choose_api`). One target
    per (URL, model, key, settings) in a process."""
    conn = server_connection(llm)
    if conn is None:
        return None
    key = (conn["base_url"], conn["model"], conn["api_key"], tuple(sorted((k, repr(v)) for k, v in settings.items())))
    with _LOCK:  # one target per server, model and settings in a process (its tokenizer is loaded once)
        if key not in _TARGETS:
            _TARGETS[key] = ServerTarget(conn["base_url"], conn["model"], api_key=conn["api_key"], **settings)
        return _TARGETS[key]


__all__ = ["server_connection", "target_from_llm"]
