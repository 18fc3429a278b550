"""Which API an inference server speaks, and what grogu can score through it.

APIs (``api=``):

- ``"vllm"``: vLLM's OpenAI-compatible ``/v1/completions`` with token-id prompts,
  ``return_tokens_as_token_ids`` and ``prompt_logprobs`` (start vLLM with ``--max-logprobs`` at least
  ``top_logprobs``). Details: :mod:`grogu.runtime.inference_server.vllm`.
- ``"sglang"``: SGLang's native ``/generate`` endpoint: token-id prompts, greedy decoding with every
  sampling field sent neutral, each token's top-k with ids, and teacher forcing through its prompt
  log-probabilities (``logprob_start_len``). Its OpenAI completions API returns no prompt
  log-probabilities. Not verified against a real SGLang server. Details: :mod:`grogu.runtime.inference_server.sglang`.
- ``"llama-cpp"``: llama-cpp-python's server (``python -m llama_cpp.server``, ``logits_all`` on, its
  default): text prompts (the special tokens are parsed by the server), ``echo`` with ``logprobs``
  for the prompt's log-probabilities. Details: :mod:`grogu.runtime.inference_server.llama_cpp`.
- ``"llama-server"``: llama.cpp's own ``llama-server`` through its native ``/completion`` endpoint:
  token-id prompts, greedy decoding with every sampler field sent neutral, each token's top-k with ids.
  It returns no prompt log-probabilities. So grogu teacher-forces an answer through a token-id grammar
  (``grammar_forcing``, on by default; ``False`` makes the target grounded-only). Details:
  :mod:`grogu.runtime.inference_server.llama_server`.
- ``"ollama"``, grounded-only: Ollama's native ``/api/chat``, the prompt as messages, with every sampler
  option pinned neutral (its OpenAI route cannot set ``repeat_penalty`` or ``top_k``, so a Modelfile's
  apply there) and ``truncate: false`` (a prompt that does not fit is an error, not silently cut).
  Otherwise as ``"chat"`` below. Details: :mod:`grogu.runtime.inference_server.ollama`.
- ``"chat"``, grounded-only: ``/v1/chat/completions`` with the prompt as messages (an optional system
  message and one user message, the scorer's template text; the server applies its own chat template),
  ``logprobs: true``, ``top_logprobs: k`` (at most 20), ``temperature: 0`` and the answer budget as
  ``max_completion_tokens`` for the hosted OpenAI API, ``max_tokens`` for every other server. For the
  hosted OpenAI API, Ollama (version 0.12.11 or later) and the chat endpoint of any OpenAI-compatible
  server. A chat API returns the log-probabilities of the tokens it generates only, so there is no
  teacher forcing: :attr:`grounded_only` is True, :meth:`token_stats` raises
  :class:`ServerCapabilityError`, and the metrics that work are those of the grounded answer alone,
  ``entropy`` and ``ppl`` (``UtilityScorer`` refuses the others when it is made); exact and ablation
  Influence and ΔSePer need generations only and work. The tokenizer is optional there: without one,
  documents are not cut to the context window (the server's own error says when a prompt does not
  fit), answer tokens are the strings the server returns (their ids are
  :data:`~grogu.core.types.UNKNOWN_TOKEN_ID`), and the entropy's tail correction is ``"min"`` unless
  ``vocab_size`` is given. An empty answer (the end-of-turn token first) has no statistics a chat API
  returns, and scoring it is an error. Details: :mod:`grogu.runtime.inference_server.chat`.

``api="auto"`` (:func:`choose_api`) takes ``"vllm"``, ``"llama-cpp"``, ``"llama-server"`` or ``"sglang"``
when ``/v1/models`` names vLLM, llama-cpp-python, llama.cpp's ``llama-server`` (``"llamacpp"``) or SGLang as
the owner. Another owner gets one ``/api/version`` request: ``"ollama"`` when Ollama answers it. It takes
``"chat"`` for the hosted OpenAI API (no listing request is made there) and any other server.
``api="chat"`` given explicitly still reaches SGLang's chat API (for a proxy in front of it). A server that does return prompt log-probabilities
behind an unknown owner (a proxy) is scored fully with ``api="vllm"`` or ``"llama-cpp"`` given
explicitly.

Each API is one class in its own module, implementing :class:`~grogu.runtime.inference_server.protocol.ServerAPI`.
:data:`APIS_BY_NAME` is the registry: a new server is a new module and one line there. The API is chosen
here once, when a target connects (:func:`discover`, :func:`settle`), and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable
from urllib.parse import urlparse

from ...core.target import ServerCapabilityError
from .base import BaseAPI, Settings
from .chat import ChatAPI
from .http import Connection
from .listing import only_model, served_models
from .llama_cpp import LlamaCppAPI
from .llama_server import LlamaServerAPI, auto_tokenizer, llama_server_sampling
from .ollama import MIN_VERSION, OllamaAPI, ollama_version
from .requests import llama_cpp_sampling, neutral_sampling, openai_sampling
from .sglang import SglangAPI
from .vllm import VllmAPI

#: every API by its ``api=`` name: a new server is one module and one line here
APIS_BY_NAME: dict[str, type[BaseAPI]] = {
    "vllm": VllmAPI,
    "llama-cpp": LlamaCppAPI,
    "llama-server": LlamaServerAPI,
    "sglang": SglangAPI,
    "ollama": OllamaAPI,
    "chat": ChatAPI,
}
APIS = tuple(APIS_BY_NAME)
#: ``owned_by`` of a server's ``/v1/models`` entries -> the server that runs behind (its completions API).
#: llama.cpp's own ``llama-server`` ("llamacpp") is scored through its native /completion endpoint, SGLang
#: ("sglang") through its native /generate. llama-cpp-python says "me", a generic value: /extras/tokenize
#: confirms it on first use
_OWNERS = {
    "vllm": "vllm",
    "sglang": "sglang",
    "me": "llama-cpp",
    "llama-cpp": "llama-cpp",
    "llamacpp": "llama-server",
}
#: the servers whose model name may name no tokenizer (a GGUF file name): without tokenizer= they are
#: scored through their chat API
_NAMED_BY_FILE = ("llama-server", "sglang")
#: hosts of the hosted OpenAI API (chat only; it wants ``max_completion_tokens``)
OPENAI_HOSTS = ("api.openai.com",)


def is_hosted_openai(base_url: str) -> bool:
    """Whether ``base_url`` is the hosted OpenAI API."""
    return urlparse(base_url).hostname in OPENAI_HOSTS


def choose_api(base_url: str, owners: Iterable[str]) -> str:
    """The API flavour ``api="auto"`` takes for a server.

    ``"vllm"`` or ``"llama-cpp"`` when its models are owned by vLLM or llama-cpp-python (their
    completions endpoints return prompt log-probabilities). ``"llama-server"`` for llama.cpp's
    ``llama-server`` (``"llamacpp"``), ``"sglang"`` for SGLang (its native ``/generate``). Else
    ``"chat"``: the hosted OpenAI API and any server grogu does not know (Ollama is told by
    ``/api/version``, in :func:`discover`), whose chat endpoint returns generated tokens'
    log-probabilities only."""
    if is_hosted_openai(base_url):
        return "chat"
    backend = server_backend(owners)  # each server _OWNERS names is scored through its own API
    return backend if backend is not None else "chat"


def server_backend(owners: Iterable[str]) -> str | None:
    """``"vllm"``, ``"sglang"``, ``"llama-cpp"`` (llama-cpp-python) or ``"llama-server"`` (llama.cpp's own)
    from the ``owned_by`` fields of a server's ``/v1/models`` entries, else None."""
    for owner in sorted(str(o).lower() for o in owners):
        if owner in _OWNERS:
            return _OWNERS[owner]
    return None


def server_sampling(api: str, backend: str | None) -> Callable[[float | None, int | None], dict[str, Any]]:
    """The neutral sampling fields of the OpenAI-compatible routes for ``api`` on the server ``backend``."""
    if "llama-cpp" in (api, backend):  # llama.cpp samples with these on by default
        return llama_cpp_sampling
    if backend == "llama-server" and api == "chat":  # its chat route passes all its sampler fields through
        return llama_server_sampling
    if api == "vllm" or backend in ("vllm", "sglang"):  # else from the model's generation_config
        return neutral_sampling
    return openai_sampling  # any other chat API: the OpenAI fields a server may fill from its own defaults


def api_class(api: str, base_url: str) -> type[BaseAPI] | None:
    """The class of ``api`` when it is known before any request (named, or ``"auto"`` on the hosted
    OpenAI API), else None (``"auto"``: told on connecting). Refuses an unknown name, and Ollama on the
    hosted OpenAI API."""
    if api not in APIS + ("auto",):
        raise ValueError(f"api must be 'auto' or one of {APIS}, got {api!r}")
    if is_hosted_openai(base_url):
        if api == "ollama":
            raise ValueError(f"api='ollama' needs an Ollama server, not the hosted OpenAI API at {base_url}")
        return ChatAPI if api == "auto" else APIS_BY_NAME[api]
    return None if api == "auto" else APIS_BY_NAME[api]


@dataclass
class Discovery:
    """What connecting found: the listing, the served model, the server behind the URL and its API."""

    entries: list[dict[str, Any]]
    model_name: str
    #: the server behind the URL when its listing (or ``/api/version``) names it, else None
    backend: str | None
    #: the ``api=`` name, "auto" resolved (but for :func:`settle`)
    api: str
    #: the API was told from the server (``api="auto"``)
    detected: bool


async def discover(http: Connection, settings: Settings) -> Discovery:
    """The server's listing (none for the hosted OpenAI API), the model checked against it, and the API:
    ``"auto"`` resolved by :func:`choose_api`, or ``"ollama"`` when ``/api/version`` answers as Ollama does."""
    base_url, api, model = settings.base_url, settings.api, settings.model
    detected = api == "auto"
    if settings.hosted_openai:  # no listing request (an unknown model is an error on first use)
        name = model if model is not None else only_model(await served_models(http), base_url)
        return Discovery([], name, None, "chat" if detected else api, detected)
    entries = await served_models(http)
    name = model if model is not None else only_model(entries, base_url)
    served = [m.get("id") for m in entries]
    if name not in served:  # some servers (llama-cpp-python) answer for any name
        raise ValueError(f"the LLM server at {base_url} does not serve model {name!r}; it serves {served}")
    owners = [str(m.get("owned_by", "")) for m in entries]
    backend = server_backend(owners)
    if api in ("auto", "ollama") and backend is None:
        version = await ollama_version(http, base_url[: -len("/v1")])
        if version is not None:
            backend = "ollama"
            if version < MIN_VERSION:
                raise ServerCapabilityError(
                    f"the Ollama server at {base_url} is version {'.'.join(map(str, version))}, whose "
                    "/api/chat returns no log-probabilities; grogu needs 0.12.11 or later"
                )
    if api == "ollama" and backend != "ollama":
        raise ValueError(f"api='ollama' needs an Ollama server; {base_url} did not answer /api/version as one")
    if detected:
        api = "ollama" if backend == "ollama" else choose_api(base_url, owners)
    return Discovery(entries, name, backend, api, detected)


def settle(found: Discovery, tokenizer: Any) -> tuple[type[BaseAPI], Any, dict[str, Any]]:
    """(the API class, the tokenizer, the server's traits for :class:`~.base.Served`). A detected
    llama-server or SGLang whose model name names no tokenizer is scored through its chat API (with a
    warning)."""
    api = found.api
    if found.detected and api in _NAMED_BY_FILE and tokenizer is None:
        tokenizer = auto_tokenizer(found.model_name, api)
        api = api if tokenizer is not None else "chat"
    traits = {
        "sampling": server_sampling(api, found.backend),
        "llama_server_behind": found.backend == "llama-server",
    }
    return APIS_BY_NAME[api], tokenizer, traits


__all__ = [
    "APIS",
    "APIS_BY_NAME",
    "Discovery",
    "api_class",
    "choose_api",
    "discover",
    "is_hosted_openai",
    "server_backend",
    "server_sampling",
    "settle",
]
