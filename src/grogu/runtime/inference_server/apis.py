"""Which API an inference server speaks, and what grogu can score through it.

APIs (``api=``):

- ``"vllm"``: vLLM's OpenAI-compatible ``/v1/completions`` with token-id prompts,
  ``return_tokens_as_token_ids`` and ``prompt_logprobs`` (start vLLM with ``--max-logprobs`` at least
  ``top_logprobs``); bodies and parsing in :mod:`grogu.runtime.inference_server.requests`.
- ``"sglang"``: SGLang's native ``/generate`` endpoint: token-id prompts, greedy decoding with every
  sampling field sent neutral, each token's top-k with ids, and teacher forcing through its prompt
  log-probabilities (``logprob_start_len``). Its OpenAI completions API returns no prompt
  log-probabilities. Not verified against a real SGLang server. Details: :mod:`grogu.runtime.inference_server.sglang`.
- ``"llama-cpp"``: llama-cpp-python's server (``python -m llama_cpp.server``, ``logits_all`` on, its
  default): text prompts (the special tokens are parsed by the server), ``echo`` with ``logprobs``
  for the prompt's log-probabilities.
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
  returns, and scoring it is an error.

``api="auto"`` (:func:`choose_api`) takes ``"vllm"``, ``"llama-cpp"``, ``"llama-server"`` or ``"sglang"``
when ``/v1/models`` names vLLM, llama-cpp-python, llama.cpp's ``llama-server`` (``"llamacpp"``) or SGLang as
the owner. Another owner gets one ``/api/version`` request: ``"ollama"`` when Ollama answers it. It takes
``"chat"`` for the hosted OpenAI API (no listing request is made there) and any other server.
``api="chat"`` given explicitly still reaches SGLang's chat API (for a proxy in front of it). A server that does return prompt log-probabilities
behind an unknown owner (a proxy) is scored fully with ``api="vllm"`` or ``"llama-cpp"`` given
explicitly.
"""

from __future__ import annotations

from typing import Any, Iterable
from urllib.parse import urlparse

APIS = ("vllm", "llama-cpp", "llama-server", "sglang", "ollama", "chat")
#: the APIs that take chat messages and generate only (grounded-only)
CHAT_APIS = ("chat", "ollama")
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
#: the servers grogu scores through their own completions endpoint with token ids (their api= name)
_COMPLETIONS = ("vllm", "llama-cpp", "llama-server", "sglang")
#: hosts of the hosted OpenAI API (chat only; it wants ``max_completion_tokens``)
OPENAI_HOSTS = ("api.openai.com",)
#: the most alternatives per token the OpenAI chat API returns (``top_logprobs`` 0..20); Ollama's too
CHAT_MAX_TOP_LOGPROBS = 20


def is_hosted_openai(base_url: str) -> bool:
    """Whether ``base_url`` is the hosted OpenAI API."""
    return urlparse(base_url).hostname in OPENAI_HOSTS


def choose_api(base_url: str, owners: Iterable[str]) -> str:
    """The API flavour ``api="auto"`` takes for a server.

    ``"vllm"`` or ``"llama-cpp"`` when its models are owned by vLLM or llama-cpp-python (their
    completions endpoints return prompt log-probabilities). ``"llama-server"`` for llama.cpp's
    ``llama-server`` (``"llamacpp"``), ``"sglang"`` for SGLang (its native ``/generate``). Else
    ``"chat"``: the hosted OpenAI API and any server grogu does not know (Ollama is told by
    ``/api/version``, in :class:`~grogu.runtime.inference_server.ServerTarget`), whose chat endpoint returns
    generated tokens' log-probabilities only."""
    if is_hosted_openai(base_url):
        return "chat"
    backend = server_backend(owners)
    return backend if backend in _COMPLETIONS else "chat"


def server_backend(owners: Iterable[str]) -> str | None:
    """``"vllm"``, ``"sglang"``, ``"llama-cpp"`` (llama-cpp-python) or ``"llama-server"`` (llama.cpp's own)
    from the ``owned_by`` fields of a server's ``/v1/models`` entries, else None."""
    for owner in sorted(str(o).lower() for o in owners):
        if owner in _OWNERS:
            return _OWNERS[owner]
    return None


def check_chat_settings(tokenizer: Any, context_window: Any, stop_token_ids: Any) -> None:
    """Refuse the settings that do not apply to ``api="chat"`` or ``"ollama"``."""
    if context_window is not None and tokenizer is None:
        raise ValueError(
            "context_window is used to cut documents to fit, which needs the model's tokenizer: "
            "pass tokenizer= too, or leave context_window out (the server then refuses a prompt "
            "that does not fit, with its own message)"
        )
    if stop_token_ids is not None:
        raise ValueError(
            "stop_token_ids do not apply to api='chat': the server ends the answer at the end of its chat turn"
        )


def no_teacher_forcing(target: str, api: str, what: str) -> str:
    """Why ``what`` fails on a grounded-only target, what works through it, and how to get the rest."""
    if api == "llama-server":
        why = (
            "llama-server returns no prompt log-probabilities, and teacher forcing through a token-id grammar "
            "was switched off (grammar_forcing=False). Leave grammar_forcing at its default to turn it on "
            "(see grogu.runtime.inference_server.llama_server)"
        )
    else:
        why = "a chat API returns log-probabilities of the tokens it generates only, no prompt log-probabilities"
    return (
        f"{what} needs teacher forcing (a given answer's log-probabilities under another prompt), which "
        f"{target} cannot do: {why}. Through this target choose metric='entropy' or metric='ppl' "
        "(UtilityScorer and the integrations' rerankers: the grounded answer's mean token entropy or "
        "perplexity), InfluenceScorer with method='exact', 'ablation' or 'auto', or SePerScorer. For the "
        "other metrics serve the model with vLLM (api='vllm'), SGLang (api='sglang') or llama-cpp-python's "
        "server (api='llama-cpp'), which return prompt log-probabilities"
    )
