"""Ollama through its native ``/api/chat`` endpoint (``api="ollama"``), grounded-only: :class:`OllamaAPI`.

Read from Ollama v0.33.0-rc2 (``api/types.go``, ``server/routes.go``, ``llm/llama_server.go``). It is not
run against a real Ollama here. The tests run llama.cpp in process behind a stand-in transcribed from
that source (``grogu_research.ollama_standin``). What grogu relies on:

- ``/api/chat`` at the server root takes ``messages``, ``options``, ``logprobs`` and ``top_logprobs``
  (0 to 20; else a 400). ``"stream": false`` gives one answer. Log-probabilities are those of the
  model's raw distribution (llama-server's ``n_probs``), one entry per generated token, keyed by text:
  ``logprobs: [{token, logprob, bytes, top_logprobs: [...]}]`` at the top level. No token ids, no
  prompt log-probabilities, and no entry for the end-of-turn token. So no teacher forcing:
  grounded-only, as ``api="chat"``.
- ``options`` override the Modelfile's ``PARAMETER`` lines, which override Ollama's defaults
  (``DefaultOptions``: temperature 0.8, top_k 40, top_p 0.9, repeat_last_n 64). The OpenAI route
  (``/v1``) cannot set ``top_k``, ``min_p``, ``typical_p``, ``repeat_penalty`` or ``repeat_last_n``,
  so a Modelfile's penalties bend its greedy answer: llama.cpp applies penalties before the
  temperature. Here every sampler option is sent neutral (:data:`NEUTRAL`). Unknown option keys are
  only logged by Ollama, so grogu sends none (``Options.FromMap``).
- ``truncate: false``: a prompt longer than the context is a 400, not a prompt whose oldest messages,
  then tokens, Ollama silently dropped (``chatPrompt``, ``completionPromptForRequest``).
- ``done_reason`` is ``"stop"`` (end of turn) or ``"length"`` (``num_predict`` reached).
- ``/api/version`` answers ``{"version": ...}``: ``api="auto"`` tells Ollama by it. Log-probabilities
  came in 0.12.11.
- ``/api/show`` gives the Modelfile's ``parameters``. When they bend a greedy answer (penalties,
  ``typical_p``), grogu warns once: a pipeline's requests through ``/v1`` apply them.

Limits: ``num_ctx`` is not sent (a request that changes it reloads the model). A Modelfile's ``stop``
strings still end answers. With context shift on (Ollama's default), an answer that reaches the end
of the context window continues after dropping old tokens; grogu's answer budgets are far below that.
A thinking model thinks unless the pipeline says otherwise, and grogu scores what it generates.
"""

from __future__ import annotations

import json
from typing import Any

from ...core.prompts import ChatPrompt
from .chat import ChatAPI
from .http import Connection, ServerError

#: every sampler option of Ollama's ``Options`` (api/types.go) at the value that switches it off;
#: ``temperature``, ``num_predict`` and ``seed`` are set per request
NEUTRAL: dict[str, Any] = {
    "top_k": 0,  # 0 = the whole vocabulary (llama.cpp)
    "top_p": 1.0,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_last_n": 0,  # 0 = no penalty window: every penalty off
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}
#: the first Ollama version whose /api/chat returns log-probabilities
MIN_VERSION = (0, 12, 11)
#: Modelfile parameters that bend a greedy answer (llama.cpp's chain: penalties and typical sampling come
#: before the temperature; top-k, top-p and min-p always keep the top token), at their neutral values
BENDS_GREEDY = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "typical_p": 1.0}


def modelfile_parameters(text: Any) -> dict[str, Any]:
    """``/api/show``'s ``parameters`` (one ``key value`` line each, Go's ``%#v`` of the value) as a dict."""
    out: dict[str, Any] = {}
    for line in text.splitlines() if isinstance(text, str) else []:
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = json.loads(value.strip())
        except ValueError:
            out[key] = value.strip()
    return out


