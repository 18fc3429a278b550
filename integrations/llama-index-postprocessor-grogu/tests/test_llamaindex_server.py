"""A real LlamaIndex pipeline whose LLM is an ``OpenAILike`` on a real OpenAI-compatible server
(llama-cpp-python's, serving the embedded SmolLM2 GGUF on this machine): GroguRerank takes that LLM as its
target (scored through the server, no model loaded here) and GroguSynthesizer returns the answer the
server gave the chosen context, which is the answer the LLM itself gives for it."""

from __future__ import annotations

import pytest
from grogu_research import testing
from llama_index.core import Document, VectorStoreIndex, get_response_synthesizer
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.postprocessor.grogu import GroguInfluenceHandler, GroguRerank, GroguSynthesizer

import grogu

pytestmark = pytest.mark.slow  # a real llama-cpp-python server: not in the fast subset (-m 'not slow')

QUERY = "What is the capital city of Australia?"
TEXTS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
BUDGET = 12


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    with testing.LlamaCppServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def served_llm(server):
    from llama_index.llms.openai_like import OpenAILike

    # greedy and plain: llama-cpp-python's server applies a repeat penalty of 1.1 unless told otherwise
    return OpenAILike(
        api_base=server.url,
        model=grogu.DEFAULT_MODEL,
        api_key="none",
        is_chat_model=True,
        temperature=0.0,
        max_tokens=BUDGET,
        additional_kwargs={"extra_body": {"repeat_penalty": 1.0}},
    )


# heavy: LangChain's ChatOpenAI chain on the same server runs on every CI run (test_langchain_server.py)
@pytest.mark.heavy
def test_openailike_pipeline_answers_with_the_servers_scored_answer(served_llm, embed_model, attach):
    index = VectorStoreIndex.from_documents([Document(text=t) for t in TEXTS], embed_model=embed_model)
    synth = get_response_synthesizer(llm=served_llm, response_mode="compact")
    rerank = GroguRerank(top_n=2, model=served_llm, qa_template=synth)
    assert isinstance(rerank.scorer.target, grogu.ServerTarget)
    assert rerank.scorer.target.model_name == grogu.DEFAULT_MODEL and rerank.max_new_tokens == BUDGET
    wrapped = GroguSynthesizer(synth)
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=3),
        llm=served_llm,
        node_postprocessors=[rerank],
        response_synthesizer=wrapped,
    )
    records = []  # the influence handler scores through the same server (forward-only: prompt log-probabilities)
    handler = attach(
        GroguInfluenceHandler(model=served_llm, method="leave_one_out_logprob", sinks=[records], max_new_tokens=BUDGET)
    )
    assert handler.recorder.scorer.target is rerank.scorer.target  # one ServerTarget per server and model
    response = engine.query(QUERY)
    assert wrapped.reused == 1  # no second request for the answer
    assert len(response.source_nodes) == 2
    context = response.source_nodes[0].node.metadata["grogu"]["context"]
    assert str(response) == context["answer"]
    # the same nodes through the plain synthesizer: a real chat request to the server gives that answer
    plain = synth.synthesize(QUERY, response.source_nodes)
    assert str(plain).strip() == str(response).strip()
    assert len(records) == 1 and records[0]["error"] is None and records[0]["method"] == "leave_one_out_logprob"
    assert records[0]["model"] == grogu.DEFAULT_MODEL and len(records[0]["documents"]) == 2
    assert all(isinstance(d["influence"], float) for d in records[0]["documents"])


def test_the_hosted_openai_api_is_a_grounded_only_target():
    """An LLM on the hosted OpenAI API becomes a chat-API target (no request is made until scoring): its
    default metric is ppl; KeyEntropy needs prompt log-probabilities and is refused with the metrics
    that work."""
    from llama_index.llms.openai_like import OpenAILike

    hosted = OpenAILike(
        api_base="https://api.openai.com/v1", model="gpt-4o-mini", api_key="sk-test", is_chat_model=True
    )
    with pytest.raises(ValueError, match="metric='entropy' or metric='ppl'"):
        GroguRerank(top_n=2, model=hosted, metric="key_entropy")
    assert GroguRerank(top_n=2, model=hosted).metric == "ppl"
    rerank = GroguRerank(top_n=2, model=hosted, metric="entropy")
    assert rerank.scorer.target.api == "chat" and rerank.scorer.target.grounded_only
