"""What every API's requests and answers share: the prompts' check, a token position's statistics
(:class:`Step`), the stop token names a chat answer may end with, and the sampling fields of the
OpenAI-compatible routes.

Each API's own bodies and parsing live in its module (:mod:`grogu.runtime.inference_server.apis` lists
them). Bodies follow each server's own protocol classes (the fixtures in ``tests/test_server_requests.py``
name the file and commit they were read from).

The sampling fields a request leaves out are filled by the server: vLLM takes them from the model's
``generation_config.json`` (or ``--override-generation-config``), llama.cpp from its command line. So the
neutral ones are sent explicitly. Which set goes with a request is told from the server behind the URL
(:func:`~grogu.runtime.inference_server.apis.server_sampling`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...core.prompts import ChatPrompt

STOP_TOKEN_NAMES = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>")
#: the penalties no server may fill in: vLLM takes them from the model's generation_config.json (or
#: --override-generation-config) when a request leaves them out, llama.cpp from its command line
NEUTRAL_PENALTIES = {"presence_penalty": 0.0, "frequency_penalty": 0.0}
#: sampling fields that vLLM would otherwise fill from the model's generation_config.json
NEUTRAL_SAMPLING = {"repetition_penalty": 1.0, "top_k": -1, "min_p": 0.0, **NEUTRAL_PENALTIES}


@dataclass
class Step:
    """One token position: the token's log-probability and the top-k log-probabilities there."""

    logprob: float
    top: list[float]


def _base(temperature: float | None, seed: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"temperature": 0.0 if temperature is None else float(temperature), "top_p": 1.0}
    if seed is not None:
        body["seed"] = int(seed)
    return body


def openai_sampling(temperature: float | None, seed: int | None) -> dict[str, Any]:
    """The OpenAI fields any server may fill from its own defaults: greedy when ``temperature`` is None."""
    return {**_base(temperature, seed), **NEUTRAL_PENALTIES}


def neutral_sampling(temperature: float | None, seed: int | None) -> dict[str, Any]:
    """vLLM's and SGLang's OpenAI routes: the fields they would fill from the model's generation config."""
    return {**_base(temperature, seed), **NEUTRAL_SAMPLING}


def llama_cpp_sampling(temperature: float | None, seed: int | None) -> dict[str, Any]:
    """llama-cpp-python's routes: llama.cpp samples with a repeat penalty, top-k and min-p on by default."""
    top_k = 0 if temperature is not None else 1
    return {**_base(temperature, seed), "repeat_penalty": 1.0, "top_k": top_k, "min_p": 0.0, **NEUTRAL_PENALTIES}


def check_prompts(prompts: Sequence[Any], takes_messages: bool, api: str) -> list[Any]:
    """The prompts of a call: :class:`~grogu.core.prompts.ChatPrompt` messages for an API that takes
    messages, else non-empty token-id lists."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError("prompts must be a list of prompts (render them with grogu.core.prompts.PromptBuilder)")
    if takes_messages:
        if not all(isinstance(p, ChatPrompt) for p in prompts):
            raise TypeError(
                f"a ServerTarget with api={api!r} takes grogu.core.prompts.ChatPrompt messages (the server "
                "applies the chat template); PromptBuilder.for_target(target, ...) renders them"
            )
        return list(prompts)
    if any(isinstance(p, ChatPrompt) for p in prompts):
        raise TypeError(f"a ServerTarget with api={api!r} takes token-id prompts, not ChatPrompt messages")
    out = [[int(t) for t in p] for p in prompts]
    if any(not p for p in out):
        raise ValueError("a prompt has no tokens")
    return out


__all__ = [
    "check_prompts",
    "Step",
    "STOP_TOKEN_NAMES",
    "NEUTRAL_PENALTIES",
    "NEUTRAL_SAMPLING",
    "openai_sampling",
    "neutral_sampling",
    "llama_cpp_sampling",
]
