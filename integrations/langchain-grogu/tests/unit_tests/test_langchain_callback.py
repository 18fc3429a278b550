"""InfluenceCallbackHandler on real LCEL RAG chains (tiny real LLM, real vector store, real SQuAD):
records equal grogu's InfluenceScorer computed directly, concurrent runs are kept apart, every sink and
the custom event receive the record."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import langchain_grogu
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_grogu import (
    EVENT_NAME,
    METADATA_KEY,
    RELEVANCE_KEY,
    CallableSink,
    GroguRetriever,
    InfluenceCallbackHandler,
    JSONLSink,
    ListSink,
    LoggerSink,
)

import grogu.observe.sinks
from grogu.metrics.influence import InfluenceScorer
from grogu.observe.influence_record import DOCUMENT_FIELDS, RECORD_FIELDS

N = 8
PROMPT = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")


def format_docs(docs) -> str:
    return "\n\n".join(d.page_content for d in docs)


@pytest.fixture(scope="module")
def retriever(vectorstore, llm):
    return GroguRetriever(
        base_retriever=vectorstore.as_retriever(search_kwargs={"k": 4}),
        model=llm,
        top_n=3,
        max_new_tokens=N,
        mode="document",
    )


@pytest.fixture(scope="module")
def chain(retriever, llm):
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()


@pytest.fixture(scope="module")
def influence(engine):
    return InfluenceScorer(engine, max_new_tokens=N)


@pytest.fixture(scope="module")
def questions(paragraphs):
    return [p["question"] for p in paragraphs[:4]]


def check_record(record, query, answer, docs, influence):
    """The record of one run: its query, its answer, the documents the LLM read, and Influence Scores
    equal to InfluenceScorer's on exactly those."""
    assert record["query"] == query and record["answer"] == answer and record["answer_source"] == "output"
    assert set(record) == set(RECORD_FIELDS) and record["framework"] == "langchain"
    assert record["event"] == EVENT_NAME and record["elapsed_s"] >= 0
    assert all(set(d) == set(DOCUMENT_FIELDS) for d in record["documents"])
    assert [d["id"] for d in record["documents"]] == [d.id for d in docs]
    assert [d["page_content"] for d in record["documents"]] == [d.page_content for d in docs]
    assert [d["utility"] for d in record["documents"]] == pytest.approx(
        [d.metadata[METADATA_KEY]["score"] for d in docs], abs=1e-5
    )
    for got, doc in zip(record["documents"], docs):  # async scoring agrees with sync to float32 rounding
        scores = (METADATA_KEY, RELEVANCE_KEY)
        assert {k: v for k, v in got["metadata"].items() if k not in scores} == {
            k: v for k, v in doc.metadata.items() if k not in scores
        }
        assert got["metadata"][RELEVANCE_KEY] == pytest.approx(doc.metadata[RELEVANCE_KEY], abs=1e-5)
        assert got["metadata"][METADATA_KEY]["score"] == pytest.approx(doc.metadata[METADATA_KEY]["score"], abs=1e-5)
    expected = influence.score(query, [d.page_content for d in docs], answer=answer)
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-5)
    assert [d["influence"] for d in record["documents"]] == record["influence"]
    assert record["method"] == expected.method
    if expected.method == "exact":
        assert [d["single_answer"] for d in record["documents"]] == expected.single_answers
        assert [d["leave_one_out_answer"] for d in record["documents"]] == expected.leave_one_out_answers
    else:  # the ablation estimate generates no per-document answers
        assert all(d["single_answer"] is None and d["leave_one_out_answer"] is None for d in record["documents"])
    assert record["error"] is None and all(-2 <= s <= 2 for s in record["influence"])


class EventCollector(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any, Any]] = []

    def on_custom_event(self, name, data, *, run_id, **kwargs: Any) -> None:
        self.events.append((name, run_id, data))


@pytest.mark.slow
def test_one_record_per_run_to_every_sink(chain, retriever, llm, influence, questions, tmp_path, caplog):
    records: list[dict] = []
    path = tmp_path / "logs" / "influence.jsonl"
    log = logging.getLogger("test.grogu.influence")
    handler = InfluenceCallbackHandler(
        model=llm, sinks=[records, path, log], max_new_tokens=N, relevance_key="retriever_rank"
    )
    events = EventCollector()
    query = questions[0]
    with caplog.at_level(logging.INFO, logger="test.grogu.influence"):
        answer = chain.invoke(query, config={"callbacks": [handler, events]})

    assert len(records) == 1
    record = records[0]
    # the documents the LLM read: GroguRetriever's top 3 (its base retriever's 4 are not counted)
    docs = retriever.invoke(query)
    check_record(record, query, answer, docs, influence)
    assert all(d["metadata"][METADATA_KEY]["rank"] == i + 1 for i, d in enumerate(record["documents"]))
    assert record["model"] and record["embedder"] == "all-minilm-l6-v2"
    assert [d["retrieval_score"] for d in record["documents"]] == [d.metadata["retriever_rank"] for d in docs]

    lines = path.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == json.loads(json.dumps(record, default=str))
    assert len([r for r in caplog.records if r.name == "test.grogu.influence"]) == 1
    assert events.events == [(EVENT_NAME, events.events[0][1], record)]
    assert str(events.events[0][1]) == record["run_id"]


