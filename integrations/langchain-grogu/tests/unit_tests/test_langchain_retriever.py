"""GroguRetriever and ContextualCompressionRetriever + GroguCompressor in real LCEL chains: a real
vector store (packaged all-MiniLM-L6-v2) over SQuAD paragraphs and a tiny real LLM."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough
from langchain_grogu import METADATA_KEY, GroguCompressor, GroguRetriever

N = 8
K = 5


def format_docs(docs) -> str:
    return "\n\n".join(d.page_content for d in docs)


PROMPT = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")


@pytest.fixture(scope="module")
def base(vectorstore):
    return vectorstore.as_retriever(search_kwargs={"k": K})


@pytest.fixture(scope="module")
def retriever(base, llm):
    return GroguRetriever(base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document")


def test_equals_compressor_on_base_results(base, retriever, llm, paragraphs):
    query = paragraphs[1]["question"]
    base_docs = base.invoke(query)
    expected = GroguCompressor(model=llm, top_n=3, max_new_tokens=N, mode="document").compress_documents(
        base_docs, query
    )
    got = retriever.invoke(query)
    assert isinstance(retriever, BaseRetriever)
    assert [d.id for d in got] == [d.id for d in expected] and len(got) == 3
    assert [d.metadata for d in got] == [d.metadata for d in expected]
    assert {d.id for d in got} <= {d.id for d in base_docs}


def test_lcel_rag_chain(retriever, llm, paragraphs):
    seen: list[str] = []

    def capture(prompt_value):
        seen.append(prompt_value.to_string())
        return prompt_value

    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | RunnableLambda(capture)
        | llm
        | StrOutputParser()
    )
    query = paragraphs[2]["question"]
    answer = chain.invoke(query)
    expected_docs = retriever.invoke(query)
    assert isinstance(answer, str) and answer.strip()
    assert answer == llm.invoke(seen[0])  # the LLM read exactly the reranked context
    assert seen[0] == PROMPT.format(context=format_docs(expected_docs), question=query)


def test_async_and_batch_equal_sync(retriever, paragraphs):
    queries = [p["question"] for p in paragraphs[:3]]
    sync = [retriever.invoke(q) for q in queries]

    async def run():
        return await asyncio.gather(*(retriever.ainvoke(q) for q in queries)), await retriever.abatch(queries)

    gathered, abatched = asyncio.run(run())
    for results in (gathered, abatched, retriever.batch(queries)):
        for got, exp in zip(results, sync):
            assert [d.id for d in got] == [d.id for d in exp]
            assert [d.metadata[METADATA_KEY]["answer"] for d in got] == [
                d.metadata[METADATA_KEY]["answer"] for d in exp
            ]
            for a, b in zip(got, exp):
                assert a.metadata[METADATA_KEY]["score"] == pytest.approx(b.metadata[METADATA_KEY]["score"], abs=1e-5)


class RunTreeRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.retrievers: dict[UUID, tuple[UUID | None, int]] = {}
        self.parents: dict[UUID, UUID | None] = {}

    def on_retriever_start(self, serialized, query, *, run_id, parent_run_id=None, **kwargs: Any) -> None:
        self.parents[run_id] = parent_run_id

    def on_retriever_end(self, documents, *, run_id, parent_run_id=None, **kwargs: Any) -> None:
        self.retrievers[run_id] = (parent_run_id, len(documents))


def test_base_retriever_run_is_a_child_run(retriever, paragraphs):
    recorder = RunTreeRecorder()
    retriever.invoke(paragraphs[0]["question"], config={"callbacks": [recorder]})
    ((outer, (outer_parent, n_outer)),) = [(r, v) for r, v in recorder.retrievers.items() if v[0] is None]
    inner = [v for r, v in recorder.retrievers.items() if v[0] == outer]
    assert n_outer == 3 and inner == [(outer, K)]


def test_contextual_compression_retriever(base, llm, paragraphs):
    from langchain_classic.retrievers import ContextualCompressionRetriever

    compressor = GroguCompressor(model=llm, top_n=2, max_new_tokens=N, mode="document")
    ccr = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    query = paragraphs[3]["question"]
    expected = compressor.compress_documents(base.invoke(query), query)
    got = ccr.invoke(query)
    assert [d.id for d in got] == [d.id for d in expected] and len(got) == 2
    assert all(METADATA_KEY in d.metadata for d in got)
    assert [d.id for d in asyncio.run(ccr.ainvoke(query))] == [d.id for d in got]

    chain = RunnableParallel(docs=ccr, question=RunnablePassthrough()).assign(
        answer=(lambda x: {"context": format_docs(x["docs"]), "question": x["question"]}) | PROMPT | llm
    )
    out = chain.invoke(query)
    assert [d.id for d in out["docs"]] == [d.id for d in got] and isinstance(out["answer"], str)


def test_passthrough_in_a_chain_keeps_every_document(base, llm):
    lenient = GroguRetriever(
        base_retriever=base, model=llm, top_n=1, on_error="passthrough", max_new_tokens=N, mode="document"
    )
    docs = lenient.invoke(" ")  # an empty query cannot be scored
    assert len(docs) == K and all(d.metadata[METADATA_KEY]["score"] is None for d in docs)
    assert [d.id for d in docs] == [d.id for d in base.invoke(" ")]
    strict = GroguRetriever(base_retriever=base, model=llm, top_n=1, max_new_tokens=N, mode="document")
    with pytest.raises(ValueError, match="query is empty"):
        strict.invoke(" ")


def test_per_call_top_n(retriever, base, paragraphs):
    """``invoke(query, top_n=...)`` overrides the constructor's top_n for that call only: the same
    ranking, cut at the call's count (None keeps every base document, best first); bad counts raise."""
    query = paragraphs[2]["question"]
    three = retriever.invoke(query)
    one = retriever.invoke(query, top_n=1)
    every = retriever.invoke(query, top_n=None)
    assert len(three) == 3 and len(every) == K
    assert [d.id for d in one] == [three[0].id]
    assert [d.id for d in every][:3] == [d.id for d in three]
    assert {d.id for d in every} == {d.id for d in base.invoke(query)}
    assert len(retriever.invoke(query)) == 3  # the constructor's top_n again
    assert [d.id for d in asyncio.run(retriever.ainvoke(query, top_n=2))] == [d.id for d in three[:2]]
    for bad in (0, -1, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="top_n"):
            retriever.invoke(query, top_n=bad)
