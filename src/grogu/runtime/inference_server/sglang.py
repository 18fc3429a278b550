"""SGLang through its native ``/generate`` endpoint (``api="sglang"``): :class:`SglangAPI`, generation and
teacher forcing.

Read from SGLang 0.5.23 as released on PyPI (``python/sglang/``). It is not run against a real SGLang
server here. The tests run llama.cpp in process behind a stand-in transcribed from that source
(``grogu_research.sglang_standin``). What grogu relies on:

- ``/generate`` sits at the server root, outside ``/v1`` (srt/entrypoints/http_server.py,
  ``generate_request``). ``/v1/models`` entries are owned by ``"sglang"`` and carry ``max_model_len``, the
  context length (``available_models``; entrypoints/openai/protocol.py, ``ModelCard``). No route gives
  the vocabulary size: it is the tokenizer's.
- ``input_ids`` takes one list of ids, or a list of lists for a batch (srt/managers/io_struct.py,
  ``GenerateReqInput``). Ids are used as given, no BOS added (srt/managers/tokenizer_manager.py,
  ``_tokenize_one_request``). A batch answers with a list, one answer per item. Per-item fields
  (``sampling_params``, ``logprob_start_len``) may be lists (io_struct.py, ``_normalize_batch_inputs``).
- ``return_logprob`` with ``top_logprobs_num: k`` returns ``meta_info.output_token_logprobs``, one
  ``[logprob, token_id, text]`` per generated token, and ``output_top_logprobs``, k such triples per token
  (tokenizer_manager.py, ``detokenize_logprob_tokens``). ``text`` is null without
  ``return_text_in_logprobs``. ``output_ids`` keep the stop token that ended the answer
  (schedule_batch.py, ``output_ids_through_stop``); ``finish_reason`` is ``{"type": "stop", "matched": id}``
  or ``{"type": "length", ...}`` (``FINISH_MATCHED_TOKEN``, ``FINISH_LENGTH``).
- Greedy decoding (temperature 0, which SGLang turns into ``top_k`` 1) reports the log-softmax of the
  model's logits (srt/layers/sampler.py, ``Sampler.forward``). At a temperature T it reports the
  tempered distribution, unless the server sets ``SGLANG_RETURN_ORIGINAL_LOGPROB``.
- Teacher forcing: ``input_ids`` prompt + answer, ``logprob_start_len`` len(prompt) - 1, and
  ``max_new_tokens`` 0 (allowed: ``SamplingParams.verify``; a prefill-only request,
  ``Req.is_prefill_only``). ``meta_info.input_token_logprobs`` then holds one triple per token from that
  position. The first has a null log-probability; entry j holds the token at ``logprob_start_len + j``
  (srt/managers/scheduler_components/logprob_result_processor.py, ``_process_input_token_logprobs`` and
  ``_process_input_top_logprobs``). So entries ``[1:]`` are the answer's. Prompt log-probabilities are a
  log-softmax of the raw logits (srt/layers/logprob_processor.py, ``_forward_by_chunk``). grogu checks
  that the ids returned with them are the forced ids, and raises otherwise. That processor writes 0 for an
  id at or above the model's vocabulary size - 1, so forcing the very last id raises too.
- ``sampling_params`` refuses unknown keys with a 400 (sglang/api/v1/api_types.py, ``decode_SamplingParams``,
  the ``/generate`` contract check). A request's fields override ``--preferred-sampling-params``, which
  fills every field a request leaves out (tokenizer_manager.py, ``_create_tokenized_object``). So grogu
  sends every field of ``SamplingParams`` (srt/sampling/sampling_params.py), neutral: :data:`NEUTRAL`.
  The model's generation_config (``--sampling-defaults model``) reaches the OpenAI routes only
  (openai/serving_chat.py), not ``/generate``. The seed key is ``sampling_seed``.
- ``choice`` is in the contract but not in ``SamplingParams``: sending it fails there, so it is not sent.
  Older 0.5 releases lack some fields (``watermark``, ``beam_width``); they refuse such requests.

Limits: SGLang stops at its own end-of-sequence tokens too (``ignore_eos`` false), and reports them as
the matched token. A speculative-decoding server skips the prefill-only path, which only costs a token.
"""

