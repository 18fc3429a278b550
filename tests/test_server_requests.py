"""ServerTarget's requests and response parsing against vLLM's, SGLang's and llama-server's own protocol,
where none of these servers runs here: each request body grogu sends is validated by a pydantic model transcribed from the
server's protocol class (unknown fields refused), and each answer is one the server's response class
would build. A loopback HTTP stub records the bodies and answers with those responses.

Read from (fields transcribed, not the servers' code):
- vLLM 0.33.0 as released on PyPI: ``vllm/entrypoints/openai/completion/protocol.py`` (``CompletionRequest``,
  ``CompletionLogProbs``, ``CompletionResponseChoice``, ``CompletionResponse``). Its base, ``OpenAIBaseModel`` in
  ``vllm/entrypoints/serve/engine/protocol.py``, keeps unknown fields and only logs them (debug level).
  ``vllm/sampling_params.py`` (``SamplingParams._verify_args``): the ranges. The answers:
  ``vllm/entrypoints/openai/completion/serving.py`` (``request_output_to_completion_response``,
  ``_create_completion_logprobs``) and ``vllm/entrypoints/generate/base/serving.py``
  (``format_token_id_placeholder``: ``token_id:N``; ``completion_top_logprobs_limit``: logprobs + 1 entries;
  ``clamp_prompt_logprobs``). ``vllm/logprobs.py``: the prompt's entries (the first one null);
- SGLang ``python/sglang/srt/entrypoints/openai/protocol.py`` at commit 9b116dffe828b2dfa7ec0e4d061555b6c354b67a
  (``ModelCard.owned_by = "sglang"``, ``CompletionRequest`` without ``prompt_logprobs`` or
  ``return_token_ids``, ``ChatCompletionRequest``, ``ChatCompletionTokenLogprob``);
- SGLang 0.5.23 as released on PyPI: ``sglang/api/v1/api_types.py`` (``GenerateRequest``, the ``/generate``
  contract, and ``SamplingParams``, which refuses unknown keys), ``srt/sampling/sampling_params.py``
  (``SamplingParams.verify``: the ranges), ``srt/managers/tokenizer_manager.py``
  (``detokenize_logprob_tokens``: ``[logprob, token_id, text]``) and
  ``srt/managers/scheduler_components/logprob_result_processor.py`` (the prompt entries' offset). The
  values against llama.cpp behind a transcribed stand-in: ``tests/test_server_sglang.py``;
- llama.cpp's ``llama-server`` as vendored in llama-cpp-python 0.3.36 (``vendor/llama.cpp/tools/server/``):
  server-schema.cpp ``make_llama_cmpl_schema`` (the ``/completion`` fields, their types and hard limits),
  server-task.cpp ``to_json_non_oaicompat``, ``to_json_oaicompat`` and ``probs_vector_to_json`` (the
  answers), server-context.cpp ``get_res_model_info`` (``/v1/models``). The values against llama.cpp
  itself: ``tests/test_server_llama_server.py``."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, Optional, Union

import pytest
from grogu_research.loopback import send_json
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import grogu
from grogu.core.prompts import ChatPrompt
from grogu.runtime.inference_server import ServerCapabilityError, ServerError, ServerTarget, topk_entropy
from grogu.runtime.inference_server.llama_server import FORCE_BIAS, NEUTRAL
from grogu.runtime.inference_server.sglang import NEUTRAL as SGLANG_NEUTRAL

NonNegInt = Annotated[int, Field(ge=0)]  # vLLM's prompt token ids


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class VllmCompletionRequest(_Forbid):
    """vLLM 0.33.0 CompletionRequest (protocol.py): the fields grogu may send, with vLLM's types. vLLM itself
    keeps an unknown field and ignores it; refused here, so that grogu sends none. ``Field`` bounds are
    the protocol's and ``SamplingParams._verify_args``'s (a value outside is a 400)."""

    model: Optional[str] = None
    prompt: Union[list[NonNegInt], list[list[NonNegInt]], str, list[str], None] = None
    echo: Optional[bool] = False
    logprobs: Optional[int] = None  # at most the server's --max-logprobs (20 by default)
    max_tokens: Optional[int] = 16  # null reads as 16; 0 only with echo
    seed: Optional[int] = Field(None, ge=-(2**63), le=2**63 - 1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=-1)  # 0 or -1: off ("quietly accept -1 as disabled, but prefer 0")
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    stop_token_ids: Optional[list[int]] = []
    skip_special_tokens: Optional[bool] = None  # None: the generation config's, else True
    prompt_logprobs: Optional[int] = None  # at most --max-logprobs; not with stream
    return_tokens_as_token_ids: Optional[bool] = None  # None: the server's --return-tokens-as-token-ids
    return_token_ids: Optional[bool] = None
    logprob_token_ids: Optional[list[NonNegInt]] = Field(None, max_length=128)  # needs logprobs set
    ignore_eos: bool = False  # also keeps the generation config's eos_token_id out of stop_token_ids

    @field_validator("logprobs", "prompt_logprobs")
    @classmethod
    def _count(cls, k: Optional[int]) -> Optional[int]:  # check_logprobs: "a positive value or -1"
        assert k is None or k >= 0 or k == -1, k
        return k

    @model_validator(mode="after")
    def _budget(self) -> "VllmCompletionRequest":  # to_sampling_params: echo with 0 tokens asks for 1
        assert self.max_tokens is None or self.max_tokens >= 1 or (self.echo and self.max_tokens == 0)
        return self


class SglangChatRequest(_Forbid):
    """SGLang ChatCompletionRequest: the fields grogu may send, with SGLang's types."""

    messages: list[dict[str, str]]
    model: str
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    max_tokens: Optional[int] = None
    seed: Optional[int] = None
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0