def test_the_sink_classes_each_get_the_record(chain, llm, questions, tmp_path, caplog):
    """The package's sinks are grogu's four, named as grogu names them, and each receives the run's record."""
    names = ["CallableSink", "JSONLSink", "ListSink", "LoggerSink"]
    assert sorted(n for n in langchain_grogu.__all__ if n.endswith("Sink")) == names
    assert all(getattr(langchain_grogu, n) is getattr(grogu.observe.sinks, n) for n in names)

    records: list[dict] = []
    called: list[dict] = []
    path = tmp_path / "influence.jsonl"
    sinks = [ListSink(records), JSONLSink(path), CallableSink(called.append), LoggerSink("test.grogu.sinks")]
    handler = InfluenceCallbackHandler(model=llm, sinks=sinks, max_new_tokens=N)
    with caplog.at_level(logging.INFO, logger="test.grogu.sinks"):
        answer = chain.invoke(questions[2], config={"callbacks": [handler]})
    (record,) = records
    assert record["answer"] == answer and record["error"] is None and len(record["influence"]) == 3
    assert called == [record]
    assert [json.loads(line) for line in path.read_text().splitlines()] == [json.loads(json.dumps(record, default=str))]
    (logged,) = [r for r in caplog.records if r.name == "test.grogu.sinks"]
    assert json.loads(logged.getMessage().removeprefix("grogu influence ")) == json.loads(
        json.dumps(record, default=str)
    )


def test_ablation_method(chain, retriever, llm, engine, questions):
    """method="ablation" records the ContextCite-style estimate, equal to InfluenceScorer's."""
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N, method="ablation", n_ablations=6)
    query = questions[1]
    answer = chain.invoke(query, config={"callbacks": [handler]})
    assert len(records) == 1 and records[0]["method"] == "ablation"
    check_record(
        records[0],
        query,
        answer,
        retriever.invoke(query),
        InfluenceScorer(engine, max_new_tokens=N, method="ablation", n_ablations=6),
    )


@pytest.mark.parametrize("method", ["leave_one_out_logprob", "contextcite"])
def test_forward_only_methods(chain, retriever, llm, engine, questions, method):
    """Forward-only attribution of the chain's answer: the record says which method made it and holds
    InfluenceScorer's scores and log-probabilities, computed directly on the documents the LLM read."""
    records: list[dict] = []
    handler = InfluenceCallbackHandler(
        model=llm,
        sinks=[records],
        max_new_tokens=N,
        method=method,
        n_ablations=12 if method == "contextcite" else None,
        seed=4,
    )
    query = questions[2]
    answer = chain.invoke(query, config={"callbacks": [handler]})
    docs = retriever.invoke(query)
    assert len(records) == 1
    record = records[0]
    expected = InfluenceScorer(
        engine, max_new_tokens=N, method=method, n_ablations=12 if method == "contextcite" else None, seed=4
    ).score(query, [d.page_content for d in docs], answer=answer)
    assert record["method"] == expected.method == method and record["embedder"] is None
    assert record["answer"] == answer and record["answer_source"] == "output" and record["error"] is None
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-4)
    assert record["logprobs"] == pytest.approx(expected.forward.logprobs, abs=1e-4)
    assert len(record["logprobs"]) == (len(docs) + 1 if method == "leave_one_out_logprob" else 12)
    assert max(abs(s) for s in record["influence"]) > 0  # real values, not a placeholder
    assert [d["influence"] for d in record["documents"]] == record["influence"]
    assert all(d["single_answer"] is None and d["leave_one_out_answer"] is None for d in record["documents"])


def test_batch_runs_are_kept_apart(chain, retriever, llm, influence, questions):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)
    answers = chain.batch(questions[:3], config={"callbacks": [handler]})
    assert len(records) == 3 and len({r["run_id"] for r in records}) == 3
    by_query = {r["query"]: r for r in records}
    for q, a in zip(questions, answers):
        check_record(by_query[q], q, a, retriever.invoke(q), influence)


def test_concurrent_async_runs_are_kept_apart(chain, retriever, llm, influence, questions):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)

    async def run():
        return await asyncio.gather(*(chain.ainvoke(q, config={"callbacks": [handler]}) for q in questions[:3]))

    answers = asyncio.run(run())
    assert len(records) == 3  # delivered before ainvoke returned
    by_query = {r["query"]: r for r in records}
    for q, a in zip(questions, answers):
        check_record(by_query[q], q, a, retriever.invoke(q), influence)


def test_custom_event_in_astream_events(chain, llm, questions):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)

    async def run():
        custom, roots = [], []
        async for event in chain.astream_events(questions[1], config={"callbacks": [handler]}, version="v2"):
            if event["event"] == "on_custom_event":
                custom.append(event)
            if event["event"] == "on_chain_end" and not event["parent_ids"]:
                roots.append(event)
        return custom, roots

    custom, roots = asyncio.run(run())
    assert len(custom) == 1 and custom[0]["name"] == EVENT_NAME and custom[0]["data"] == records[0]
    assert custom[0]["run_id"] == roots[0]["run_id"] == records[0]["run_id"]
    assert records[0]["answer"] == roots[0]["data"]["output"]