from __future__ import annotations

from typing import Any

from ...core.target import ServerCapabilityError
from ...core.types import Generation
from .base import BaseAPI
from .http import ServerError
from .requests import Step

#: every API field of SGLang's ``SamplingParams`` (srt/sampling/sampling_params.py) at its neutral value;
#: ``max_new_tokens``, ``temperature``, ``stop_token_ids`` and ``sampling_seed`` are set per request
NEUTRAL: dict[str, Any] = {
    "stop": None,  # no stop strings (a null clears --preferred-sampling-params' own)
    "stop_regex": None,
    "top_p": 1.0,  # 1.0 = disabled (verify: in (0, 1])
    "top_k": -1,  # -1 = the whole vocabulary (__post_init__: TOP_K_ALL); greedy sets 1
    "min_p": 0.0,  # 0 = disabled
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,  # 1.0 = no penalty
    "min_new_tokens": 0,  # > 0 would mask the end-of-sequence tokens
    "n": 1,
    "beam_width": None,  # no beam search
    "json_schema": None,  # no grammar of any kind
    "regex": None,
    "ebnf": None,
    "structural_tag": None,
    "ignore_eos": False,
    "skip_special_tokens": True,  # the answer's text only; grogu reads ids
    "spaces_between_special_tokens": True,
    "no_stop_trim": False,
    "stream_interval": None,
    "logit_bias": None,  # none (null: the contract reads {}, SamplingParams None)
    "custom_params": None,
    "watermark": {"enabled": False},  # off even when the server watermarks by default (watermarking/core.py)
}
#: items per ``/generate`` request (a batch of ``input_ids``); the batches go out concurrently
BATCH = 16


def sglang_sampling(max_new_tokens: int, temperature: float | None, seed: int | None, stops: list[int]) -> dict:
    """One item's ``sampling_params``: greedy when ``temperature`` is None (SGLang reads 0 as greedy)."""
    return {
        **NEUTRAL,
        "max_new_tokens": int(max_new_tokens),
        "temperature": 0.0 if temperature is None else float(temperature),
        "sampling_seed": None if seed is None else int(seed),
        "stop_token_ids": list(stops),
    }