class SglangWatermark(_Forbid):
    """sglang.api.v1.WatermarkRequestConfig (unknown keys refused)."""

    enabled: Optional[bool] = None
    key: Optional[str] = None
    context_window: Optional[int] = None


class SglangSamplingParams(_Forbid):
    """sglang.api.v1.SamplingParams (api_types.py, ``decode_SamplingParams``: an unknown key is a 400),
    with the ranges of srt/sampling/sampling_params.py, ``SamplingParams.verify``. ``choice`` is in the
    contract but not in srt's ``SamplingParams`` (its constructor would refuse it): left out here."""

    max_new_tokens: Optional[int] = Field(128, ge=0)  # 0: a prefill-only request (Req.is_prefill_only)
    stop: Union[str, list[str], None] = None
    stop_token_ids: Optional[list[int]] = None
    stop_regex: Union[str, list[str], None] = None
    temperature: Optional[float] = Field(1.0, ge=0.0)  # below 1e-6: greedy (top_k 1, __post_init__)
    top_p: Optional[float] = Field(1.0, gt=0.0, le=1.0)
    top_k: Optional[int] = 1 << 30  # -1 or at least 1
    min_p: Optional[float] = Field(0.0, ge=0.0, le=1.0)
    frequency_penalty: Optional[float] = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: Optional[float] = Field(1.0, gt=0.0, le=2.0)
    min_new_tokens: Optional[int] = Field(0, ge=0)
    n: Optional[int] = 1
    json_schema: Optional[str] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    structural_tag: Optional[str] = None
    ignore_eos: Optional[bool] = False
    skip_special_tokens: Optional[bool] = True
    spaces_between_special_tokens: Optional[bool] = True
    no_stop_trim: Optional[bool] = False
    stream_interval: Optional[int] = None
    logit_bias: Optional[dict[str, float]] = None  # null reads as {}
    sampling_seed: Optional[int] = None
    custom_params: Optional[Any] = None
    beam_width: Optional[int] = None
    watermark: Optional[SglangWatermark] = None

    @field_validator("top_k")
    @classmethod
    def _top_k(cls, k: Optional[int]) -> Optional[int]:
        assert k is None or k == -1 or k >= 1, k
        return k


class SglangGenerateRequest(_Forbid):
    """sglang.api.v1.GenerateRequest: the fields grogu may send, with the contract's types (it ignores
    unknown keys; refused here, so that grogu sends none)."""

    input_ids: Union[list[list[int]], list[int]]  # tokenizer_manager.py, _tokenize_one_request: as given
    sampling_params: Union[list[SglangSamplingParams], SglangSamplingParams, None] = None
    return_logprob: Union[list[bool], bool, None] = None
    logprob_start_len: Union[list[int], int, None] = None  # -1: the generated tokens only
    top_logprobs_num: Union[list[int], int, None] = None
    return_text_in_logprobs: Optional[bool] = None
    stream: Optional[bool] = False


class LlamaServerCompletionRequest(_Forbid):
    """llama-server ``/completion``: the fields grogu may send, with the schema's types (``field_num<int32_t>``
    as int, ``field_num<float>`` as float, ``field_bool``, ``field_json``). ``Field`` bounds are the hard
    limits (``set_hard_limits``: a value outside is an error); clamped ones (``set_limits``) are noted."""

    model: Optional[str] = None  # not a schema field: the router (server-models.cpp) picks the model by it
    prompt: list[int]  # server-common.cpp, tokenize_input_subprompt: token ids as given, no BOS added
    n_predict: int = Field(-1, ge=-1)
    n_probs: int = 0
    return_tokens: bool = False
    stream: bool = False
    post_sampling_probs: bool = False
    top_k: int = 40  # clamped to 0..INT32_MAX; 0 = disabled
    top_p: float = 0.95  # clamped to 0..1
    min_p: float = 0.05  # clamped to 0..1
    top_n_sigma: float = -1.0
    xtc_probability: float = 0.0  # clamped to 0..1
    xtc_threshold: float = 0.1  # clamped to 0..1
    typical_p: float = 1.0
    temperature: float = 0.8  # clamped to 0..inf
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    repeat_last_n: int = Field(64, ge=0)
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = Field(2, ge=0)
    dry_penalty_last_n: int = Field(64, ge=0)
    mirostat: int = 0  # clamped to 0..2
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    adaptive_target: float = Field(-1.0, le=1.0)
    adaptive_decay: float = Field(0.9, ge=0.0, le=0.99)
    seed: Optional[int] = None
    min_keep: int = Field(0, ge=0)
    backend_sampling: bool = False
    logit_bias: list[list[Union[int, float]]] = []  # [[token id, bias], ...]; an object is accepted too
    ignore_eos: bool = False
    n_indent: int = Field(0, ge=0)
    t_max_predict_ms: int = Field(0, ge=-1)
    samplers: list[str] = []  # common_sampler_types_from_names
    grammar: Optional[str] = None  # alias of json_schema's field: a GBNF grammar string
    grammar_lazy: bool = False

    @field_validator("samplers")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:  # common/sampling.cpp, common_sampler_types_from_names
        known = {"dry", "top_k", "top_p", "top_n_sigma", "typ_p", "min_p", "temperature", "xtc", "infill"}
        assert set(names) <= known | {"penalties", "adaptive_p"}, names
        return names


