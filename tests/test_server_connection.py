"""ServerTarget's connection: no request until first use, one HTTP client kept across calls (sync and async,
from any event loop) and closed by ``close()`` or a ``with`` block; and the API classes: one per server
API, each a :class:`~grogu.runtime.inference_server.ServerAPI`, all in one registry. A loopback stub that
keeps connections alive (HTTP/1.1, grogu_research.loopback) counts the TCP connections and requests it gets."""

from __future__ import annotations

import asyncio
import os
import pickle
import re
from typing import Any

import pytest
from grogu_research import testing
from grogu_research.loopback import LoopbackJSON

from grogu.core.target import Target
from grogu.runtime.inference_server import APIS, APIS_BY_NAME, ServerAPI, ServerError, ServerTarget
from grogu.runtime.inference_server.base import Served
from grogu.runtime.inference_server.http import Connection, run

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "src", "grogu", "runtime", "inference_server")


class Tokenizer:
    """The tokenizer members a vLLM target reads: ids 0..99, id 2 the EOS, each id's text its number."""

    eos_token_id = 2
    bos_token_id = 1
    model_max_length = 64

    def __len__(self) -> int:
        return 100

    def get_vocab(self) -> dict[str, int]:
        return {str(i): i for i in range(100)}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return " ".join(str(i) for i in ids)


def _completion(ids: list[int]) -> dict:
    """A vLLM completion of ``ids``: each token's log-probability -0.5 and one alternative at -1.5."""
    tokens = [f"token_id:{t}" for t in ids]
    return {
        "choices": [
            {
                "text": "x" * len(ids),
                "finish_reason": "length",
                "token_ids": ids,
                "logprobs": {
                    "tokens": tokens,
                    "token_logprobs": [-0.5] * len(ids),
                    "top_logprobs": [{tok: -0.5, "token_id:7": -1.5} for tok in tokens],
                },
            }
        ]
    }


def _vllm(method: str, path: str, body: Any) -> tuple[int, Any]:
    """A vLLM stand-in's answers: the model listing to any GET, a completion of [5, 6] to any POST."""
    if method == "GET":
        return 200, {"data": [{"id": "m", "owned_by": "vllm", "max_model_len": 64}]}
    return 200, _completion([5, 6])


@pytest.fixture
def stub():
    """A loopback vLLM stand-in that keeps connections alive and counts them."""
    with LoopbackJSON(_vllm, prefix="/v1") as s:
        yield s


def test_making_a_target_sends_no_request(stub):
    """Construction checks the settings only; the listing is read on first use, once."""
    target = ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0)
    assert stub.paths() == [] and stub.connections == 0 and target.http.clients_made == 0
    assert repr(target) == f"ServerTarget({stub.url!r}, model=None, api='auto')"  # no request for repr either
    assert target.api == "vllm" and target.model_name == "m" and target.max_context_tokens == 64
    assert stub.paths() == ["/v1/models"]
    target.connect()  # connected once: nothing more is asked
    assert stub.paths() == ["/v1/models"] and isinstance(target, Target)
    target.close()


def test_a_closed_port_is_an_error_on_first_use_only():
    closed = f"http://127.0.0.1:{testing.free_port()}"
    target = ServerTarget(closed, tokenizer=Tokenizer(), retries=0, timeout=2)  # no error: nothing sent
    assert target.requests_sent == 0 and target.http.clients_made == 0
    with pytest.raises(ServerError, match="cannot reach the LLM server"):
        target.api  # noqa: B018
    # what is wrong with the settings themselves is still an error when the target is made
    with pytest.raises(ValueError, match="api must be"):
        ServerTarget(closed, api="tgi")
    with pytest.raises(ValueError, match="at most 20 with api='chat'"):
        ServerTarget(closed, api="chat", top_logprobs=21)


def test_one_client_serves_successive_calls(stub):
    """Two generate calls, and two more from two event loops (asyncio.run each), go through one client and
    one kept-alive TCP connection."""
    target = ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0)
    first = target.generate([[1, 3]], 2)[0]
    client = target.http._client
    second = target.generate([[1, 4]], 2)[0]
    assert first.token_ids == second.token_ids == [5, 6] and first.logprob.tolist() == [-0.5, -0.5]
    assert target.http._client is client and target.http.clients_made == 1
    for _ in range(2):
        assert asyncio.run(target.agenerate([[1, 3]], 2))[0].token_ids == [5, 6]
    assert target.http._client is client and target.http.clients_made == 1
    assert stub.paths() == ["/v1/models"] + ["/v1/completions"] * 4
    assert stub.connections == 1  # each call reused the connection the listing opened
    target.close()