def test_retriever_only_run_uses_the_llms_own_answer(retriever, llm, influence, questions):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)
    docs = retriever.invoke(questions[2], config={"callbacks": [handler]})
    (record,) = records
    expected = influence.score(questions[2], [d.page_content for d in docs])
    assert record["answer_source"] == "grogu" and record["answer"] == expected.answer
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-5)


def test_runs_without_retriever_are_not_recorded(llm):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)
    (PROMPT | llm).invoke({"context": "none", "question": "Why?"}, config={"callbacks": [handler]})
    assert records == [] and len(handler.runs) == 0


def test_background_mode_delivers_after_flush(chain, llm, questions):
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], background=True, max_new_tokens=N)
    answers = chain.batch(questions[:2], config={"callbacks": [handler]})
    handler.flush(timeout=120)
    assert sorted(r["answer"] for r in records) == sorted(answers)


@pytest.mark.parametrize("lenient_choice", ["record", "passthrough"])
def test_on_error_raise_and_record(vectorstore, llm, lenient_choice):
    # an empty question retrieves documents but cannot be scored
    plain = vectorstore.as_retriever(search_kwargs={"k": 2})
    chain = {"context": plain | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()

    failed: list[dict] = []
    strict = InfluenceCallbackHandler(model=llm, sinks=[failed], max_new_tokens=N, on_error="raise")
    assert strict.on_error == "raise" and strict.raise_error
    with pytest.raises(ValueError, match="query is empty"):
        chain.invoke("  ", config={"callbacks": [strict]})
    (record,) = failed  # the failure's record went to the sinks before it was raised
    assert "query is empty" in record["error"] and record["influence"] is None

    # the default, as in LlamaIndex's handlers: logging records a failure and never fails the query
    assert InfluenceCallbackHandler(model=llm, max_new_tokens=N).on_error == "record"
    records: list[dict] = []
    lenient = InfluenceCallbackHandler(model=llm, sinks=[records], on_error=lenient_choice, max_new_tokens=N)
    assert lenient.on_error == "record" and not lenient.raise_error
    answer = chain.invoke("  ", config={"callbacks": [lenient]})
    (record,) = records
    assert record["answer"] == answer and "query is empty" in record["error"]
    assert record["influence"] is None and len(record["documents"]) == 2  # no document dropped
    assert all(d["influence"] is None for d in record["documents"])
    assert set(record) == set(RECORD_FIELDS) and all(set(d) == set(DOCUMENT_FIELDS) for d in record["documents"])


def test_a_failing_sink_is_raised_or_logged(chain, llm, questions, caplog):
    def broken(record):
        raise OSError("disk full")

    records: list[dict] = []
    strict = InfluenceCallbackHandler(model=llm, sinks=[broken, records], max_new_tokens=N, on_error="raise")
    with pytest.raises(OSError, match="disk full"):
        chain.invoke(questions[0], config={"callbacks": [strict]})
    lenient = InfluenceCallbackHandler(model=llm, sinks=[broken, records], on_error="record", max_new_tokens=N)
    with caplog.at_level(logging.ERROR, logger="langchain_grogu.influence"):
        chain.invoke(questions[0], config={"callbacks": [lenient]})
    (record,) = records  # the next sink still got it
    assert record["error"] is None and any("disk full" in r.getMessage() for r in caplog.records)


def test_bad_arguments(llm):
    with pytest.raises(ValueError, match="on_error"):
        InfluenceCallbackHandler(model=llm, on_error="ignore")
    with pytest.raises(TypeError, match="influence sink"):
        InfluenceCallbackHandler(model=llm, sinks=[42])
    with pytest.raises(TypeError, match="cannot use a float as the target LLM"):
        InfluenceCallbackHandler(model=3.14)


def test_chat_model_answer_from_the_llm_when_the_output_is_not_text(retriever, llm, tokenizer, influence, questions):
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableParallel
    from langchain_huggingface import ChatHuggingFace

    chat = ChatHuggingFace(llm=llm, tokenizer=tokenizer, model_id="tiny-llama")
    prompt = ChatPromptTemplate.from_messages([("human", "{context}\n\nQuestion: {question}")])
    # the run's output is a dict without an answer-like key: the answer is the chat model's reply
    chain = RunnableParallel(docs=retriever, question=RunnablePassthrough()).assign(
        reply=(lambda x: {"context": format_docs(x["docs"]), "question": x["question"]}) | prompt | chat
    )
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=chat, sinks=[records], max_new_tokens=N)
    out = chain.invoke(questions[0], config={"callbacks": [handler]})
    (record,) = records
    assert record["answer_source"] == "llm" and record["answer"] == out["reply"].content
    assert [d["id"] for d in record["documents"]] == [d.id for d in out["docs"]]
    expected = influence.score(questions[0], [d.page_content for d in out["docs"]], answer=out["reply"].content)
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-5)