def _llama_server_answer(ids: list[int], *, stop_type: str = "limit", entries: int | None = None) -> dict:
    """A ``/completion`` answer (server-task.cpp, to_json_non_oaicompat): ``tokens`` (return_tokens) and one
    ``completion_probabilities`` entry per token (probs_vector_to_json; ``entries`` keeps the first few only,
    as when a token ends inside a UTF-8 character)."""
    probs = [
        {
            "id": t,
            "token": f"t{t}",
            "bytes": list(f"t{t}".encode()),
            "logprob": -0.25 * (i + 1),
            "top_logprobs": [
                {"id": t, "token": f"t{t}", "bytes": [116], "logprob": -0.25 * (i + 1)},
                {"id": 7, "token": "z", "bytes": [122], "logprob": -3.0},
            ],
        }
        for i, t in enumerate(ids)
    ]
    return {
        "index": 0,
        "content": "x" * len(ids),
        "tokens": ids,
        "id_slot": 0,
        "stop": True,
        "model": "m",
        "tokens_predicted": len(ids),
        "tokens_evaluated": 3,
        "generation_settings": {},
        "prompt": "",
        "has_new_line": False,
        "truncated": False,
        "stop_type": stop_type,
        "stopping_word": "",
        "tokens_cached": 3 + len(ids),
        "timings": {},
        "completion_probabilities": probs[:entries] if entries is not None else probs,
    }


class _Stub:
    """A loopback server answering /v1/models and the completion routes with ``replies[path]``."""

    def __init__(self, owner: str, **entry: Any) -> None:
        self.bodies: list[tuple[str, dict]] = []
        self.replies: dict[str, Any] = {}
        stub = self
        model = {"id": "m", "object": "model", "owned_by": owner, "max_model_len": 2048}
        if owner == "llamacpp":  # server-context.cpp, get_res_model_info
            model = {
                "id": "m",
                "aliases": [],
                "object": "model",
                "owned_by": owner,
                "meta": {"n_vocab": 49280, "n_ctx": 4096},
            }
        models = {"object": "list", "data": [{**model, **entry}]}

        class Handler(BaseHTTPRequestHandler):
            def _send(self, data: Any, body: Any = None, status: int = 200) -> None:
                if isinstance(data, int):  # _send(status, body)
                    status, data = data, body
                send_json(self, status, data)

            def do_GET(self) -> None:  # noqa: N802
                self._send(models)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stub.bodies.append((self.path, body))
                reply = stub.replies[self.path]
                reply = reply(body) if callable(reply) else reply  # a callable answers each body
                self._send(*reply) if isinstance(reply, tuple) else self._send(reply)  # (status, body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tokenizer():
    from grogu.runtime.models import load_tokenizer

    return load_tokenizer(grogu.DEFAULT_MODEL)


@pytest.fixture
def vllm():
    # models/serving.py, show_available_models: ModelCard with root, max_model_len and one ModelPermission
    stub = _Stub("vllm", created=1, root="m", parent=None, permission=[])
    yield stub
    stub.close()


def _prompt_logprobs(ids: list[int], top: dict[int, float]) -> list:
    """``prompt_logprobs`` as vLLM answers it (vllm/logprobs.py, ``create_prompt_logprobs`` and
    ``append_logprobs_for_next_position``): null for the first token; then one object per token, keyed
    by token id (JSON text, never 'token_id:N'), the prompt's own token first with its true rank, then the
    top k with ranks 1..k (a token in both appears once). ``top`` gives each position's own
    log-probability ``top[id]`` (rank 1 when it is the highest), else -0.25 per position."""
    out: list = [None]
    for i, t in enumerate(ids[1:]):
        own = top.get(t, -0.25 * (i + 1))
        ranked = sorted({t: own, 7: -3.0, 8: -3.5}.items(), key=lambda kv: -kv[1])
        entry = {str(t): {"logprob": own, "rank": [k for k, _ in ranked].index(t) + 1, "decoded_token": f"t{t}"}}
        for rank, (k, v) in enumerate(ranked[:2], 1):  # prompt_logprobs=2
            entry[str(k)] = {"logprob": v, "rank": rank, "decoded_token": f"t{k}"}
        out.append(entry)
    return out


