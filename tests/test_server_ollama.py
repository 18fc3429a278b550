"""grogu.ServerTarget with api="ollama" (Ollama's native /api/chat, grounded-only) against llama.cpp itself.

No Ollama server runs here. The server is :class:`grogu_research.ollama_standin.OllamaStandIn`: Ollama's
``/api/chat``, ``/api/version`` and ``/v1/models`` over HTTP, transcribed from Ollama v0.33.0-rc2,
decoding with llama.cpp in this process on the embedded SmolLM2 GGUF. Its Modelfile sets penalties and
a temperature, as many published Modelfiles do: grogu's request must switch them off.

The reference is a second ``llama_cpp.Llama`` on the same GGUF, fed the chat template over the same
messages: its greedy answer over the raw logits, and the log-softmax of those logits. Each request body
is validated against ``ChatRequest`` and ``Options`` as transcribed (api/types.go), unknown keys refused:
Ollama itself ignores an unknown field and only logs an unknown option, so a misspelt one would
silently not apply.
"""

from __future__ import annotations

import warnings
from typing import Any, Optional

import numpy as np
import pytest
import torch
from grogu_research import testing
from pydantic import BaseModel, ConfigDict

import grogu
from grogu.core.prompts import ChatPrompt
from grogu.runtime.inference_server import ServerCapabilityError, ServerError, ServerTarget, topk_entropy
from grogu.runtime.inference_server.ollama import NEUTRAL

# one worker starts this module's servers once (--dist loadgroup)
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.slow,
    pytest.mark.xdist_group("server_ollama"),
]

QUERY = "What is the capital city of Australia?"
DOCS = ["Canberra is the capital city of Australia.", "Sydney is the largest city in Australia."]
K = 20
BUDGET = 12
ATOL = 5e-5  # float32 log-softmax on the server against float64 here; an entropy sums 20 such terms
#: PARAMETER lines that bend a greedy answer (llama.cpp applies penalties before the temperature)
MODELFILE = {"temperature": 0.7, "repeat_penalty": 1.5, "presence_penalty": 1.5, "repeat_last_n": 64}


class _Forbid(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class OllamaOptions(_Forbid):
    """api/types.go, Options (and Runner): the keys grogu may send, with Ollama's types."""

    num_keep: Optional[int] = None
    seed: Optional[int] = None
    num_predict: Optional[int] = None
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    min_p: Optional[float] = None
    typical_p: Optional[float] = None
    repeat_last_n: Optional[int] = None
    temperature: Optional[float] = None
    repeat_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    stop: Optional[list[str]] = None


class OllamaMessage(_Forbid):
    role: str
    content: str


class OllamaChatRequest(_Forbid):
    """api/types.go, ChatRequest: the fields grogu may send (format, tools, think, shift, keep_alive left out)."""

    model: str
    messages: list[OllamaMessage]
    stream: Optional[bool] = None
    options: Optional[OllamaOptions] = None
    truncate: Optional[bool] = None
    logprobs: bool = False
    top_logprobs: int = 0


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    from grogu_research.ollama_standin import OllamaStandIn

    with OllamaStandIn(modelfile=MODELFILE, n_ctx=1024) as srv:
        yield srv


@pytest.fixture(scope="module")
def target(server):
    return ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=K, retries=0)


@pytest.fixture(scope="module")
def reference():
    llm = testing.reference_llama(n_ctx=1024)
    yield llm
    llm.close()


def prompt_ids(target: ServerTarget, prompt: ChatPrompt) -> list[int]:
    text = target.tokenizer.apply_chat_template(prompt.messages(), add_generation_prompt=True, tokenize=False)
    return list(target.tokenizer.encode(text, add_special_tokens=False))


def test_told_by_its_version_route(server, target):
    """api="auto" takes Ollama from /api/version; a Modelfile that bends greedy answers is named once."""
    assert (target.api, target.backend) == ("ollama", "ollama")
    with pytest.warns(UserWarning, match="presence_penalty=1.5, repeat_penalty=1.5"):
        ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, retries=0).connect()
    kept, server.modelfile = server.modelfile, {"temperature": 0.7, "repeat_penalty": 1.5, "repeat_last_n": 0}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no penalty window: nothing to name
            ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, retries=0).connect()
    finally:
        server.modelfile = kept
    assert target.grounded_only and target.takes_messages and target.capabilities == {"generate"}
    server.version = "0.12.10"  # before log-probabilities came to /api/chat
    try:
        with pytest.raises(ServerCapabilityError, match="0.12.11"):
            ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, retries=0).connect()
    finally:
        server.version = "0.33.0"
    with pytest.raises(ValueError, match="top_logprobs"):  # told when the API is: on connecting
        ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, top_logprobs=21, retries=0).connect()
    with pytest.raises(ValueError, match="top_logprobs"):  # a named API: when the target is made
        ServerTarget(server.url, tokenizer=grogu.DEFAULT_MODEL, api="ollama", top_logprobs=21)
    with pytest.raises(ValueError, match="needs an Ollama server"):  # no request is sent there
        ServerTarget("https://api.openai.com/v1", "gpt-4o-mini", api="ollama")


