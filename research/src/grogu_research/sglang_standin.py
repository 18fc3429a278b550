"""A stand-in for SGLang's ``/generate``, run by llama.cpp in this process (``llama_cpp.Llama``).

No SGLang server runs here. The tests of ``ServerTarget(api="sglang")`` talk to this instead: an HTTP
server on loopback whose routes, request fields and answers are transcribed from SGLang 0.5.23 as
released on PyPI (``python/sglang/``):

- routes ``/generate`` at the root and ``/v1/models`` (srt/entrypoints/http_server.py, ``generate_request``,
  ``available_models``; entrypoints/openai/protocol.py, ``ModelCard``: owner ``"sglang"``, ``max_model_len``);
- the contract check: unknown keys of ``sampling_params`` are a 400, unknown top-level keys are ignored
  (sglang/api/v1/api_types.py, ``decode_SamplingParams``, ``GenerateRequest``);
- ``sampling_params`` over ``SamplingParams``' defaults, temperature below 1e-6 read as greedy (``top_k``
  1), ``top_k`` -1 as the whole vocabulary, the ranges of ``verify`` (srt/sampling/sampling_params.py);
- ``input_ids`` one list or a batch of lists, used as given, no BOS (srt/managers/io_struct.py,
  ``GenerateReqInput``; tokenizer_manager.py, ``_tokenize_one_request``). A batch answers with a list;
- decoding: stop token first, then ``max_new_tokens``; the stop token is kept in ``output_ids``
  (schedule_batch.py, ``Req.check_finished``, ``_check_token_based_finish``, ``output_ids_through_stop``);
- log-probabilities: a log-softmax of the raw logits (greedy; srt/layers/sampler.py) or of the logits
  over the temperature (sampled); prompt entries from ``logprob_start_len``, the first one null
  (scheduler_components/logprob_result_processor.py); triples ``[logprob, token_id, null]``
  (tokenizer_manager.py, ``detokenize_logprob_tokens``).

Not transcribed (a request asking for them gets a 400): streaming, grammars, stop strings, penalties,
``top_p`` below 1, ``min_p``, ``min_new_tokens``, logit bias, beam search, ``n`` above 1, watermarks.
``tamper`` (a function of each answer item) lets a test corrupt what the stand-in returns.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from .standin import RequestError, StandIn

#: srt/sampling/sampling_params.py, SamplingParams: the API fields and their defaults
DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 128,
    "stop": None,
    "stop_token_ids": None,
    "stop_regex": None,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 1 << 30,
    "min_p": 0.0,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "n": 1,
    "beam_width": None,
    "json_schema": None,
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "ignore_eos": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "no_stop_trim": False,
    "stream_interval": None,
    "logit_bias": None,
    "sampling_seed": None,
    "custom_params": None,
    "watermark": None,
}
#: api_types.py, decode_SamplingParams: the keys the contract knows (``choice`` too)
CONTRACT_KEYS = set(DEFAULTS) | {"choice"}


def sampling(raw: dict[str, Any]) -> dict[str, Any]:
    """One item's settings: the contract check, then SamplingParams' __post_init__ and verify."""
    unknown = sorted(set(raw) - CONTRACT_KEYS)
    if unknown:
        raise RequestError(f"unknown field `{unknown[0]}`")
    if "choice" in raw:  # in the contract, not in srt's SamplingParams: its constructor refuses it
        raise RequestError("Unexpected keyword argument 'choice'")
    p = {**DEFAULTS, **{k: v for k, v in raw.items()}}
    for key in ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty"):
        p[key] = DEFAULTS[key] if p[key] is None else p[key]
    p["top_k"] = -1 if p["top_k"] is None else p["top_k"]
    p["min_new_tokens"] = p["min_new_tokens"] or 0
    if 0 <= p["temperature"] < 1e-6:  # __post_init__: greedy
        p["temperature"], p["top_k"] = 1.0, 1
    if p["top_k"] == -1:
        p["top_k"] = 1 << 30
    if not 0.0 < p["top_p"] <= 1.0 or p["top_k"] < 1 or p["temperature"] < 0:
        raise RequestError("top_p must be in (0, 1], top_k -1 or at least 1, temperature non-negative")
    if p["max_new_tokens"] is not None and p["max_new_tokens"] < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {p['max_new_tokens']}.")
    watermark = p["watermark"] or {}
    untranscribed = [
        k
        for k, off in (
            ("stop", None),
            ("stop_regex", None),
            ("json_schema", None),
            ("regex", None),
            ("ebnf", None),
            ("structural_tag", None),
            ("beam_width", None),
            ("custom_params", None),
        )
        if p[k] not in (off, [], {})
    ]
    neutral = dict(top_p=1.0, min_p=0.0, frequency_penalty=0.0, presence_penalty=0.0, repetition_penalty=1.0)
    untranscribed += [k for k, v in neutral.items() if p[k] != v]
    untranscribed += [k for k in ("min_new_tokens", "logit_bias", "ignore_eos") if p[k]]
    if p["n"] != 1 or watermark.get("enabled") or watermark.get("key"):
        untranscribed.append("n or watermark")
    if p["top_k"] not in (1, 1 << 30):
        untranscribed.append("top_k")
    if untranscribed:
        raise RequestError(f"the stand-in does not transcribe {untranscribed}")
    return p


class SglangStandIn(StandIn):
    """The stand-in on loopback (use as a context manager). ``url`` ends with ``/v1``, as a user would give
    SGLang's OpenAI base URL; ``bodies`` records each POST as (path, body). A 400's body is
    http_server.py's ``_create_error_response``."""

    def __init__(self, gguf: str | None = None, alias: str | None = None, *, n_ctx: int = 2048) -> None:
        super().__init__(gguf, alias, n_ctx=n_ctx)
        self.eos = {self.llm.token_eos()}
        self.tamper: Callable[[dict[str, Any]], None] | None = None

    def get(self, path: str) -> Any:
        return self.models() if path == "/v1/models" else None

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self.generate(body) if path == "/generate" else None

    def models(self) -> dict[str, Any]:
        """http_server.py, available_models (protocol.py, ModelList of ModelCard)."""
        card = {
            "id": self.alias,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.alias,
            "parent": None,
            "max_model_len": self.llm.n_ctx(),
        }
        return {"object": "list", "data": [card]}

    def generate(self, body: dict[str, Any]) -> Any:
        """One ``/generate`` request: one answer, or a list for a batch of ``input_ids``."""
        if body.get("stream") or body.get("text") is not None:
            raise RequestError("the stand-in takes input_ids, without streaming")
        ids = body.get("input_ids")
        single = isinstance(ids, list) and bool(ids) and all(isinstance(t, int) for t in ids)
        items = [ids] if single else ids
        if not isinstance(items, list) or not all(isinstance(i, list) and i for i in items):
            raise RequestError("input_ids must be a list of token ids or a list of such lists")

        def per_item(key: str, default: Any) -> list[Any]:  # io_struct.py, _normalize_logprob_params
            value = body.get(key)
            value = default if value is None else value
            return value if isinstance(value, list) and not single else [value] * len(items)

        params = [sampling(p) for p in per_item("sampling_params", {})]
        out = []
        for item, p, lp, start, k in zip(
            items, params, per_item("return_logprob", False), per_item("logprob_start_len", -1),
            per_item("top_logprobs_num", 0),
        ):  # fmt: skip
            answer = self._one(item, p, bool(lp), int(start), int(k))
            if self.tamper is not None:
                self.tamper(answer)
            out.append(answer)
        return out[0] if single else out

    def _row(self, logits: np.ndarray, temperature: float) -> np.ndarray:
        z = np.asarray(logits, dtype=np.float32) / np.float32(temperature)
        return z - (z.max() + np.log(np.exp(z - z.max(), dtype=np.float32).sum(dtype=np.float32)))

    def _top(self, row: np.ndarray, k: int) -> list[list[Any]]:
        top = np.argsort(-row, kind="stable")[:k]
        return [[float(row[t]), int(t), None] for t in top]

    def _one(self, prompt: list[int], p: dict[str, Any], return_logprob: bool, start: int, k: int) -> dict:
        """schedule_batch.py, Req; scheduler.py, handle_generate_request; tokenizer_manager.py, meta_info."""
        n_ctx = self.llm.n_ctx()
        if any(not 0 <= t < self.llm.n_vocab() for t in prompt):
            raise RequestError("token id out of the vocabulary")
        if len(prompt) >= n_ctx:
            raise RequestError(f"The input ({len(prompt)} tokens) is longer than the model's context length")
        if start > len(prompt):
            raise RequestError(f"logprob_start_len={start} is higher than the number of input tokens")
        if start == -1 or not return_logprob:
            start = len(prompt)
        stops = set(p["stop_token_ids"] or []) | self.eos
        budget = p["max_new_tokens"] if p["max_new_tokens"] is not None else n_ctx
        rng = np.random.default_rng(p["sampling_seed"])
        meta: dict[str, Any] = {"id": "standin", "prompt_tokens": len(prompt), "weight_version": "default"}
        with self._lock:
            llm = self.llm
            llm.reset()
            llm.eval(prompt)
            rows = [self._row(llm.scores[i], 1.0) for i in range(start, len(prompt) - 1)]  # prompt logprobs
            in_lp = [[None, prompt[start], None]] if start < len(prompt) else []
            in_top: list[Any] = [None] if start < len(prompt) else []
            for j, row in enumerate(rows):
                tok = prompt[start + j + 1]
                in_lp.append([float(row[tok]), tok, None])
                in_top.append(self._top(row, k) if k > 0 else None)
            ids, out_lp, out_top, finish = [], [], [], {"type": "length", "length": budget}
            while len(ids) < budget and llm.n_tokens < n_ctx:
                row = self._row(llm.scores[llm.n_tokens - 1], p["temperature"])
                if p["top_k"] == 1:
                    tok = int(np.argmax(row))
                else:
                    probs = np.exp(row.astype(np.float64))
                    tok = int(rng.choice(len(probs), p=probs / probs.sum()))
                ids.append(tok)
                out_lp.append([float(row[tok]), tok, None])
                out_top.append(self._top(row, k) if k > 0 else None)
                if tok in stops:  # Req._check_token_based_finish comes before the length check
                    finish = {"type": "stop", "matched": tok}
                    break
                if len(ids) >= budget:
                    break
                llm.eval([tok])
        meta.update(finish_reason=finish, completion_tokens=len(ids), cached_tokens=0, e2e_latency=0.0)
        if return_logprob:
            meta.update(
                input_token_logprobs=in_lp,
                output_token_logprobs=out_lp,
                output_token_logprobs_length=len(out_lp),
            )
            if k > 0:
                meta.update(input_top_logprobs=in_top, output_top_logprobs=out_top)
        text = self.llm.detokenize([t for t in ids if t not in self.eos]).decode("utf-8", errors="replace")
        return {"text": text, "output_ids": ids, "meta_info": meta}


__all__ = ["SglangStandIn", "DEFAULTS", "sampling"]