def _completion(
    ids: list[int],
    *,
    prompt: tuple[int, ...] = (1, 2, 3),
    logprobs: int | None = 2,
    token_ids: bool = True,
    token_text: bool = False,
    finish: str = "length",
    stop_reason: int | None = None,
    prompt_logprobs: list | None = None,
) -> dict:
    """A vLLM 0.33 CompletionResponse for one prompt, every field as ``model_dump`` writes it
    (serving.py, ``request_output_to_completion_response``). ``token_ids`` and ``prompt_token_ids`` come
    with return_token_ids. ``logprobs`` (the request's) gives ``choices[0].logprobs``
    (``_create_completion_logprobs``): tokens as 'token_id:N' with return_tokens_as_token_ids, else as text
    (``token_text``); the sampled token first in each top_logprobs object, at most logprobs + 1 entries;
    text_offset the running length of those strings. Null without logprobs. A stop token (``finish``
    "stop") stays in ``token_ids``: the EOS with stop_reason null, another stop_token_ids entry with its id
    (v1/core/sched/utils.py, ``check_stop``)."""
    tokens = [f"t{t}" if token_text else f"token_id:{t}" for t in ids]
    offsets = [sum(len(tok) for tok in tokens[:i]) for i in range(len(tokens))]
    lp = None
    if logprobs is not None:
        alternatives = [f"t{k}" if token_text else f"token_id:{k}" for k in (7, 8)]
        lp = {
            "text_offset": offsets,
            "token_logprobs": [-0.5] * len(ids),
            "tokens": tokens,
            "top_logprobs": [  # the sampled token (rank 1 here), then the top k in rank order
                {tok: -0.5, **dict(list(zip([tok, *alternatives], (-0.5, -1.5, -2.5)))[:logprobs])} for tok in tokens
            ],
        }
    choice = {
        "index": 0,
        "text": "x" * len(ids),
        "logprobs": lp,
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "token_ids": ids if token_ids else None,
        "prompt_logprobs": prompt_logprobs,
        "prompt_token_ids": list(prompt) if token_ids else None,
        "routed_experts": None,
        "weight_versions": None,
    }
    usage = {"prompt_tokens": len(prompt), "total_tokens": len(prompt) + len(ids), "completion_tokens": len(ids)}
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {**usage, "prompt_tokens_details": None, "completion_tokens_details": None},
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def test_vllm_generation_request_and_token_ids(vllm, tokenizer):
    target = ServerTarget(vllm.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    assert target.api == "vllm" and target.max_context_tokens == 2048
    ids = target.encode("Canberra is")
    vllm.replies["/v1/completions"] = _completion(ids)
    gen = target.generate([[1, 2, 3]], 4)[0]
    assert gen.token_ids == ids and not gen.finished
    path, body = vllm.bodies[-1]
    VllmCompletionRequest(**body)  # every field one vLLM declares, with its type
    assert body["return_token_ids"] is True and body["prompt"] == [1, 2, 3] and body["logprobs"] == 2
    assert body["return_tokens_as_token_ids"] is True and body["skip_special_tokens"] is False
    assert body["ignore_eos"] is True  # grogu's stop tokens alone, not the generation config's eos list too
    assert (body["repetition_penalty"], body["top_k"], body["min_p"]) == (1.0, -1, 0.0)  # not the model's defaults
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.0, 0.0)  # nor its penalties
    assert body["stop_token_ids"] == target.stop_token_ids and (body["temperature"], body["top_p"]) == (0.0, 1.0)
    # ended by the EOS: vLLM keeps it in token_ids (stop_reason null); grogu takes it off
    vllm.replies["/v1/completions"] = _completion(ids + [target.end_of_turn], finish="stop")
    gen = target.generate([[1, 2, 3]], 8)[0]
    assert gen.token_ids == ids and gen.finished and gen.stop_token_id == target.end_of_turn
    other_stop = min(set(target.stop_token_ids) - {target.end_of_turn})  # <|endoftext|>: stop_reason its id
    vllm.replies["/v1/completions"] = _completion(ids + [other_stop], finish="stop", stop_reason=other_stop)
    assert target.generate([[1, 2, 3]], 8)[0].token_ids == ids
    # without token_ids the 'token_id:N' form still gives them; with neither, a clear error
    vllm.replies["/v1/completions"] = _completion(ids, token_ids=False)
    assert target.generate([[1, 2, 3]], 4)[0].token_ids == ids
    vllm.replies["/v1/completions"] = _completion(ids, token_ids=False, token_text=True)
    with pytest.raises(ServerCapabilityError, match="returned neither the answer's token ids"):
        target.generate([[1, 2, 3]], 4)
    # a server answering in another format (llama-server: logprobs.content) is an error, not an empty answer
    other = _completion(ids)
    other["choices"][0]["logprobs"] = {"content": [{"token": "x", "logprob": -0.5, "top_logprobs": []}]}
    vllm.replies["/v1/completions"] = other
    with pytest.raises(ServerCapabilityError, match="without the completions API's .*Use api='llama-server'"):
        target.generate([[1, 2, 3]], 4)
    other["choices"][0]["text"] = ""  # the end-of-turn token first: still the other format, still an error
    with pytest.raises(ServerCapabilityError, match="Use api='llama-server'"):
        target.generate([[1, 2, 3]], 4)
    with pytest.raises(ServerCapabilityError, match="Use api='llama-server'"):  # teacher forcing too
        target.token_stats([[1, 2, 3]], [[4]])
    # sampled (ΔSePer): the neutral fields again, at temperature 1
    vllm.replies["/v1/completions"] = _completion(ids)
    target.generate([[1, 2, 3]], 4, temperature=1.0, seed=5)
    body = vllm.bodies[-1][1]
    VllmCompletionRequest(**body)
    assert body["temperature"] == 1.0 and body["top_k"] == -1 and body["seed"] == 5


