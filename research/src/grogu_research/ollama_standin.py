"""A stand-in for Ollama's native ``/api/chat``, run by llama.cpp in this process (``llama_cpp.Llama``).

No Ollama server runs here. The tests of ``ServerTarget(api="ollama")`` talk to this instead: an HTTP
server on loopback whose routes, request fields and answers are transcribed from Ollama v0.33.0-rc2
(``api/types.go``, ``server/routes.go``, ``server/prompt.go``, ``llm/llama_server.go``):

- routes ``/api/version`` (``{"version"}``), ``/v1/models`` (owner ``"library"``), ``/api/show`` (the
  Modelfile's ``parameters``) and ``/api/chat``;
- ``ChatRequest``: unknown top-level keys ignored (Go's decoder); ``top_logprobs`` outside 0..20 a 400;
  ``stream`` true unless sent false (only false is transcribed here);
- ``options`` over the Modelfile's parameters (``modelfile=``) over ``DefaultOptions``; an unknown option
  key logged and skipped (``Options.FromMap``; kept in :attr:`OllamaStandIn.ignored_options`);
- the prompt: the model's chat template over the messages (here the GGUF tokenizer's template). With
  ``truncate`` (default true) a prompt that does not fit loses its oldest non-system messages, then the
  middle of its tokens (``chatPrompt``; ``completionPromptForRequest`` with context shift on); with
  ``truncate: false`` it is a 400 carrying llama-server's ``exceed_context_size_error`` body;
- sampling as llama.cpp's chain: penalties (``repeat_penalty``, ``presence_penalty``,
  ``frequency_penalty`` over the last ``repeat_last_n`` tokens, the prompt's included), then temperature 0 keeps the
  highest logit only (greedy over the penalised logits); a temperature above 0 samples;
- ``logprobs``: one entry per generated token but the end-of-generation token, with the log-softmax of
  the raw logits (before any sampler) and ``top_logprobs`` of them, each ``{token, logprob, bytes}``;
  ``done_reason`` ``"stop"`` or ``"length"``; ``eval_count`` counts the end token.

Not transcribed (a 400 says so): streaming, ``format``, tools, images, ``top_p`` below 1, ``min_p``,
``typical_p`` below 1, a ``top_k`` other than 0 when sampling.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from .standin import RequestError, StandIn

#: api/types.go, DefaultOptions (num_ctx: the stand-in's context)
DEFAULTS: dict[str, Any] = {
    "num_predict": -1,
    "num_keep": 4,
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.9,
    "min_p": 0.0,
    "typical_p": 1.0,
    "repeat_last_n": 64,
    "repeat_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "seed": -1,
    "stop": [],
}
#: Options and Runner fields the stand-in accepts and ignores (they change the runner, not the answer)
RUNNER = {"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread", "draft_num_predict"}


class OllamaStandIn(StandIn):
    """The stand-in on loopback (use as a context manager). ``url`` ends with ``/v1``, as a user gives
    Ollama's OpenAI base URL; ``bodies`` records each POST. ``modelfile``: the model's PARAMETER lines."""

    not_found = {"error": "model not found, try pulling it first"}

    def __init__(
        self,
        gguf: str | None = None,
        alias: str | None = None,
        *,
        n_ctx: int = 2048,
        modelfile: dict[str, Any] | None = None,
        version: str = "0.33.0",
    ) -> None:
        import llama_cpp

        from grogu.runtime.models import load_tokenizer

        super().__init__(gguf, alias, n_ctx=n_ctx)
        self.tokenizer = load_tokenizer(self.gguf)
        self.modelfile, self.version = dict(modelfile or {}), version
        self.eog = {t for t in range(self.llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(self.vocab, t)}
        self.ignored_options: list[str] = []

    def bad_request(self, message: str) -> dict[str, Any]:
        return {"error": message}

    def get(self, path: str) -> Any:
        if path == "/api/version":
            return {"version": self.version}
        if path == "/v1/models":  # openai/openai.go, ListCompletion: owned_by the model's namespace
            card = {"id": self.alias, "object": "model", "created": int(time.time()), "owned_by": "library"}
            return {"object": "list", "data": [card]}
        return None

    def post(self, path: str, body: dict[str, Any]) -> Any:
        if path == "/api/show":
            return self.show(body)
        return self.chat(body) if path == "/api/chat" else None

    def show(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """routes.go, ShowHandler: the Modelfile's parameters as ``%-30s %#v`` lines (the rest left out)."""
        if (body.get("model") or body.get("name")) != self.alias:
            return None
        lines = [f"{k:<30} {json.dumps(v)}" for k, v in self.modelfile.items()]
        return {"parameters": "\n".join(lines), "details": {"format": "gguf"}, "capabilities": ["completion"]}

    def options(self, raw: Any) -> dict[str, Any]:
        """DefaultOptions, then the Modelfile's parameters, then the request's (Options.FromMap)."""
        opts = {**DEFAULTS, **self.modelfile}
        for key, value in (raw or {}).items():
            if key in RUNNER:
                continue
            if key not in DEFAULTS:
                self.ignored_options.append(key)  # slog.Warn("invalid option provided"), then skipped
                continue
            if value is None:
                continue
            if key == "stop":
                opts[key] = list(value)
            elif not isinstance(value, (int, float)) or isinstance(value, bool):
                raise RequestError(f'option "{key}" must be of type number')
            else:
                opts[key] = int(value) if isinstance(DEFAULTS[key], int) else float(value)
        untranscribed = [k for k, v in (("top_p", 1.0), ("min_p", 0.0), ("typical_p", 1.0)) if opts[k] != v]
        if opts["temperature"] > 0 and opts["top_k"] not in (0, self.llm.n_vocab()):
            untranscribed.append("top_k")
        if untranscribed:
            raise RequestError(f"the stand-in does not transcribe {untranscribed}")
        return opts

    def prompt(self, messages: list[dict[str, Any]], truncate: bool) -> list[int]:
        """The chat template over the messages; a prompt that does not fit cut as Ollama cuts it."""
        n_ctx = self.llm.n_ctx()

        def render(msgs: list[dict[str, Any]]) -> list[int]:
            text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            return list(self.tokenizer.encode(text, add_special_tokens=False))

        ids = render(messages)
        if len(ids) < n_ctx:
            return ids
        if not truncate:  # llama-server's error, as Ollama passes its body on
            err = {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": len(ids), "n_ctx": n_ctx}
            err["message"] = (
                f"request ({len(ids)} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
            )
            raise RequestError(json.dumps({"error": err}))
        kept = list(messages)
        while len(ids) >= n_ctx and len(kept) > 1:  # chatPrompt: drop the oldest non-system message
            drop = next((i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"), None)
            if drop is None:
                break
            kept.pop(drop)
            ids = render(kept)
        if len(ids) >= n_ctx:  # completionPromptForRequest: keep num_keep tokens, drop the middle
            keep, limit = 4, n_ctx - max((n_ctx - 4) // 2, 1)
            ids = ids[:keep] + ids[len(ids) - (limit - keep) :]
        return ids

    def _piece(self, t: int) -> str:
        return self.llm.detokenize([t], special=True).decode("utf-8", errors="replace")

    def _entry(self, t: int, row: np.ndarray) -> dict[str, Any]:
        piece = self._piece(t)
        return {"token": piece, "logprob": float(row[t]), "bytes": list(piece.encode("utf-8"))}

    def chat(self, body: dict[str, Any]) -> dict[str, Any] | None:
        k = body.get("top_logprobs", 0) or 0
        if not isinstance(k, int) or not 0 <= k <= 20:
            raise RequestError("top_logprobs must be between 0 and 20")
        if body.get("model") != self.alias:
            return None
        if body.get("stream", True) is not False or body.get("format") or body.get("tools"):
            raise RequestError("the stand-in answers stream: false only, without format or tools")
        opts = self.options(body.get("options"))
        ids = self.prompt(list(body.get("messages") or []), body.get("truncate", True) is not False)
        n_ctx = self.llm.n_ctx()
        budget = opts["num_predict"] if 0 <= opts["num_predict"] <= 10 * n_ctx else 10 * n_ctx
        rng = np.random.default_rng(None if opts["seed"] < 0 else opts["seed"])
        out: list[int] = []
        entries, reason = [], "length"
        with self._lock:
            llm = self.llm
            llm.reset()
            llm.eval(ids)
            while len(out) < budget and llm.n_tokens < n_ctx:
                logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
                raw = logits - (logits.max() + np.log(np.exp(logits - logits.max()).sum(dtype=np.float32)))
                z = self._penalised(logits.copy(), ids + out, opts)
                if opts["temperature"] <= 0:
                    tok = int(np.argmax(z))
                else:
                    p = np.exp((z - z.max()).astype(np.float64) / opts["temperature"])
                    tok = int(rng.choice(len(p), p=p / p.sum()))
                out.append(tok)
                if tok in self.eog:
                    reason = "stop"
                    break
                if body.get("logprobs"):
                    entry = self._entry(tok, raw)
                    if k:
                        entry["top_logprobs"] = [self._entry(int(t), raw) for t in np.argsort(-raw, kind="stable")[:k]]
                    entries.append(entry)
                if len(out) >= budget:
                    break
                llm.eval([tok])
        text = self.llm.detokenize([t for t in out if t not in self.eog]).decode("utf-8", errors="replace")
        answer: dict[str, Any] = {
            "model": self.alias,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "message": {"role": "assistant", "content": text},
            "done": True,
            "done_reason": reason,
            "total_duration": 1,
            "prompt_eval_count": len(ids),
            "eval_count": len(out),
        }
        if entries:  # omitempty
            answer["logprobs"] = entries
        return answer

    @staticmethod
    def _penalised(z: np.ndarray, history: list[int], opts: dict[str, Any]) -> np.ndarray:
        """llama.cpp's penalties sampler over the last ``repeat_last_n`` tokens of the prompt and the answer
        (-1: all). llama-server feeds the prompt's tokens to the sampler (server-context.cpp, ``init_sampler``)."""
        n = opts["repeat_last_n"]
        window = history if n < 0 else history[len(history) - n :] if n else []
        for t in set(window):
            count = window.count(t)
            z[t] = z[t] / opts["repeat_penalty"] if z[t] > 0 else z[t] * opts["repeat_penalty"]
            z[t] -= count * opts["frequency_penalty"] + opts["presence_penalty"]
        return z


__all__ = ["OllamaStandIn", "DEFAULTS"]
