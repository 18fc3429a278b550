"""ServerTarget's requests and response parsing against vLLM's and SGLang's own protocol, where neither
server runs here: each request body grogu sends is validated by a pydantic model transcribed from the
server's protocol class (unknown fields refused), and each answer is one the server's response class
would build. A loopback HTTP stub records the bodies and answers with those responses.

Read from (fields transcribed, not the servers' code):
- vLLM ``vllm/entrypoints/openai/completion/protocol.py`` at commit d5dba2d7b0ab9b98096560c69db7126b54b14d79
  (``CompletionRequest``, ``CompletionResponseChoice``: ``token_ids``, ``prompt_logprobs``);
- SGLang ``python/sglang/srt/entrypoints/openai/protocol.py`` at commit 9b116dffe828b2dfa7ec0e4d061555b6c354b67a
  (``ModelCard.owned_by = "sglang"``, ``CompletionRequest`` without ``prompt_logprobs`` or
  ``return_token_ids``, ``ChatCompletionRequest``, ``ChatCompletionTokenLogprob``)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union

import pytest
from pydantic import BaseModel, ConfigDict

import grogu
from grogu.inference_server import ServerCapabilityError, ServerTarget
from grogu.prompts import ChatPrompt


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class VllmCompletionRequest(_Forbid):
    """vLLM CompletionRequest: the fields grogu may send, with vLLM's types."""

    model: Optional[str] = None
    prompt: Union[list[int], str, None] = None
    echo: Optional[bool] = False
    logprobs: Optional[int] = None
    max_tokens: Optional[int] = 16
    seed: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    stop_token_ids: Optional[list[int]] = []
    skip_special_tokens: bool = True
    prompt_logprobs: Optional[int] = None
    return_tokens_as_token_ids: Optional[bool] = None
    return_token_ids: Optional[bool] = None


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


class _Stub:
    """A loopback server answering /v1/models and the completion routes with ``replies[path]``."""

    def __init__(self, owner: str) -> None:
        self.bodies: list[tuple[str, dict]] = []
        self.replies: dict[str, Any] = {}
        stub = self
        models = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": owner, "max_model_len": 2048}]}

        class Handler(BaseHTTPRequestHandler):
            def _send(self, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802
                self._send(models)

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                stub.bodies.append((self.path, body))
                self._send(stub.replies[self.path])

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
    from grogu.models import load_tokenizer

    return load_tokenizer(grogu.DEFAULT_MODEL)


@pytest.fixture
def vllm():
    stub = _Stub("vllm")
    yield stub
    stub.close()


def _completion(ids: list[int], *, token_ids: bool = True, token_text: bool = False) -> dict:
    """A vLLM CompletionResponse: ``token_ids`` with return_token_ids; tokens as 'token_id:N' with
    return_tokens_as_token_ids (or as text, as a server without it answers)."""
    tokens = [f"t{t}" if token_text else f"token_id:{t}" for t in ids]
    choice = {
        "index": 0,
        "text": "x" * len(ids),
        "finish_reason": "length",
        "stop_reason": None,
        "logprobs": {
            "text_offset": list(range(len(ids))),
            "token_logprobs": [-0.5] * len(ids),
            "tokens": tokens,
            "top_logprobs": [{tok: -0.5, "token_id:7": -1.5} for tok in tokens],
        },
        "prompt_logprobs": None,
        "prompt_token_ids": None,
    }
    if token_ids:
        choice["token_ids"] = ids
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [choice],
        "usage": {"prompt_tokens": 3, "total_tokens": 3 + len(ids), "completion_tokens": len(ids)},
    }


def test_vllm_generation_request_and_token_ids(vllm, tokenizer):
    target = ServerTarget(vllm.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    assert target.api == "vllm" and target.max_context_tokens == 2048
    ids = target.encode("Canberra is")
    vllm.replies["/v1/completions"] = _completion(ids)
    gen = target.generate([[1, 2, 3]], 4)[0]
    assert gen.token_ids == ids
    path, body = vllm.bodies[-1]
    VllmCompletionRequest(**body)  # every field one vLLM declares, with its type
    assert body["return_token_ids"] is True and body["prompt"] == [1, 2, 3]
    assert (body["repetition_penalty"], body["top_k"], body["min_p"]) == (1.0, -1, 0.0)  # not the model's defaults
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.0, 0.0)  # nor its penalties
    assert body["stop_token_ids"] == target.stop_token_ids and body["temperature"] == 0.0
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
    with pytest.raises(ServerCapabilityError, match="without the completions API's per-token log-probabilities"):
        target.generate([[1, 2, 3]], 4)
    # sampled (ΔSePer): the neutral fields again, at temperature 1
    vllm.replies["/v1/completions"] = _completion(ids)
    target.generate([[1, 2, 3]], 4, temperature=1.0, seed=5)
    body = vllm.bodies[-1][1]
    VllmCompletionRequest(**body)
    assert body["temperature"] == 1.0 and body["top_k"] == -1 and body["seed"] == 5


def test_vllm_teacher_forcing_request(vllm, tokenizer):
    target = ServerTarget(vllm.url, tokenizer=tokenizer, top_logprobs=2, retries=0)
    prompt, cont = [1, 2, 3], [11, 12]
    reply = _completion([5])
    # prompt_logprobs: list[dict[int, Logprob] | None] (Logprob: logprob, rank, decoded_token), JSON keys as text
    reply["choices"][0]["prompt_logprobs"] = [None] + [
        {
            str(t): {"logprob": -0.25 * (i + 1), "rank": 1, "decoded_token": "a"},
            "7": {"logprob": -3.0, "rank": 2, "decoded_token": "b"},
        }
        for i, t in enumerate(prompt[1:] + cont)
    ]
    vllm.replies["/v1/completions"] = reply
    st = target.token_stats([prompt], [cont])[0]
    assert st.token_ids == cont and st.logprob.tolist() == pytest.approx([-0.75, -1.0])
    body = vllm.bodies[-1][1]
    VllmCompletionRequest(**body)
    assert body["prompt"] == prompt + cont and body["prompt_logprobs"] == 2 and body["repetition_penalty"] == 1.0


def test_sglang_is_scored_through_its_chat_api(tokenizer):
    """SGLang's completions API has no prompt log-probabilities: api='auto' takes its chat API
    (grounded-only), with SGLang's sampling fields sent as neutral values."""
    stub = _Stub("sglang")
    try:
        target = ServerTarget(stub.url, tokenizer=tokenizer, retries=0, top_logprobs=2)
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
