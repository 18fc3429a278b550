"""The target LLM behind an inference server (vLLM, SGLang, llama.cpp): :class:`ServerTarget`."""

from .target import APIS, ServerCapabilityError, ServerError, ServerTarget
from .frameworks import server_connection, target_from_llm
from .topk import DEFAULT_TAIL, TAILS, topk_entropy

__all__ = ["ServerTarget", "ServerError", "ServerCapabilityError", "APIS", "TAILS", "DEFAULT_TAIL", "topk_entropy",
           "server_connection", "target_from_llm"]
