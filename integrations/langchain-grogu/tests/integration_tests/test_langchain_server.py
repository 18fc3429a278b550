"""A real LCEL chain whose LLM is a ``ChatOpenAI(base_url=...)`` on a real OpenAI-compatible server
(llama-cpp-python's, serving the embedded SmolLM2 GGUF on this machine): GroguRetriever takes that chat
model as its target, scores through the server, and its QA chain answers with the answer the server gave
the chosen documents, which is the answer the chat model itself gives for them."""

from __future__ import annotations

import pytest
from grogu_research import testing
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_grogu import GroguRetriever

import grogu

pytestmark = pytest.mark.slow  # a real llama-cpp-python server: not in the fast subset (-m 'not slow')

QUERY = "What is the capital city of Australia?"
TEXTS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Paris is the capital of France.",
]
BUDGET = 12
PROMPT = ChatPromptTemplate.from_messages([("user", "Answer from the context.\n\n{context}\n\nQuestion: {question}")])


@pytest.fixture(scope="module")
def server():
    testing.require_llama_cpp()
    with testing.LlamaCppServer() as srv:
        yield srv


def test_chatopenai_chain_answers_with_the_servers_scored_answer(server):
    from langchain_huggingface import HuggingFaceEmbeddings
    from langchain_openai import ChatOpenAI

    from grogu.runtime.models import embedded_embedder_path

    # ChatOpenAI sends max_tokens as max_completion_tokens, which llama-cpp-python ignores: the budget goes
    # in the body too, so that the direct call below answers within it as the scored answer does
    chat = ChatOpenAI(
        base_url=server.url,
        model=grogu.DEFAULT_MODEL,
        api_key="none",
        temperature=0.0,
        max_tokens=BUDGET,
        extra_body={"repeat_penalty": 1.0, "max_tokens": BUDGET},
    )
    store = InMemoryVectorStore.from_documents(
        [Document(page_content=t) for t in TEXTS], HuggingFaceEmbeddings(model_name=embedded_embedder_path())
    )
    retriever = GroguRetriever(
        base_retriever=store.as_retriever(search_kwargs={"k": 3}),
        model=chat,
        top_n=2,
        qa_prompt=PROMPT,
        max_new_tokens=BUDGET,
    )
    out = retriever.as_qa_chain().invoke(QUERY)
    assert len(out["documents"]) == 2
    assert all("relevance_score" in d.metadata for d in out["documents"])
    direct = (PROMPT | chat | StrOutputParser()).invoke(
        {"context": "\n\n".join(d.page_content for d in out["documents"]), "question": QUERY}
    )
    assert direct.strip() == out["answer"]