def test_greedy_answer_is_llama_cpps_despite_the_modelfile(server, target, reference):
    """The answer, each token's log-probability and top-k entropy equal llama.cpp's greedy decoding over the
    raw logits, although the Modelfile sets penalties and a temperature: every option is pinned."""
    scorer = grogu.UtilityScorer(target, metric="entropy", max_new_tokens=BUDGET)
    prompt = scorer.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])])
    gen = target.generate([prompt], BUDGET)[0]
    ids, rows = testing.greedy_stepwise(reference, prompt_ids(target, prompt), server.eog, BUDGET)
    answer = [t for t in ids if t not in server.eog]
    assert gen.text == reference.detokenize(answer).decode().strip() and "Canberra" in gen.text
    assert gen.finished == (ids[-1] in server.eog) and len(gen.tokens) == len(answer)
    want_lp = [float(r[t]) for r, t in zip(rows, answer)]
    want_ent = [
        topk_entropy(torch.topk(torch.from_numpy(r), K).values.tolist(), target.vocab_size, target.tail) for r in rows
    ]
    np.testing.assert_allclose(gen.logprob.numpy(), want_lp, atol=ATOL)
    np.testing.assert_allclose(gen.entropy.numpy(), want_ent[: len(answer)], atol=ATOL)
    path, body = server.bodies[-1]
    assert path == "/api/chat"
    OllamaChatRequest(**body)  # every field and option one Ollama declares, with its type
    assert body["options"] == {**NEUTRAL, "temperature": 0.0, "num_predict": BUDGET} and not server.ignored_options
    assert (body["stream"], body["truncate"], body["logprobs"], body["top_logprobs"]) == (False, False, True, K)
    # what the OpenAI route can send (temperature, top_p): the Modelfile's penalties then change the answer
    plain = server.chat({**body, "options": {"temperature": 0.0, "top_p": 1.0, "num_predict": BUDGET}})
    assert plain["message"]["content"].strip() != gen.text


def test_scores_and_the_answer_budget(target, server):
    """UtilityScorer's entropy through Ollama is the answer's mean token entropy; a budget that cuts the
    answer gives done_reason "length" and a shorter answer."""
    scorer = grogu.UtilityScorer(target, metric="entropy", max_new_tokens=BUDGET)
    scores = scorer.score(QUERY, DOCS, return_details=True)
    for doc, s in zip(DOCS, scores):
        gen = target.generate([scorer.prompts.grounded_ids(QUERY, [grogu.Document(doc)])], BUDGET)[0]
        assert s.score == pytest.approx(-float(gen.entropy.mean()), abs=1e-6)
    cut = target.generate([scorer.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])])], 2)[0]
    assert len(cut.tokens) == 2 and not cut.finished
    with pytest.raises(ServerCapabilityError, match="teacher forcing"):
        target.token_stats([[1, 2]], [[3]])


def test_a_prompt_that_does_not_fit_is_an_error_not_a_cut(target, server):
    """truncate: false: Ollama refuses a prompt longer than the context instead of dropping its oldest
    messages and then tokens; grogu says so."""
    long = "Canberra is the capital city of Australia. " * 200  # far over the 1024-token context
    with pytest.raises(ServerError, match="does not fit"):
        target.generate([ChatPrompt(system=None, user=f"{long}\n\n{QUERY}")], BUDGET)
    body = server.bodies[-1][1]
    assert body["truncate"] is False
    assert server.chat({**body, "truncate": True})["done"]  # Ollama's default would have cut it silently


def test_old_ollama_without_log_probabilities_is_a_clear_error(target, server):
    body_logprobs = server.chat  # an Ollama before 0.12.11 ignores logprobs: no entries come back

    def without(body: dict[str, Any]) -> dict[str, Any]:
        answer = body_logprobs(body)
        answer.pop("logprobs", None)
        return answer

    server.chat = without
    try:
        with pytest.raises(ServerCapabilityError, match="0.12.11"):
            target.generate([ChatPrompt(system=None, user=QUERY)], BUDGET)
    finally:
        del server.chat
