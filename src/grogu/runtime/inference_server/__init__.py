"""The target LLM behind an inference server (vLLM, SGLang, llama.cpp; grounded-only through a chat API:
OpenAI, Ollama): :class:`ServerTarget`. Each server API is one class implementing :class:`ServerAPI`,
registered in :data:`APIS_BY_NAME`."""

from typing import TYPE_CHECKING

from ...core.exports import lazy_names

if TYPE_CHECKING:  # what static tools see; at run time each name is imported on first use
    from .apis import APIS, APIS_BY_NAME, choose_api  # noqa: F401
    from .frameworks import sampling_differences, server_connection, target_from_llm  # noqa: F401
    from .protocol import ServerAPI  # noqa: F401
    from .server_target import ServerCapabilityError, ServerError, ServerTarget  # noqa: F401
    from .topk import DEFAULT_TAIL, TAILS, topk_entropy  # noqa: F401

__getattr__, __dir__ = lazy_names(
    __name__,
    {
        "APIS": ".apis",
        "APIS_BY_NAME": ".apis",
        "choose_api": ".apis",
        "sampling_differences": ".frameworks",
        "server_connection": ".frameworks",
        "target_from_llm": ".frameworks",
        "ServerAPI": ".protocol",
        "ServerCapabilityError": ".server_target",
        "ServerError": ".server_target",
        "ServerTarget": ".server_target",
        "DEFAULT_TAIL": ".topk",
        "TAILS": ".topk",
        "topk_entropy": ".topk",
    },
)

__all__ = [
    "ServerTarget",
    "ServerError",
    "ServerCapabilityError",
    "APIS",
    "APIS_BY_NAME",
    "ServerAPI",
    "TAILS",
    "DEFAULT_TAIL",
    "topk_entropy",
    "server_connection",
    "target_from_llm",
    "sampling_differences",
    "choose_api",
]