def test_vllm_teacher_forcing_request(vllm, tokenizer):
    target = ServerTarget(vllm.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    prompt, cont = [1, 2, 3], [11, 12]
    # what vLLM answers this request: no logprobs or token_ids asked for, so both null; prompt_logprobs
    # (list[dict[int, Logprob] | None]) from the first prompt token on, 12 outside the top 2 (three entries)
    entries = _prompt_logprobs(prompt + cont, {11: -0.75, 12: -5.0})
    reply = _completion([5], prompt=tuple(prompt + cont), logprobs=None, token_ids=False, prompt_logprobs=entries)
    assert entries[0] is None and len(entries[-1]) == 3 and entries[-1]["12"]["rank"] == 3
    vllm.replies["/v1/completions"] = reply
    st = target.token_stats([prompt], [cont])[0]
    assert st.token_ids == cont and st.logprob.tolist() == pytest.approx([-0.75, -5.0])
    # the entropy of the top k alone: not of the forced token vLLM adds when it ranks below them
    top2 = topk_entropy([-3.0, -3.5], target.vocab_size, target.tail)
    assert float(st.entropy[1]) == pytest.approx(top2, abs=1e-6)
    body = vllm.bodies[-1][1]
    VllmCompletionRequest(**body)
    assert body["prompt"] == prompt + cont and body["prompt_logprobs"] == 2 and body["max_tokens"] == 1
    assert "logprobs" not in body and "echo" not in body and body["repetition_penalty"] == 1.0
    assert (body["temperature"], body["top_k"], body["presence_penalty"]) == (0.0, -1, 0.0)


def _value(prompt: list[int], token: int) -> float:
    """The log-probability the stubs give ``token`` after ``prompt`` (differs by both)."""
    return -0.5 - token / 100 - len(prompt) / 1000


def test_vllm_next_tokens_in_one_request(vllm, tokenizer):
    """ACU's label tokens: one logprob_token_ids request per prompt (vLLM 0.33); an older vLLM ignores the
    field, and grogu teacher-forces each token through prompt_logprobs instead. The same values."""
    target = ServerTarget(vllm.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    prompts, cols = [[1, 2, 3], [1, 2, 3, 4]], [11, 12, 13]
    want = [[_value(p, t) for t in cols] for p in prompts]

    def new_vllm(body: dict) -> dict:  # the sampled token first, then every asked id (generate/base/serving.py)
        reply = _completion([5], prompt=tuple(body["prompt"]), logprobs=1)
        asked = {f"token_id:{t}": _value(body["prompt"], t) for t in body["logprob_token_ids"]}
        reply["choices"][0]["logprobs"]["top_logprobs"][0] = {"token_id:5": -0.1, **asked}
        return reply

    vllm.replies["/v1/completions"] = new_vllm
    assert target.next_token_logprobs(prompts, token_ids=cols).tolist() == [pytest.approx(w) for w in want]
    assert len(vllm.bodies) == 2
    for body, p in zip(sorted((b for _, b in vllm.bodies), key=lambda b: len(b["prompt"])), prompts):
        VllmCompletionRequest(**body)
        assert (body["prompt"], body["logprob_token_ids"], body["max_tokens"], body["logprobs"]) == (p, cols, 1, 1)
        assert body["temperature"] == 0.0 and body["ignore_eos"] is True

    def old_vllm(body: dict) -> dict:  # the field ignored: no asked ids; prompt_logprobs when asked
        if "prompt_logprobs" not in body:
            return _completion([5], prompt=tuple(body["prompt"]), logprobs=1)
        *prompt, token = body["prompt"]
        entries = _prompt_logprobs(body["prompt"], {token: _value(prompt, token)})
        return _completion([5], prompt=tuple(body["prompt"]), logprobs=None, token_ids=False, prompt_logprobs=entries)

    vllm.bodies.clear()
    vllm.replies["/v1/completions"] = old_vllm
    assert target.next_token_logprobs(prompts, token_ids=cols).tolist() == [pytest.approx(w) for w in want]
    forced = [b for _, b in vllm.bodies if "prompt_logprobs" in b]
    assert len(vllm.bodies) == 2 + 6 and sorted(b["prompt"] for b in forced) == sorted(
        p + [t] for p in prompts for t in cols
    )


def _sglang_answer(ids: list[int], finish: dict, *, prompt: list[int] | None = None, start: int = -1) -> dict:
    """One item of a ``/generate`` answer: ``output_ids`` (the stop token kept), ``meta_info`` with
    ``[logprob, token_id, text]`` triples (text null) and top-k triples; with ``prompt`` and ``start`` the
    prompt's entries from ``start``, the first one's log-probability null (logprob_result_processor.py)."""
    meta = {
        "id": "r",
        "finish_reason": finish,
        "prompt_tokens": 3,
        "weight_version": "default",
        "completion_tokens": len(ids),
        "cached_tokens": 0,
        "output_token_logprobs": [[-0.25 * (i + 1), t, None] for i, t in enumerate(ids)],
        "output_top_logprobs": [[[-0.25 * (i + 1), t, None], [-3.0, 7, None]] for i, t in enumerate(ids)],
        "input_token_logprobs": [],
        "input_top_logprobs": [],
    }
    if prompt is not None:
        meta["input_token_logprobs"] = [[None if i == 0 else -0.5 * i, t, None] for i, t in enumerate(prompt[start:])]
        meta["input_top_logprobs"] = [None] + [
            [[-0.5 * i, t, None], [-3.0, 7, None]] for i, t in enumerate(prompt[start:]) if i
        ]
    return {"text": "x" * len(ids), "output_ids": ids, "meta_info": meta}


def test_sglang_generation_request(tokenizer):
    """api="auto" takes SGLang's /generate (outside /v1) from owned_by "sglang": token ids in a batch,
    greedy, every SamplingParams field sent neutral; top-k by id; the stop token's statistics kept."""
    stub = _Stub("sglang")
    try:
        target = ServerTarget(stub.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
        assert (target.api, target.backend, target.grounded_only) == ("sglang", "sglang", False)
        assert target.capabilities == {"generate", "teacher_force", "next_token"} and target.max_context_tokens == 2048
        ids = target.encode("Canberra is")
        stop = {"type": "stop", "matched": target.end_of_turn}
        stub.replies["/generate"] = [_sglang_answer(ids + [target.end_of_turn], stop), _sglang_answer(ids[:1], {})]
        gen, cut = target.generate([[1, 2, 3], [4, 5]], 4)
        assert gen.token_ids == ids and gen.text == "Canberra is" and gen.stop_token_id == target.end_of_turn
        assert gen.logprob.tolist() == pytest.approx([-0.25 * (i + 1) for i in range(len(ids))])
        assert gen.stop_logprob == pytest.approx(-0.25 * (len(ids) + 1)) and not cut.finished
        path, body = stub.bodies[-1]
        SglangGenerateRequest(**body)
        assert path == "/generate" and body["input_ids"] == [[1, 2, 3], [4, 5]] and body["logprob_start_len"] == -1
        assert (body["return_logprob"], body["top_logprobs_num"], body["return_text_in_logprobs"]) == (True, 2, False)
        for params in body["sampling_params"]:
            assert {k: params[k] for k in SGLANG_NEUTRAL} == SGLANG_NEUTRAL
            assert (params["temperature"], params["max_new_tokens"], params["sampling_seed"]) == (0.0, 4, None)
            assert params["stop_token_ids"] == target.stop_token_ids
            assert set(params) == set(SglangSamplingParams.model_fields)  # every field, none unknown
        with pytest.raises(ValueError, match="Extra inputs"):  # SGLang refuses an unknown key (a 400)
            SglangSamplingParams(**{**body["sampling_params"][0], "seed": 5})
        # sampled (ΔSePer): one seed per item, as sampling_seed; 20 prompts go out in two batches
        stub.replies["/generate"] = [_sglang_answer(ids, {"type": "length", "length": 4})] * 16
        sent = len(stub.bodies)
        with pytest.raises(ServerError, match="answered a batch of 4"):
            target.generate([[1, 2, 3]] * 20, 4, temperature=1.0, seed=5)
        bodies = [b for _, b in stub.bodies[sent:]]
        assert sorted(len(b["input_ids"]) for b in bodies) == [4, 16]
        seeds = sorted(p["sampling_seed"] for b in bodies for p in b["sampling_params"])
        assert seeds == list(range(5, 25)) and all(p["temperature"] == 1.0 for p in bodies[0]["sampling_params"])
        # a stop string of the server's (never sent by grogu) and an aborted item are errors
        stub.replies["/generate"] = [_sglang_answer(ids, {"type": "stop", "matched": "\n\n"})]
        with pytest.raises(ServerCapabilityError, match="stop string"):
            target.generate([[1, 2, 3]], 4)
        stub.replies["/generate"] = [_sglang_answer([], {"type": "abort", "message": "too long"})]
        with pytest.raises(ServerError, match="aborted a request: too long"):
            target.generate([[1, 2, 3]], 4)
    finally:
        stub.close()


def test_sglang_teacher_forcing_request(tokenizer):
    """prompt + answer as input_ids, logprob_start_len the prompt's last position, max_new_tokens 0: the
    answer's statistics are input_token_logprobs[1:], checked against the forced ids."""
    stub = _Stub("sglang")
    try:
        target = ServerTarget(stub.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
        prompts, conts = [[1, 2, 3], [4, 5]], [[11, 12], [13]]
        length = {"type": "length", "length": 0}
        stub.replies["/generate"] = [
            _sglang_answer([], length, prompt=p + c, start=len(p) - 1) for p, c in zip(prompts, conts)
        ]
        first, second = target.token_stats(prompts, conts)
        assert first.token_ids == [11, 12] and first.logprob.tolist() == pytest.approx([-0.5, -1.0])
        assert second.token_ids == [13] and second.logprob.tolist() == pytest.approx([-0.5])
        body = stub.bodies[-1][1]
        SglangGenerateRequest(**body)
        assert body["input_ids"] == [[1, 2, 3, 11, 12], [4, 5, 13]] and body["logprob_start_len"] == [2, 1]
        for params in body["sampling_params"]:
            assert {k: params[k] for k in SGLANG_NEUTRAL} == SGLANG_NEUTRAL
            assert (params["max_new_tokens"], params["temperature"]) == (0, 0.0)
        # the self-check: log-probabilities returned for other ids than the forced ones
        stub.replies["/generate"] = [_sglang_answer([], length, prompt=[1, 2, 3, 11, 99], start=2)]
        with pytest.raises(ServerError, match="where grogu forced"):
            target.token_stats([[1, 2, 3]], [[11, 12]])
        stub.replies["/generate"] = [_sglang_answer([], length)]  # no prompt log-probabilities at all
        with pytest.raises(ServerCapabilityError, match="no prompt log-probabilities in SGLang's form"):
            target.token_stats([[1, 2, 3]], [[11, 12]])
    finally:
        stub.close()


def test_sglang_chat_route_stays_available(tokenizer):
    """api="chat" given explicitly (a proxy in front of SGLang) scores through SGLang's chat API
    (grounded-only), with SGLang's sampling fields sent as neutral values."""
    stub = _Stub("sglang")
    try:
        target = ServerTarget(stub.url, tokenizer=tokenizer, retries=0, top_logprobs=2, api="chat")
        assert target.api == "chat" and target.grounded_only and target.backend == "sglang"
        content = [
            {
                "token": tok,
                "bytes": list(tok.encode()),
                "logprob": -0.5,
                "top_logprobs": [
                    {"token": tok, "bytes": list(tok.encode()), "logprob": -0.5},
                    {"token": "z", "bytes": [122], "logprob": -2.0},
                ],
            }
            for tok in ("Can", "berra")
        ]
        stub.replies["/v1/chat/completions"] = {
            "id": "1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Canberra"},
                    "logprobs": {"content": content},
                    "finish_reason": "stop",
                    "matched_stop": 1,
                }
            ],
            "usage": {"prompt_tokens": 5, "total_tokens": 7, "completion_tokens": 2},
        }
        gen = target.generate([ChatPrompt("Where?")], 4)[0]
        assert gen.text == "Canberra" and gen.tokens == ["Can", "berra"] and gen.finished
        body = stub.bodies[-1][1]
        SglangChatRequest(**body)
        assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (-1, 0.0, 1.0)
        with pytest.raises(ServerCapabilityError, match="teacher forcing"):
            target.token_stats([[1, 2]], [[3]])
    finally:
        stub.close()


@pytest.fixture
def llama_server():
    stub = _Stub("llamacpp")
    yield stub
    stub.close()


def test_llama_server_generation_request(llama_server, tokenizer):
    """api="auto" takes llama-server's /completion (outside /v1) from owned_by "llamacpp": token ids, greedy,
    every sampler field neutral; vocabulary and context window from /v1/models' meta; grounded-only with
    grammar_forcing=False."""
    target = ServerTarget(llama_server.url, tokenizer=tokenizer, top_logprobs=2, retries=0, grammar_forcing=False)
    assert (target.api, target.backend, target.grounded_only) == ("llama-server", "llama-server", True)
    assert target.capabilities == {"generate"} and (target.vocab_size, target.max_context_tokens) == (49280, 4096)
    ids = target.encode("Canberra is")
    llama_server.replies["/completion"] = _llama_server_answer(ids + [2], stop_type="eos")
    gen = target.generate([[1, 2, 3]], 4)[0]
    assert gen.token_ids == ids and gen.text == "Canberra is" and gen.stop_token_id == 2
    assert gen.logprob.tolist() == pytest.approx([-0.25 * (i + 1) for i in range(len(ids))])
    assert gen.stop_logprob == pytest.approx(-0.25 * (len(ids) + 1)) and gen.stop_entropy > 0
    path, body = llama_server.bodies[-1]
    LlamaServerCompletionRequest(**body)
    assert path == "/completion" and body["prompt"] == [1, 2, 3] and body["n_predict"] == 4
    assert (body["n_probs"], body["return_tokens"], body["temperature"], body["top_k"]) == (2, True, 0.0, 1)
    assert {k: body[k] for k in NEUTRAL} == NEUTRAL and body["samplers"] == ["top_k", "temperature"]
    assert body["post_sampling_probs"] is False and body["repeat_last_n"] == 0 and "grammar" not in body
    # stopped by the token limit: no stop token
    llama_server.replies["/completion"] = _llama_server_answer(ids)
    assert not target.generate([[1, 2, 3]], len(ids))[0].finished
    # sampled (ΔSePer): the same neutral fields, the top-k sampler off
    target.generate([[1, 2, 3]], 4, temperature=1.0, seed=5)
    body = llama_server.bodies[-1][1]
    LlamaServerCompletionRequest(**body)
    assert (body["temperature"], body["top_k"], body["seed"]) == (1.0, 0, 5)
    with pytest.raises(ServerCapabilityError, match="grammar_forcing at its default"):
        target.token_stats([[1, 2, 3]], [ids])
    # a token ending inside a UTF-8 character has no entry: at the budget's end the answer stops before
    # its character (what a smaller budget gives); inside the answer it is an error, not steps out of line
    llama_server.replies["/completion"] = _llama_server_answer(ids, entries=len(ids) - 1)
    gen = target.generate([[1, 2, 3]], len(ids))[0]
    assert gen.token_ids == ids[:-1] and not gen.finished
    inside = _llama_server_answer(ids)
    del inside["completion_probabilities"][1]
    llama_server.replies["/completion"] = inside
    with pytest.raises(ServerCapabilityError, match="inside a UTF-8 character"):
        target.generate([[1, 2, 3]], len(ids))


def test_llama_server_grammar_forcing_request(llama_server, tokenizer):
    """By default a token-id grammar forces the answer, n_predict its length; a trailing end-of-turn token
    is left to the logit bias (a grammar refuses end-of-generation tokens)."""
    target = ServerTarget(llama_server.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    assert not target.grounded_only and target.capabilities == {"generate", "teacher_force", "next_token"}
    cont = [11, 12]
    llama_server.replies["/completion"] = _llama_server_answer(cont)
    st = target.token_stats([[1, 2, 3]], [cont])[0]
    assert st.token_ids == cont and st.logprob.tolist() == pytest.approx([-0.25, -0.5])
    body = llama_server.bodies[-1][1]
    LlamaServerCompletionRequest(**body)
    assert (body["grammar"], body["grammar_lazy"], body["n_predict"]) == ("root ::= <[11]> <[12]>", False, 2)
    assert body["logit_bias"] == [] and body["temperature"] == 0.0 and body["top_k"] == 1
    llama_server.replies["/completion"] = _llama_server_answer(cont + [2], stop_type="eos")
    target.token_stats([[1, 2, 3]], [cont + [2]])
    body = llama_server.bodies[-1][1]
    LlamaServerCompletionRequest(**body)
    assert (body["grammar"], body["logit_bias"], body["n_predict"]) == ("root ::= <[11]> <[12]>", [[2, FORCE_BIAS]], 3)
    llama_server.replies["/completion"] = _llama_server_answer([2], stop_type="eos")
    target.token_stats([[1, 2, 3]], [[2]])  # an empty answer: the end-of-turn token alone
    assert llama_server.bodies[-1][1]["grammar"] == 'root ::= ""'
    llama_server.replies["/completion"] = _llama_server_answer([11, 13])  # the grammar did not bind
    with pytest.raises(ServerError, match="where the token grammar forces"):
        target.token_stats([[1, 2, 3]], [cont])
    # a llama.cpp without token-id grammars: llama-server's own 400 (seen on the real binary for a bad grammar)
    refused = {"error": {"code": 400, "message": "Failed to initialize samplers: failed to parse grammar"}}
    llama_server.replies["/completion"] = (400, {**refused, "type": "invalid_request_error"})
    with pytest.raises(ServerCapabilityError, match="grammar_forcing=False"):
        target.token_stats([[1, 2, 3]], [cont])
    with pytest.raises(ValueError, match="grammar_forcing applies to api='llama-server' only"):
        ServerTarget(llama_server.url, tokenizer=tokenizer, api="vllm", grammar_forcing=True)


def test_llama_server_chat_route_sends_every_neutral_field(llama_server, tokenizer):
    """Through llama-server's chat endpoint (api="chat") the sampler fields pass through to its samplers
    (server-common.cpp, oaicompat_chat_params_parse copies them): all sent neutral. Any other chat API
    gets the OpenAI penalties at 0."""
    target = ServerTarget(llama_server.url, api="chat", retries=0)
    body = target.server_api.body(ChatPrompt("Where?"), 5, None, None)
    assert {k: body[k] for k in NEUTRAL} == NEUTRAL and (body["temperature"], body["top_k"]) == (0.0, 1)
    other = _Stub("library")  # Ollama
    try:
        body = ServerTarget(other.url, api="chat", retries=0).server_api.body(ChatPrompt("Where?"), 5, None, None)
        assert (body["presence_penalty"], body["frequency_penalty"], body["top_p"]) == (0.0, 0.0, 1.0)
        assert "samplers" not in body and "repeat_penalty" not in body
    finally:
        other.close()


def test_llama_server_model_name_without_a_tokenizer_falls_back_to_chat():
    """llama-server's model id is the GGUF's file name by default: api="auto" without tokenizer= cannot load
    one from it, says so and scores through the chat API (grounded-only)."""
    stub = _Stub("llamacpp", id="qwen2.5-7b-instruct-q4_k_m.gguf")
    try:
        target = ServerTarget(stub.url, retries=0)  # no request yet: the API is told on connecting
        with pytest.warns(UserWarning, match="Pass tokenizer="):
            assert target.api == "chat"
        assert target.backend == "llama-server" and target.grounded_only
    finally:
        stub.close()
