"""A stand-in for llama.cpp's ``llama-server``, run by llama.cpp in this process (``llama_cpp.Llama``).

No llama-server binary is built here. The tests of ``ServerTarget(api="llama-server")`` talk to this
instead: an HTTP server on loopback whose routes, request fields and answers are transcribed from
llama.cpp as vendored in llama-cpp-python 0.3.36 (``vendor/llama.cpp/tools/server/``):

- routes ``/completion``, ``/v1/completions``, ``/v1/models`` (server.cpp);
- ``/v1/models``: owner ``"llamacpp"`` and ``meta`` (server-context.cpp, ``get_res_models``,
  ``get_res_model_info``);
- request fields, their aliases, clamps and hard limits, defaults from the command line's
  (server-schema.cpp, ``make_llama_cmpl_schema``; common/common.h, ``common_params_sampling``). An
  unknown field is ignored, as there;
- a prompt of token ids is taken as given, no BOS added (server-common.cpp, ``tokenize_input_subprompt``);
- decoding: the prompt in one batch, then one token a step. The sampler chain is the ``samplers`` field's
  (common/sampling.cpp, ``common_sampler_init``) behind a ``logit_bias`` sampler. The grammar goes first.
  llama-server runs it after the chain and samples again, grammar first, when the token breaks it
  (``common_sampler_sample``): the same token for greedy decoding;
- probabilities: a float32 softmax of the raw logits, the top ``n_probs`` by logit
  (server-common.cpp, ``get_token_probabilities``; server-context.cpp, ``populate_token_probs``);
- stops and entries: an end-of-generation token ends with ``stop_type`` "eos", ``n_predict`` with
  "limit". A token's entry is kept only when the text so far ends on a whole UTF-8 character
  (server-context.cpp, ``process_token``; server-common.cpp, ``validate_utf8``);
- answers: server-task.cpp, ``to_json_non_oaicompat``, ``to_json_oaicompat``, ``probs_vector_to_json``;
  errors: server-common.cpp, ``format_error_response``.

Not transcribed (a request asking for them gets a 400): streaming, stop strings, lazy grammars,
``post_sampling_probs``, mirostat, DRY, several prompts in one request.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np

from .standin import RequestError, StandIn

INT32_MAX = 2**31 - 1
#: common/common.h, common_params_sampling: the values a request's fields start from (no command line)
DEFAULTS: dict[str, Any] = {
    "n_predict": -1,
    "n_probs": 0,
    "seed": 0xFFFFFFFF,
    "temperature": 0.8,
    "top_k": 40,
    "top_p": 0.95,
    "min_p": 0.05,
    "top_n_sigma": -1.0,
    "xtc_probability": 0.0,
    "xtc_threshold": 0.1,
    "typical_p": 1.0,
    "dynatemp_range": 0.0,
    "dynatemp_exponent": 1.0,
    "repeat_last_n": 64,
    "repeat_penalty": 1.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "dry_multiplier": 0.0,
    "mirostat": 0,
    "min_keep": 0,
    "return_tokens": False,
    "post_sampling_probs": False,
    "stream": False,
    "grammar_lazy": False,
    "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
}
#: server-schema.cpp: name -> its aliases, in the order they are read
ALIASES = {"n_predict": ("n_predict", "max_completion_tokens", "max_tokens"), "n_probs": ("n_probs", "logprobs")}
#: server-schema.cpp: set_limits (the value is clamped) and set_hard_limits (an error outside)
CLAMPS = {
    "top_k": (0, INT32_MAX),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "xtc_probability": (0.0, 1.0),
    "xtc_threshold": (0.0, 1.0),
    "temperature": (0.0, float("inf")),
    "mirostat": (0, 2),
}
HARD = {"n_predict": (-1, INT32_MAX), "repeat_last_n": (0, INT32_MAX), "min_keep": (0, INT32_MAX)}


def validate_utf8(text: bytes) -> int:
    """server-common.cpp, validate_utf8: the length of ``text`` without a cut-off multi-byte character."""
    n = len(text)
    for i in range(1, min(4, n) + 1):
        c = text[n - i]
        if (c & 0xE0) == 0xC0 and i < 2 or (c & 0xF0) == 0xE0 and i < 3 or (c & 0xF8) == 0xF0 and i < 4:
            return n - i
    return n


def _text(raw: bytes) -> str:
    return raw[: validate_utf8(raw)].decode("utf-8", errors="replace")


def _logarithm(p: np.float32) -> float:
    """server-task.cpp, completion_token_output::logarithm: the lowest float for 0 (JSON has no -inf)."""
    return float(np.finfo(np.float32).min) if p == 0 else float(np.log(p))


class LlamaServerStandIn(StandIn):
    """The stand-in on loopback (use as a context manager). ``url`` ends with ``/v1``, as a user would
    give llama-server's; ``bodies`` records each POST as (path, body)."""

    not_found = {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
    #: the completion routes: whether each answers in the OpenAI format
    routes = {"/completion": False, "/completions": False, "/v1/completions": True}

    def get(self, path: str) -> Any:
        return self.models() if path in ("/models", "/v1/models") else None

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.complete(body, oaicompat=self.routes[path]) if path in self.routes else None

    def bad_request(self, message: str) -> dict[str, Any]:
        return {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}

    def models(self) -> dict[str, Any]:
        """server-context.cpp, get_res_models (its "data" list: get_res_model_info)."""
        info = {
            "id": self.alias,
            "aliases": [],
            "tags": [],
            "object": "model",
            "created": int(time.time()),
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": 2,
                "n_vocab": self.llm.n_vocab(),
                "n_ctx": self.llm.n_ctx(),
                "n_ctx_train": self.llm._model.n_ctx_train(),
                "n_embd": self.llm.n_embd(),
                "n_params": 0,
                "size": 0,
                "ftype": "",
            },
        }
        return {"models": [{"name": self.alias, "model": self.alias}], "object": "list", "data": [info]}

    # ------------------------------------------------------------------ a request
    def params(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request's settings: its fields over :data:`DEFAULTS` (server-schema.cpp, field_num::eval)."""
        out = dict(DEFAULTS)
        for key in set(DEFAULTS) | set(body):
            name = next((n for n in ALIASES.get(key, (key,)) if body.get(n) is not None), None)
            if name is None or key not in DEFAULTS:
                continue
            value = body[name]
            if key in CLAMPS:
                value = max(CLAMPS[key][0], min(CLAMPS[key][1], value))
            if key in HARD and not HARD[key][0] <= value <= HARD[key][1]:
                raise RequestError(f"Field '{name}': Value must be between {HARD[key][0]} <= value <= {HARD[key][1]}")
            out[key] = value
        out["grammar"] = body.get("grammar") or ""
        out["logit_bias"] = {int(t): float(b) for t, b in body.get("logit_bias") or []}
        unsupported = [k for k in ("stream", "grammar_lazy", "post_sampling_probs") if out[k]]
        if out["mirostat"] or body.get("stop") or (out["dry_multiplier"] and "dry" in out["samplers"]):
            unsupported.append("mirostat, stop strings or DRY")
        if unsupported:
            raise RequestError(f"the stand-in does not transcribe {unsupported}")
        return out

    def _sampler(self, p: dict[str, Any]) -> Any:
        """The grammar, then common_sampler_init's chain: logit bias, the ``samplers``, then dist."""
        import llama_cpp
        from llama_cpp import _internals

        chain = _internals.LlamaSampler()
        if p["grammar"]:
            grammar = llama_cpp.llama_sampler_init_grammar(self.vocab, p["grammar"].encode(), b"root")
            if not grammar:  # common_sampler_init throws "failed to parse grammar"
                raise RequestError("Failed to initialize samplers: failed to parse grammar")
            llama_cpp.llama_sampler_chain_add(chain.sampler, grammar)
        n_vocab, keep = self.llm.n_vocab(), p["min_keep"]
        if p["logit_bias"]:
            chain.add_logit_bias(n_vocab, p["logit_bias"])
        add = {
            "penalties": lambda: chain.add_penalties(
                n_vocab, p["repeat_last_n"], p["repeat_penalty"], p["frequency_penalty"], p["presence_penalty"]
            ),
            "dry": lambda: None,  # multiplier 0: no-op (a non-zero one is refused above)
            "top_n_sigma": lambda: chain.add_top_n_sigma(p["top_n_sigma"]),
            "top_k": lambda: chain.add_top_k(p["top_k"]),
            "typ_p": lambda: chain.add_typical(p["typical_p"], keep),
            "top_p": lambda: chain.add_top_p(p["top_p"], keep),
            "min_p": lambda: chain.add_min_p(p["min_p"], keep),
            "xtc": lambda: chain.add_xtc(p["xtc_probability"], p["xtc_threshold"], keep, p["seed"]),
            "temperature": lambda: chain.add_temp_ext(p["temperature"], p["dynatemp_range"], p["dynatemp_exponent"]),
        }
        for name in p["samplers"]:
            if name not in add:
                raise RequestError(f"the stand-in does not transcribe the sampler {name!r}")
            add[name]()
        chain.add_dist(p["seed"])
        return chain

    def complete(self, body: dict[str, Any], oaicompat: bool = False) -> dict[str, Any]:
        """One completion (server-context.cpp: launch_slot_with_task, update_slots, process_token)."""
        import llama_cpp

        if oaicompat and body.get("echo"):  # server-common.cpp, oaicompat_completion_params_parse
            raise RequestError("Only no echo is supported")
        p = self.params(body)
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = self.llm.tokenize(prompt.encode(), add_bos=self.llm._model.add_bos_token(), special=True)
        elif not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
            raise RequestError("the stand-in takes a prompt of one string or one list of token ids")
        if any(not 0 <= t < self.llm.n_vocab() for t in prompt):
            raise RequestError("Prompt contains invalid tokens")
        n_ctx = self.llm.n_ctx()
        if len(prompt) >= n_ctx:
            raise RequestError(
                f"request ({len(prompt)} tokens) exceeds the available context size ({n_ctx} tokens), try increasing it"
            )
        with self._lock:
            llm = self.llm
            llm.reset()
            llm.eval(prompt)
            chain = self._sampler(p)
            ids: list[int] = []
            entries: list[dict[str, Any]] = []
            generated, sent, stop_type = b"", 0, "none"
            while True:
                logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)  # the raw logits
                tok = chain.sample(llm._ctx, -1)  # llama_sampler_sample accepts it (the grammar advances)
                ids.append(tok)
                piece = self._piece(tok)
                generated += piece
                if p["n_probs"] > 0 and validate_utf8(generated) == len(generated):
                    entries.append(self._entry(tok, generated[sent:], logits, p["n_probs"]))
                    sent = len(generated)
                if llama_cpp.llama_vocab_is_eog(self.vocab, tok):
                    stop_type = "eos"
                    break
                if p["n_predict"] != -1 and len(ids) >= p["n_predict"]:
                    stop_type = "limit"
                    break
                if llm.n_tokens + 1 >= n_ctx:  # no context shift
                    stop_type = "limit"
                    break
                llm.eval([tok])
            cached = llm.n_tokens
        content = generated.decode("utf-8", errors="replace")
        if oaicompat:
            return self._oaicompat(content, entries, stop_type, len(prompt), len(ids))
        res = {
            "index": 0,
            "content": content,
            "tokens": ids if p["return_tokens"] else [],
            "id_slot": 0,
            "stop": True,
            "model": self.alias,
            "tokens_predicted": len(ids),
            "tokens_evaluated": len(prompt),
            "generation_settings": {k: p[k] for k in DEFAULTS},
            "prompt": self.llm.detokenize(prompt, special=True).decode("utf-8", errors="replace"),
            "has_new_line": "\n" in content,
            "truncated": False,
            "stop_type": stop_type,
            "stopping_word": "",
            "tokens_cached": cached,
            "timings": {},
        }
        if entries:
            res["completion_probabilities"] = entries
        return res

    def _piece(self, tok: int) -> bytes:
        """common_token_to_piece without special tokens' text (llama-server's default, no --special)."""
        import llama_cpp

        buf = ctypes.create_string_buffer(1024)  # llama-cpp-python's detokenize cuts pieces at 32 bytes
        n = llama_cpp.llama_token_to_piece(self.vocab, tok, buf, len(buf), 0, False)
        return buf.raw[: max(n, 0)]

    def _entry(self, tok: int, text: bytes, logits: np.ndarray, n_probs: int) -> dict[str, Any]:
        """server-common.cpp, get_token_probabilities, and server-task.cpp, probs_vector_to_json."""
        probs = np.exp(logits - logits.max(), dtype=np.float32)
        probs /= probs.sum(dtype=np.float32)
        top = np.argsort(-logits, kind="stable")[:n_probs]
        alternatives = []
        for t in top:
            raw = self._piece(int(t))
            alternatives.append(
                {"id": int(t), "token": _text(raw), "bytes": list(raw), "logprob": _logarithm(probs[t])}
            )
        return {
            "id": tok,
            "token": _text(text),
            "bytes": list(text),
            "logprob": _logarithm(probs[tok]),
            "top_logprobs": alternatives,
        }

    def _oaicompat(self, content: str, entries: list, stop_type: str, n_prompt: int, n_gen: int) -> dict[str, Any]:
        """server-task.cpp, to_json_oaicompat (``/v1/completions``)."""
        return {
            "choices": [
                {
                    "text": content,
                    "index": 0,
                    "logprobs": {"content": entries} if entries else None,
                    "finish_reason": "stop" if stop_type == "eos" else "length",
                }
            ],
            "created": int(time.time()),
            "model": self.alias,
            "system_fingerprint": "stand-in",
            "object": "text_completion",
            "usage": {"completion_tokens": n_gen, "prompt_tokens": n_prompt, "total_tokens": n_gen + n_prompt},
            "id": "chatcmpl-standin",
        }


__all__ = ["LlamaServerStandIn", "validate_utf8", "DEFAULTS"]
