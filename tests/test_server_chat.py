"""grogu.ServerTarget(api="chat"), the grounded-only flavour for chat APIs (hosted OpenAI, Ollama, any
server's /v1/chat/completions), against a real OpenAI-compatible chat endpoint: llama-cpp-python's
server on this machine serving the embedded SmolLM2 GGUF (started once for this module).

The target is built as for a hosted model: no tokenizer (token strings come from the responses), only
the vocabulary size for the entropy's uniform tail. The references are the same server's chat endpoint
called plainly, llama.cpp in this process on the same GGUF (``create_chat_completion``), and the
entropy computed by hand from the top-k log-probabilities a response carries.

llama-cpp-python reuses the KV cache of the previous request's common prefix and evaluates the rest in
one batch, whose size selects llama.cpp's quantised kernels: the same request after different
predecessors can differ (seen: 0.26 nats on one token's entropy). Where numbers are compared exactly,
the compared request follows the same prompt on both sides (a request for it first), so both evaluate
alike; the remaining differences are float32 rounding.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from grogu_research import testing

import grogu
from grogu.core.prompts import ChatPrompt
from grogu.core.target import Target
from grogu.core.types import UNKNOWN_TOKEN_ID
from grogu.metrics.acu import ACUScorer
from grogu.metrics.influence import InfluenceScorer
from grogu.metrics.seper import SePerScorer
from grogu.runtime.inference_server import (
    ServerCapabilityError,
    ServerError,
    ServerTarget,
    choose_api,
    sampling_differences,
    target_from_llm,
    topk_entropy,
)

# a real server: not in the fast subset (-m "not slow")
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.slow]

QUERY = "What is the capital city of Australia?"
DOCS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
K = 20
BUDGET = 12
#: llama.cpp's numbers reach grogu as float32 in JSON: entropies recomputed from them agree to ~1e-7
EXACT = 1e-5
#: plain greedy decoding on llama-cpp-python (its server applies a repeat penalty of 1.1 by default)
GREEDY = {"repeat_penalty": 1.0, "top_k": 1, "min_p": 0.0, "top_p": 1.0}


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    with testing.LlamaCppServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(server):
    return testing.reference_llama()


@pytest.fixture(scope="module")
def vocab(reference) -> int:
    return reference.n_vocab()


@pytest.fixture(scope="module")
def target(server, vocab):
    return ServerTarget(server.url, api="chat", vocab_size=vocab, top_logprobs=K, retries=1)


@pytest.fixture(scope="module")
def scorer(target):
    return grogu.UtilityScorer(target, metric="entropy", max_new_tokens=BUDGET)


def grounded(scorer, *docs: str) -> ChatPrompt:
    return scorer.prompts.grounded_ids(QUERY, [grogu.Document(d) for d in docs])


def chat_request(server, prompt: ChatPrompt) -> dict:
    """The server's chat endpoint with log-probabilities, by hand (httpx)."""
    import httpx

    body = {
        "model": grogu.DEFAULT_MODEL,
        "messages": prompt.messages(),
        "max_tokens": BUDGET,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": K,
        **GREEDY,
    }
    resp = httpx.post(server.url + "/chat/completions", json=body, timeout=120)
    resp.raise_for_status()
    return resp.json()


def entropy_by_hand(top: list[float], vocab: int) -> float:
    """-sum p log p over the returned alternatives, plus the tail r spread evenly over the other tokens."""
    p = [math.exp(x) for x in top]
    rest = 1.0 - sum(p)
    head = -sum(pi * x for pi, x in zip(p, top))
    return head - rest * math.log(rest / (vocab - len(p))) if rest > 1e-12 else head


def test_sends_the_templates_messages_and_answers_as_the_chat_endpoint(server, target, scorer):
    """The scored answer is the chat endpoint's own answer to the scorer's messages (the openai client,
    no log-probabilities asked)."""
    import openai

    prompt = grounded(scorer, DOCS[0])
    context = scorer.template.render_context([grogu.Document(DOCS[0])])
    assert prompt.messages() == [
        {"role": "user", "content": scorer.template.grounded.format(query=QUERY, context=context)}
    ]
    gen = target.generate([prompt], BUDGET)[0]
    client = openai.OpenAI(base_url=server.url, api_key="none")
    plain = client.chat.completions.create(
        model=grogu.DEFAULT_MODEL,
        messages=prompt.messages(),
        temperature=0,
        max_tokens=BUDGET,
        extra_body={"repeat_penalty": 1.0},
    )
    assert gen.text == plain.choices[0].message.content.strip() and "Canberra" in gen.text
    assert gen.finished == (plain.choices[0].finish_reason == "stop")
    assert "".join(gen.tokens).strip() == gen.text and gen.token_ids == [UNKNOWN_TOKEN_ID] * len(gen.tokens)