def greedy_benders(params: dict[str, Any]) -> dict[str, Any]:
    """The Modelfile parameters that make a greedy answer differ from the plain argmax one."""
    if params.get("repeat_last_n") == 0:  # no penalty window: the penalties do nothing
        params = {k: v for k, v in params.items() if not k.endswith("penalty")}
    return {
        k: params[k] for k, off in BENDS_GREEDY.items() if isinstance(params.get(k), (int, float)) and params[k] != off
    }


def parse_version(text: Any) -> tuple[int, ...] | None:
    """``(0, 12, 11)`` of ``"0.12.11"`` (a suffix such as ``-rc2`` ignored), or None."""
    if not isinstance(text, str):
        return None
    parts = []
    for piece in text.split("-")[0].split(".")[:3]:
        if not piece.isdigit():
            return None
        parts.append(int(piece))
    return tuple(parts) if parts else None


async def ollama_version(http: Connection, root: str) -> tuple[int, ...] | None:
    """Ollama's version from ``/api/version`` at the server root, or None when the server is not Ollama."""
    try:
        data = await http.get("", url=root + "/api/version")
    except ServerError:
        return None
    return parse_version(data.get("version")) if isinstance(data, dict) else None


class OllamaAPI(ChatAPI):
    """Ollama's ``/api/chat`` with messages and every sampler option pinned; grounded-only."""

    name = "ollama"

    @property
    def generate_url(self) -> str:
        return self.served.root + "/api/chat"

    async def start(self) -> list[str]:
        """A warning when the served model's Modelfile sets parameters that bend a greedy answer. grogu
        pins them off; a pipeline's own requests through ``/v1`` cannot (``repeat_penalty``, ``typical_p``),
        so its answer may then differ from the one grogu scores."""
        s = self.served
        try:
            shown = (await self.http.post_all([{"model": s.model_name}], url=s.root + "/api/show"))[0]
        except ServerError:
            return []
        bends = greedy_benders(modelfile_parameters(shown.get("parameters") if isinstance(shown, dict) else None))
        if not bends:
            return []
        listed = ", ".join(f"{k}={v}" for k, v in sorted(bends.items()))
        return [
            f"Ollama's Modelfile of {s.model_name!r} sets {listed}. grogu's requests switch them off, but "
            "a pipeline's requests through /v1 apply them (it cannot set repeat_penalty or typical_p), so "
            "its answer may differ from the one grogu scores. Send them neutral from the pipeline (Ollama's "
            "native API: options) or serve a Modelfile without them"
        ]

    def body(self, prompt: ChatPrompt, max_new_tokens: int, temperature: float | None, seed: int | None) -> dict:
        options: dict[str, Any] = {**NEUTRAL, "temperature": 0.0 if temperature is None else float(temperature)}
        options["num_predict"] = int(max_new_tokens)
        if seed is not None:
            options["seed"] = int(seed)
        return {
            "model": self.served.model_name,
            "messages": prompt.messages(),
            "stream": False,
            "logprobs": True,
            "top_logprobs": self.served.top_logprobs,
            "truncate": False,
            "options": options,
        }

    def as_chat(self, data: Any) -> dict[str, Any]:
        """An ``/api/chat`` answer in the chat completions' shape that :meth:`ChatAPI.parse` reads."""
        where = f"the Ollama server at {self.served.base_url}"
        if not isinstance(data, dict) or not isinstance(data.get("message"), dict):
            raise ServerError(f"{where} answered /api/chat with {str(data)[:200]}")
        if data.get("done") is not True:
            raise ServerError(f"{where} sent a partial answer (done is not true)")
        content = data["message"].get("content") or ""
        entries = data.get("logprobs")
        if entries is None and not content:  # an empty answer: Ollama leaves the empty list out
            entries = []
        finish = data.get("done_reason")
        return {
            "choices": [
                {
                    "message": {"content": content},
                    "logprobs": {"content": entries} if isinstance(entries, list) else None,
                    "finish_reason": finish if finish in ("stop", "length") else None,
                }
            ]
        }


__all__ = [
    "NEUTRAL",
    "MIN_VERSION",
    "BENDS_GREEDY",
    "OllamaAPI",
    "ollama_version",
    "parse_version",
    "modelfile_parameters",
    "greedy_benders",
]