def test_close_closes_the_client(stub):
    target = ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0)
    target.generate([[1, 3]], 2)
    client = target.http._client
    assert not client.is_closed
    target.close()
    assert client.is_closed and target.http._client is None
    target.generate([[1, 3]], 2)  # a later call opens a new client, on a new connection
    assert target.http.clients_made == 2 and stub.connections == 2
    target.close()
    target.close()  # closing twice is harmless


def test_a_with_block_closes_the_client(stub):
    with ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0) as target:
        target.generate([[1, 3]], 2)
        client = target.http._client
    assert client.is_closed

    async def use() -> Any:
        async with ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0) as t:
            await t.agenerate([[1, 3]], 2)
            return t.http._client

    assert asyncio.run(use()).is_closed


def test_a_copy_opens_its_own_client(stub):
    target = ServerTarget(stub.url, tokenizer=Tokenizer(), top_logprobs=1, retries=0)
    target.generate([[1, 3]], 2)
    copy = pickle.loads(pickle.dumps(target))
    assert copy.http._client is None and copy.api == "vllm"
    assert copy.generate([[1, 3]], 2)[0].token_ids == [5, 6] and copy.http._client is not target.http._client
    copy.close()
    target.close()


def test_a_sync_call_on_the_requests_loop_is_refused():
    """Waiting for the background loop from inside it would never end: it is an error instead."""

    async def nested() -> Any:
        return run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="wait on itself"):
        run(nested())


def _served(**kwargs: Any) -> Served:
    http = Connection(
        "http://h/v1", None, timeout=1, retries=0, backoff=0, max_concurrency=1, explain=lambda r, u: ValueError()
    )
    return Served(http, "http://h/v1", "m", 5, Tokenizer(), [2], 100, "uniform", **kwargs)


def test_every_server_api_is_one_class_of_the_protocol():
    """Six APIs, one class each, each a ServerAPI: what it can do and where its generation requests go."""
    assert set(APIS_BY_NAME) == set(APIS) == {"vllm", "sglang", "llama-cpp", "llama-server", "ollama", "chat"}
    assert len(set(APIS_BY_NAME.values())) == 6
    urls = {
        "vllm": "http://h/v1/completions",
        "llama-cpp": "http://h/v1/completions",
        "llama-server": "http://h/completion",
        "sglang": "http://h/generate",
        "ollama": "http://h/api/chat",
        "chat": "http://h/v1/chat/completions",
    }
    for name, cls in APIS_BY_NAME.items():
        api = cls(_served())
        assert isinstance(api, ServerAPI) and api.name == name and api.generate_url == urls[name]
        chat = name in ("chat", "ollama")
        assert (api.takes_messages, api.grounded_only) == (chat, chat)
        full = {"generate", "teacher_force", "next_token"}
        assert api.capabilities == ({"generate"} if chat else full)
    grounded = APIS_BY_NAME["llama-server"](_served(grammar_forcing=False))
    assert grounded.grounded_only and "grammar_forcing=False" in grounded.why_grounded_only()
    assert not isinstance(object(), ServerAPI)  # the check can fail


def test_no_api_name_is_compared_outside_detection():
    """Only apis.py (detection and the registry) compares API names; no ``type: ignore`` in the package."""
    names = "|".join(re.escape(n) for n in APIS)
    compared = re.compile(rf"""(==|!=|\bin\b)\s*[(\[]?\s*["']({names})["']|["']({names})["']\s*(==|!=|\bin\b)""")
    found = []
    for file in sorted(os.listdir(PACKAGE)):
        if file.endswith(".py"):
            text = open(os.path.join(PACKAGE, file), encoding="utf-8").read()
            if file != "apis.py":
                found += [f"{file}: {m.group(0)}" for m in compared.finditer(text)]
            found += [f"{file}: type: ignore" for _ in re.finditer(r"type:\s*ignore", text)]
    assert found == []
    apis = open(os.path.join(PACKAGE, "apis.py"), encoding="utf-8").read()
    assert compared.search(apis)  # the pattern finds what it looks for