def test_statistics_equal_llama_cpp_in_process(target, reference, scorer, vocab):
    """Each answer token's log-probability and top-k entropy are llama.cpp's on the same GGUF."""
    prompt = grounded(scorer, DOCS[1])
    target.generate([prompt], BUDGET)
    gen = target.generate([prompt], BUDGET)[0]  # after the same prompt, on both sides (module docstring)
    reference.reset()
    for _ in range(2):
        out = reference.create_chat_completion(
            prompt.messages(), max_tokens=BUDGET, temperature=0.0, logprobs=True, top_logprobs=K, **GREEDY
        )
    content = out["choices"][0]["logprobs"]["content"]
    assert gen.tokens == [c["token"] for c in content] and len(gen.tokens) > 3
    np.testing.assert_allclose(gen.logprob.numpy(), [float(c["logprob"]) for c in content], atol=EXACT)
    ent = [topk_entropy([float(t["logprob"]) for t in c["top_logprobs"]], vocab, "uniform") for c in content]
    np.testing.assert_allclose(gen.entropy.numpy(), ent, atol=EXACT)


def test_entropy_score_by_hand(server, scorer, vocab):
    """metric="entropy": minus the mean over the answer's tokens of the top-k entropy with the uniform tail,
    computed by hand from a response's top log-probabilities; ``ppl`` beside it, no other variant."""
    prompt = grounded(scorer, DOCS[2])
    chat_request(server, prompt)
    s = scorer.score(QUERY, [DOCS[2]], return_details=True)[0]
    content = chat_request(server, prompt)["choices"][0]["logprobs"]["content"]
    by_hand = [entropy_by_hand([t["logprob"] for t in c["top_logprobs"]], vocab) for c in content]
    logprobs = [c["logprob"] for c in content]
    assert s.details.tokens == [c["token"] for c in content] and s.n_tokens == len(content)
    assert s.metric == "entropy" and s.score == pytest.approx(-sum(by_hand) / len(by_hand), abs=EXACT)
    assert set(s.variants) == {"entropy", "ppl"} and s.variants["entropy"] == s.score
    assert s.variants["ppl"] == pytest.approx(-math.exp(-sum(logprobs) / len(logprobs)), rel=EXACT)
    assert s.details.ungrounded_entropy is None and s.details.key_mask is None and s.details.copied is None


def test_rerank_context_mode(server, scorer):
    """The context mode through the chat API: the chosen top-2 context's answer is the chat endpoint's
    answer to those documents."""
    kept = scorer.rerank(QUERY, DOCS, top_n=2, relevance=[0.9, 0.5, 0.1], return_details=True)
    assert [r.index for r in kept] in ([0, 1], [0, 2])
    ctx = kept[0].context
    assert ctx.metric == "entropy" and set(ctx.variants) == {"entropy", "ppl"} and math.isfinite(ctx.score)
    assert len(ctx.details.tokens) == ctx.n_tokens > 0
    again = chat_request(server, grounded(scorer, *[DOCS[r.index] for r in kept]))
    assert ctx.answer == again["choices"][0]["message"]["content"].strip()
    assert -ctx.score == pytest.approx(float(np.mean(ctx.details.grounded_entropy.numpy())), abs=EXACT)


