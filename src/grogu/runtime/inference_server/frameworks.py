"""A pipeline's own LLM object that talks to an OpenAI-compatible server, turned into a ServerTarget.

The one place both integrations read a framework LLM's connection: LlamaIndex's ``OpenAILike`` and
``OpenAI`` (``api_base``, ``api_key``, ``model``, ``max_tokens``) and LangChain's ``ChatOpenAI`` and
``OpenAI`` (``openai_api_base``, ``openai_api_key``, ``model_name``, ``max_tokens``; no base URL means
``OPENAI_BASE_URL`` or the hosted OpenAI API, as the ``openai`` client reads it). vLLM, SGLang and
llama-cpp-python servers and llama.cpp's llama-server (teacher forcing by a token grammar) give a full
target. The hosted OpenAI API, Ollama (``api="ollama"``) and other chat-only servers give a grounded-only
one (``api="chat"``: ``metric="entropy"`` or ``"ppl"``, see
:mod:`grogu.runtime.inference_server.server_target`).
"""

from __future__ import annotations

import os
import threading
import warnings
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


#: greedy, neutral decoding: each sampling field a framework LLM may carry, and the values that leave it
#: off (None: not sent, so the server's default applies; for ``temperature`` that is not greedy)
_NEUTRAL = {
    "temperature": (0, 0.0),
    "top_p": (None, 1, 1.0),
    "top_k": (None, -1, 0),
    "min_p": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    "repeat_penalty": (None, 1, 1.0),
}
#: where LlamaIndex (``additional_kwargs``) and LangChain (``model_kwargs``, ``extra_body``) keep fields
#: the request carries besides their own attributes
_EXTRA_FIELDS = ("additional_kwargs", "model_kwargs", "extra_body")


def sampling_differences(llm: Any) -> dict[str, Any]:
    """The sampling settings of a framework LLM that are not greedy and neutral, as its requests will send
    them: its own attributes, and what ``additional_kwargs`` / ``model_kwargs`` / ``extra_body`` add.
    An unset ``temperature`` counts: the server's default then applies."""
    seen: dict[str, Any] = {}
    for name in _NEUTRAL:
        if hasattr(llm, name):
            seen[name] = getattr(llm, name)
    for field in _EXTRA_FIELDS:
        extra = getattr(llm, field, None)
        if isinstance(extra, dict):
            seen.update({k: v for k, v in extra.items() if k in _NEUTRAL})
            if isinstance(extra.get("extra_body"), dict):
                seen.update({k: v for k, v in extra["extra_body"].items() if k in _NEUTRAL})
    seen.setdefault("temperature", None)
    return {k: v for k, v in seen.items() if not any(v is n or (n is not None and v == n) for n in _NEUTRAL[k])}


def _warn_sampling(llm: Any, conn: dict[str, Any]) -> None:
    differ = sampling_differences(llm)
    if differ:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(differ.items()))
        warnings.warn(
            f"{type(llm).__name__} for {conn['model']} at {conn['base_url']} does not decode greedily ({shown}). "
            "grogu scores the greedy answer, so the pipeline's answer may differ from the scored one. "
            "Set temperature=0 and neutral penalties on the LLM; see docs/usage.md, 'LLMs behind an "
            "inference server'.",
            UserWarning,
            stacklevel=3,
        )


def target_from_llm(llm: Any, **settings: Any) -> ServerTarget | None:
    """The :class:`ServerTarget` of a framework LLM that calls an OpenAI-compatible server (its URL, model
        name and key; ``settings`` go to ServerTarget: ``api``, ``tokenizer``, ``top_logprobs``...), else None.
        The hosted OpenAI API and servers grogu does not know as vLLM, SGLang, llama-cpp-python or llama-server
        (Ollama...) give a grounded-only chat target (``api="chat"``, :func:`grogu.runtime.inference_server.apis.choose_api`). One target
        per (URL, model, key, settings) in a process. When the target is made, a warning names the LLM's sampling
    settings that are not greedy and neutral (:func:`sampling_differences`): the pipeline's answer would then
    not be the one grogu scores."""
    conn = server_connection(llm)
    if conn is None:
        return None
    key = (conn["base_url"], conn["model"], conn["api_key"], tuple(sorted((k, repr(v)) for k, v in settings.items())))
    with _LOCK:  # one target per server, model and settings in a process (its tokenizer is loaded once)
        if key not in _TARGETS:
            _TARGETS[key] = ServerTarget(conn["base_url"], conn["model"], api_key=conn["api_key"], **settings)
            _warn_sampling(llm, conn)  # once per target
        return _TARGETS[key]


__all__ = ["server_connection", "target_from_llm", "sampling_differences"]