class SglangAPI(BaseAPI):
    """SGLang's native ``/generate``: token-id prompts in batches, teacher forcing by prompt log-probabilities."""

    name = "sglang"

    @property
    def generate_url(self) -> str:
        return self.served.root + "/generate"

    # ------------------------------------------------------------------ bodies
    def body(self, items: list[list[int]], params: list[dict], starts: list[int] | int) -> dict[str, Any]:
        return {
            "input_ids": items,
            "sampling_params": params,
            "return_logprob": True,
            "top_logprobs_num": self.served.top_logprobs,
            "logprob_start_len": starts,
            "return_text_in_logprobs": False,
            "stream": False,
        }

    def gen_bodies(
        self, prompts: list[list[int]], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[dict[str, Any]]:
        stops = list(self.served.stop_token_ids)
        return [
            self.body(
                prompts[i : i + BATCH],
                [sglang_sampling(max_new_tokens, temperature, s, stops) for s in seeds[i : i + BATCH]],
                -1,  # the generated tokens' log-probabilities only
            )
            for i in range(0, len(prompts), BATCH)
        ]

    def forced_bodies(self, prompts: list[list[int]], conts: list[list[int]]) -> list[dict[str, Any]]:
        stops = list(self.served.stop_token_ids)
        return [
            self.body(
                [list(p) + list(c) for p, c in zip(prompts[i : i + BATCH], conts[i : i + BATCH])],
                [sglang_sampling(0, None, None, stops)] * len(prompts[i : i + BATCH]),
                [len(p) - 1 for p in prompts[i : i + BATCH]],
            )
            for i in range(0, len(prompts), BATCH)
        ]

    async def post(self, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each batch's answers, flattened in order; an aborted item raises with SGLang's message."""
        out = []
        for body, replies in zip(bodies, await self.http.post_all(bodies, url=self.generate_url)):
            if not isinstance(replies, list) or len(replies) != len(body["input_ids"]):
                raise ServerError(
                    f"{self.where()} answered a batch of {len(body['input_ids'])} on /generate "
                    f"with {str(replies)[:200]}; api='sglang' needs SGLang's /generate"
                )
            for r in replies:
                finish = ((r or {}).get("meta_info") or {}).get("finish_reason") if isinstance(r, dict) else None
                if isinstance(finish, dict) and finish.get("type") == "abort":
                    raise ServerError(f"{self.where()} aborted a request: {finish.get('message')}")
            out.extend(replies)
        return out

    # ------------------------------------------------------------------ the protocol
    async def generate(
        self, prompts: list[Any], max_new_tokens: int, temperature: float | None, seeds: list[int | None]
    ) -> list[Generation]:
        replies = await self.post(self.gen_bodies(prompts, max_new_tokens, temperature, seeds))
        return [self.parse_generation(r) for r in replies]

    async def forced_steps(self, prompts: list[list[int]], conts: list[list[int]]) -> list[list[Step]]:
        """The steps of each ``conts[i]`` teacher-forced after ``prompts[i]``, in SGLang's batches."""
        replies = await self.post(self.forced_bodies(list(prompts), list(conts)))
        return [self.parse_forced(r, c) for r, c in zip(replies, conts)]

    # ------------------------------------------------------------------ reading answers
    def steps(self, entries: Any, tops: Any, what: str) -> tuple[list[int], list[Step]]:
        """(ids, steps) of ``[logprob, id, text]`` triples and their top-k triples."""
        if not isinstance(entries, list) or not isinstance(tops, list) or len(entries) != len(tops):
            raise ServerCapabilityError(
                f"{self.where()} returned no {what} log-probabilities in SGLang's form (meta_info triples [logprob, "
                "token_id, text] with their top_logprobs_num alternatives); api='sglang' needs SGLang's /generate"
            )
        ids, steps = [], []
        for e, top in zip(entries, tops):
            if not top or e[0] is None:
                raise self.no_logprobs()
            ids.append(int(e[1]))
            steps.append(Step(float(e[0]), [float(t[0]) for t in top]))
        return ids, steps

    def parse_generation(self, data: dict[str, Any]) -> Generation:
        meta = data.get("meta_info") or {}
        finish = meta.get("finish_reason") or {}
        if finish.get("type") == "stop" and not isinstance(finish.get("matched"), int):
            raise ServerCapabilityError(
                f"{self.where()} stopped at {finish.get('matched')!r}, a stop string or "
                "pattern grogu did not send; grogu ends answers at the end-of-turn token"
            )
        ids, steps = self.steps(meta.get("output_token_logprobs"), meta.get("output_top_logprobs"), "output")
        if ids != list(data.get("output_ids") or []):
            raise ServerError(f"{self.where()} returned log-probabilities out of step with its tokens")
        return self.stopped_generation(ids, steps, finish.get("type") == "stop")

    def parse_forced(self, data: dict[str, Any], cont: list[int]) -> list[Step]:
        meta = data.get("meta_info") or {}
        entries, tops = meta.get("input_token_logprobs"), meta.get("input_top_logprobs")
        if isinstance(entries, list) and isinstance(tops, list) and entries and len(entries) == len(tops):
            entries, tops = entries[1:], tops[1:]  # the first is the prompt's last token, without a value
        else:
            entries = None
        ids, steps = self.steps(entries, tops, "prompt")
        if ids != list(cont):
            raise ServerError(
                f"{self.where()} returned prompt log-probabilities for the ids {ids[:8]}... "
                f"where grogu forced {list(cont)[:8]}...; they are not the answer's statistics"
            )
        return steps


__all__ = ["NEUTRAL", "BATCH", "SglangAPI", "sglang_sampling"]