def test_llama_index_openailike_chat_model(server):
    """LlamaIndex: an OpenAILike chat model's chat-API target scores with metric="entropy", and the
    chosen context's scored answer is the answer the pipeline's synthesizer gets from that LLM."""
    pytest.importorskip("llama_index.postprocessor.grogu")
    from llama_index.core import get_response_synthesizer
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.llms.openai_like import OpenAILike
    from llama_index.postprocessor.grogu import GroguRerank, GroguSynthesizer
    from llama_index.postprocessor.grogu.prompts import template_from_llama_index

    llm = OpenAILike(
        api_base=server.url,
        model=grogu.DEFAULT_MODEL,
        api_key="none",
        is_chat_model=True,
        temperature=0.0,
        max_tokens=BUDGET,
        additional_kwargs={"extra_body": {"repeat_penalty": 1.0}},
    )
    target = target_from_llm(llm, api="chat")
    assert target is target_from_llm(llm, api="chat") and target.api == "chat" and target.tokenizer is None
    synth = get_response_synthesizer(llm=llm, response_mode="compact")
    with pytest.raises(ValueError, match="metric='entropy' or metric='ppl'"):
        GroguRerank(top_n=2, model=target, metric="key_entropy")
    assert GroguRerank(top_n=2, model=target).metric == "ppl"  # the default of a grounded-only target
    rerank = GroguRerank(
        top_n=2, model=target, metric="entropy", template=template_from_llama_index(synth, llm), max_new_tokens=BUDGET
    )
    nodes = [NodeWithScore(node=TextNode(text=t), score=s) for t, s in zip(DOCS, (0.9, 0.5, 0.1))]
    kept = rerank.postprocess_nodes(nodes, query_str=QUERY)
    context = kept[0].node.metadata["grogu"]["context"]
    wrapped = GroguSynthesizer(synth)
    assert str(wrapped.synthesize(QUERY, kept)) == context["answer"] and wrapped.reused == 1
    assert str(synth.synthesize(QUERY, kept)).strip() == context["answer"]  # a real chat request by the LLM


def test_langchain_chat_openai(server, monkeypatch):
    """LangChain: a ChatOpenAI's chat-API target with metric="entropy" scores each document with the
    answer the ChatOpenAI itself gives; the hosted API (no base_url) is a chat target whose default
    metric is ppl (KeyEntropy is refused)."""
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_grogu import GroguCompressor
    from langchain_openai import ChatOpenAI

    # ChatOpenAI sends max_tokens as max_completion_tokens, which llama-cpp-python ignores: the budget goes
    # in the body too
    chat = ChatOpenAI(
        base_url=server.url,
        model=grogu.DEFAULT_MODEL,
        api_key="none",
        temperature=0,
        max_tokens=BUDGET,
        extra_body={"repeat_penalty": 1.0, "max_tokens": BUDGET},
    )
    prompt = ChatPromptTemplate.from_messages(
        [("human", "Answer from the context.\n\n{context}\n\nQuestion: {question}")]
    )
    compressor = GroguCompressor(
        model=target_from_llm(chat, api="chat"),
        metric="entropy",
        mode="document",
        top_n=1,
        qa_prompt=prompt,
        max_new_tokens=BUDGET,
    )
    kept = compressor.compress_documents([Document(page_content=d) for d in DOCS[:2]], QUERY)
    info = kept[0].metadata["grogu"]
    assert info["metric"] == "entropy" and set(info["variants"]) == {"entropy", "ppl"}
    asked = chat.invoke(prompt.invoke({"context": kept[0].page_content, "question": QUERY}))
    assert info["answer"] == asked.content.strip()

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    hosted = ChatOpenAI(model="gpt-4o-mini", api_key="sk-test")
    with pytest.raises(ValueError, match="metric='entropy' or metric='ppl'"):
        GroguCompressor(model=hosted, metric="key_entropy")
    assert GroguCompressor(model=hosted).metric == "ppl"  # a grounded-only target's default
    assert GroguCompressor(model=hosted, metric="ppl").scorer.target.base_url == "https://api.openai.com/v1"


def test_exact_influence_needs_generations_only(target, scorer):
    """Exact Influence runs its 2k + 1 generations through the chat API."""
    ex = InfluenceScorer(target, max_new_tokens=BUDGET).score(QUERY, DOCS[:2])
    assert len(ex.scores) == 2 and all(math.isfinite(x) for x in ex.scores)
    assert len(ex.leave_one_out_answers) == len(ex.single_answers) == 2
    assert ex.answer == target.generate([grounded(scorer, *DOCS[:2])], BUDGET)[0].text


