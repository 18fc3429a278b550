"""The target LLM behind an inference server (vLLM, SGLang, llama.cpp; grounded-only through a chat API:
OpenAI, Ollama): :class:`ServerTarget`."""

from .apis import APIS, choose_api
from .frameworks import sampling_differences, server_connection, target_from_llm
from .server_target import ServerCapabilityError, ServerError, ServerTarget
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
    "sampling_differences",
    "choose_api",
]
