"""The target LLM behind an inference server (vLLM, SGLang, llama.cpp; grounded-only through a chat API:
OpenAI, Ollama): :class:`ServerTarget`."""

from .frameworks import server_connection, target_from_llm
from .server_target import APIS, ServerCapabilityError, ServerError, ServerTarget, choose_api
from .topk import DEFAULT_TAIL, TAILS, topk_entropy

__all__ = [
    "ServerTarget",
    "ServerError",
    "ServerCapabilityError",
    "APIS",
    "TAILS",
    "DEFAULT_TAIL",
    "topk_entropy",
    "server_connection",
    "target_from_llm",
    "choose_api",
]