def test_seper_samples_through_the_chat_api(target, reference):
    """ΔSePer samples through the chat API, and the sampled tokens' log-probabilities are the untempered
    model's (llama.cpp in process), as its sample weights want."""

    def same_text(premises, hypotheses):
        return [float(p.strip().lower() == h.strip().lower()) for p, h in zip(premises, hypotheses)]

    seper = SePerScorer(target, entailment=same_text, n_samples=2, temperature=1.5, max_new_tokens=4, seed=1)
    res = seper.score_context(QUERY, DOCS[:1], references=["Canberra"])
    assert -1.0 <= res.delta_soft <= 1.0 and len(res.samples_with) == len(res.samples_without) == 2
    # a sampled first token against llama.cpp's full distribution at that position, both evaluated
    # after the same prompt (module docstring)
    prompt = seper.prompts.grounded_ids(QUERY, [grogu.Document(DOCS[0])])
    target.generate([prompt], 1)
    sample = target.generate([prompt], 1, temperature=1.5, seed=1)[0]
    reference.reset()
    for _ in range(2):
        out = reference.create_chat_completion(
            prompt.messages(), max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=reference.n_vocab(), **GREEDY
        )
    full = {t["token"]: float(t["logprob"]) for t in out["choices"][0]["logprobs"]["content"][0]["top_logprobs"]}
    untempered = full[sample.tokens[0]]
    tempered = untempered / 1.5 - math.log(sum(math.exp(v / 1.5) for v in full.values()))
    got = float(sample.logprob[0])
    # the server's prefix cache rounds a token this unlikely by up to a few tenths of a nat (seen: 0.21,
    # depending on the requests before it); tempering would move it by nats
    assert abs(got - untempered) < 0.5 and abs(got - untempered) < abs(got - tempered) / 4


def test_what_needs_teacher_forcing_is_refused(target):
    with pytest.raises(ServerCapabilityError, match=r"metric='entropy' or metric='ppl'.*api='vllm'.*api='llama-cpp'"):
        grogu.UtilityScorer(target, metric="key_entropy")  # the default of a target that teacher-forces
    assert grogu.UtilityScorer(target).metric == "ppl"  # a grounded-only target's default
    with pytest.raises(ServerCapabilityError, match="metric='copy_aware_key_entropy'"):
        grogu.UtilityScorer(target, metric="copy_aware_key_entropy")
    with pytest.raises(ServerCapabilityError, match="token_stats .*no prompt log-probabilities"):
        target.token_stats([ChatPrompt("q")], [[1, 2]])
    with pytest.raises(ServerCapabilityError, match="forward-only attribution .*method='exact'"):
        InfluenceScorer(target, method="leave_one_out_logprob")
    with pytest.raises(ServerCapabilityError, match="ACU"):
        ACUScorer(target)
    with pytest.raises(TypeError, match="ChatPrompt"):
        target.generate([[1, 2, 3]], 2)


def test_prompt_over_the_context_window_is_the_servers_error(target, scorer):
    """Without a tokenizer nothing is cut: the server's own refusal reaches the user, with what to do."""
    with pytest.raises(ServerError, match=r"does not fit the model's context window .*2048 tokens.*pass tokenizer="):
        scorer.score(QUERY, ["word " * 3000])


def test_a_chat_endpoint_without_log_probabilities_is_a_clear_error():
    """A real server whose chat handler ignores logprobs (llama-cpp-python's "functionary" format), and one
    started with logits_all off, which refuses them."""
    testing.require_llama_cpp()
    prompt = ChatPrompt("What is the capital of France?")
    with testing.LlamaCppServer(chat_format="functionary") as srv:
        target = ServerTarget(srv.url, api="chat", retries=0)
        with pytest.raises(ServerCapabilityError, match="without log-probabilities .*Ollama from version 0.12.11"):
            target.generate([prompt], 4)
    with testing.LlamaCppServer(logits_all=False) as srv:
        target = ServerTarget(srv.url, api="chat", retries=0)
        with pytest.raises(ServerCapabilityError, match="refused the log-probabilities"):
            target.generate([prompt], 4)


HOSTED = "https://api.openai.com/v1"


def test_the_hosted_openai_api_is_a_chat_target_without_a_request():
    """The hosted API: api="auto" is the chat flavour, no listing request at construction, the answer
    budget sent as max_completion_tokens (OpenAI-compatible servers get max_tokens), and without a
    tokenizer or vocabulary size the tail correction is "min"."""
    target = ServerTarget(HOSTED, "gpt-4o-mini", api_key="sk-test")
    assert target.api == "chat" and target.grounded_only and target.takes_messages and target.requests_sent == 0
    assert target.capabilities == {"generate"}  # no teacher forcing: grounded-only
    assert isinstance(target, Target) and target.stop_token_ids == [] and target.max_context_tokens is None
    assert target.tokenizer is None and target.vocab_size is None and target.tail == "min"
    body = target.server_api.body(ChatPrompt("Who wrote Hamlet?", "Be brief."), 7, None, 3)
    assert body["max_completion_tokens"] == 7 and "max_tokens" not in body and "repeat_penalty" not in body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who wrote Hamlet?"},
    ]
    assert (body["logprobs"], body["top_logprobs"], body["temperature"], body["seed"]) == (True, 20, 0.0, 3)

    class OpenAI:  # the fields LlamaIndex's OpenAI LLM has, at their defaults
        api_base = HOSTED
        api_key = "sk-test"
        model = "gpt-4o-mini"
        max_tokens = None

    assert target_from_llm(OpenAI()).api == "chat" and target_from_llm(object()) is None


def test_choose_api():
    assert choose_api(HOSTED, ["system"]) == "chat"
    assert choose_api("http://localhost:11434/v1", ["library"]) == "chat"  # Ollama
    assert choose_api("http://localhost:8000/v1", ["vllm"]) == "vllm"
    assert choose_api("http://h/v1", ["sglang"]) == "sglang"  # its native /generate
    assert choose_api("http://localhost:8000/v1", ["me"]) == "llama-cpp"  # llama-cpp-python
    assert choose_api("http://localhost:8080/v1", ["llamacpp"]) == "llama-server"  # llama.cpp's llama-server


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(top_logprobs=21), "at most 20 with api='chat'"),
        (dict(tail="uniform"), "pass vocab_size="),
        (dict(context_window=4096), "needs the model's tokenizer"),
        (dict(stop_token_ids=[2]), "do not apply to api='chat'"),
        (dict(vocab_size=0), "vocab_size"),
    ],
)
def test_bad_chat_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ServerTarget(HOSTED, "gpt-4o-mini", api="chat", api_key="sk-test", **kwargs)


def test_a_completion_template_cannot_be_sent_as_messages():
    target = ServerTarget(HOSTED, "gpt-4o-mini", api_key="sk-test")
    with pytest.raises(ValueError, match="cannot be sent as messages"):
        grogu.UtilityScorer(target, metric="entropy", template=grogu.PromptTemplate(chat=False))


def test_sampling_differences_read_from_real_framework_llms():
    """The framework LLM's own sampling settings, as its requests send them: LlamaIndex's OpenAILike
    defaults to temperature 0.1, LangChain's ChatOpenAI leaves it unset (the server's default)."""
    from langchain_openai import ChatOpenAI
    from llama_index.llms.openai_like import OpenAILike

    url = "http://127.0.0.1:9/v1"
    assert sampling_differences(OpenAILike(api_base=url, model="m", api_key="x")) == {"temperature": 0.1}
    greedy = OpenAILike(
        api_base=url, model="m", api_key="x", temperature=0.0, additional_kwargs={"extra_body": {"repeat_penalty": 1.0}}
    )
    assert sampling_differences(greedy) == {}
    assert sampling_differences(ChatOpenAI(base_url=url, model="m", api_key="x")) == {"temperature": None}
    skewed = ChatOpenAI(
        base_url=url,
        model="m",
        api_key="x",
        temperature=0,
        frequency_penalty=0.5,
        model_kwargs={"top_p": 0.9},
        extra_body={"repetition_penalty": 1.05, "max_tokens": 8},
    )
    assert sampling_differences(skewed) == {"frequency_penalty": 0.5, "top_p": 0.9, "repetition_penalty": 1.05}


def test_target_from_llm_warns_once_when_the_llm_does_not_decode_greedily(monkeypatch):
    from langchain_openai import ChatOpenAI

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    hot = ChatOpenAI(model="gpt-4o-mini", api_key="sk-warn-test", temperature=0.7)  # the hosted API: no request
    with pytest.warns(UserWarning, match=r"does not decode greedily \(temperature=0.7\)"):
        target = target_from_llm(hot)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same target again: no second warning
        assert target_from_llm(hot) is target
        target_from_llm(ChatOpenAI(model="gpt-4o-mini", api_key="sk-warn-test-2", temperature=0))
