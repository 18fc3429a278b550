"""grogu.observe.influence_log: the one influence record schema and recorder of both integrations, and
grogu.rerank.factory: the influence scorer from what a user passes as ``model``.

Real tiny model (2-layer Llama, random weights, real SmolLM2 vocabulary) and the packaged embedder;
the cross-framework test runs a real LlamaIndex query engine and a real LCEL chain on the same
documents and checks that their records have the same keys and InfluenceScorer's scores."""

from __future__ import annotations

import asyncio
import logging
import warnings

import pytest
from grogu_research import testing

from grogu import get_engine
from grogu.metrics.influence import InfluenceScorer
from grogu.observe.influence_log import InfluenceRecorder
from grogu.observe.influence_record import (
    CONTEXT_FIELDS,
    DOCUMENT_FIELDS,
    RECORD_FIELDS,
    AnsweredQuery,
    check_on_error,
    grogu_utility,
)
from grogu.rerank.factory import build_influence_scorer, engine_label, remote_target

N = 8
QUERY = "Where do the Broncos play their home games?"
TEXTS = [
    "The Denver Broncos play their home games at Empower Field at Mile High in Denver, Colorado.",
    "The Carolina Panthers are based in Charlotte, North Carolina, and play at Bank of America Stadium.",
    "Super Bowl 50 was held at Levi's Stadium in Santa Clara, California.",
]


@pytest.fixture(scope="module")
def tiny(tokenizer):
    """The tiny model, run on one torch thread in this module (more only spin on a shared CPU)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield testing.tiny_model("llama", seed=0)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def scorer(tiny, tokenizer):
    return InfluenceScorer(get_engine((tiny, tokenizer)), max_new_tokens=N)


def job(query=QUERY, answer="At Mile High.", texts=TEXTS, **kwargs):
    fields = [
        {"id": f"d{i}", "page_content": t, "metadata": {"grogu": {"score": -0.5 * i}}} for i, t in enumerate(texts)
    ]
    return AnsweredQuery(query=query, answer=answer, documents=list(texts), fields=fields, **kwargs)


def test_record_of_a_job(scorer):
    records: list = []
    recorder = InfluenceRecorder(scorer, "tiny", [records], framework="test")
    got = recorder.run(job(context={"run_id": "r1", "tags": ["a"]}))
    assert records == [got] and set(got) == set(RECORD_FIELDS)
    expected = scorer.score(QUERY, TEXTS, answer="At Mile High.")
    assert got["influence"] == pytest.approx(expected.scores, abs=1e-6)
    assert got["event"] == "grogu_influence" and got["framework"] == "test" and got["model"] == "tiny"
    assert got["run_id"] == "r1" and got["tags"] == ["a"] and got["run_name"] is None and got["metadata"] is None
    assert got["answer"] == "At Mile High." and got["answer_source"] == "output" and got["error"] is None
    assert got["method"] == "exact" and got["embedder"] == "all-minilm-l6-v2" and got["logprobs"] is None
    assert got["created_at"].endswith("+00:00") and got["elapsed_s"] >= 0
    for i, doc in enumerate(got["documents"]):
        assert set(doc) == set(DOCUMENT_FIELDS) and doc["index"] == i and doc["id"] == f"d{i}"
        assert doc["influence"] == pytest.approx(expected.scores[i], abs=1e-6)
        assert doc["single_answer"] == expected.single_answers[i]
        assert doc["leave_one_out_answer"] == expected.leave_one_out_answers[i]
        assert doc["retrieval_score"] is None and doc["utility"] is None  # only what the framework gives
    # no documents and an answer: nothing to score, still one record
    empty = recorder.run(job(texts=[]))
    assert empty["influence"] == [] and empty["documents"] == [] and set(empty) == set(RECORD_FIELDS)


def test_failures_are_recorded_and_raised_under_raise(scorer, caplog):
    records: list = []
    lenient = InfluenceRecorder(scorer, "tiny", [records], framework="test", on_error="passthrough")
    assert lenient.on_error == "record"
    with caplog.at_level(logging.WARNING, logger="grogu.observe.influence_log"):
        failed = lenient.run(job(query="  "))
    assert "query is empty" in failed["error"] and failed["influence"] is None and set(failed) == set(RECORD_FIELDS)
    assert [d["id"] for d in failed["documents"]] == ["d0", "d1", "d2"]
    assert all(d["influence"] is None for d in failed["documents"])
    assert any("influence failed" in r.getMessage() for r in caplog.records)

    strict = InfluenceRecorder(scorer, "tiny", [records], framework="test", on_error="raise")
    with pytest.raises(ValueError, match="query is empty"):
        strict.run(job(query="  "))
    assert len(records) == 2 and "query is empty" in records[1]["error"]  # recorded, then raised


def test_a_failing_sink(scorer, caplog):
    def broken(record):
        raise OSError("disk full")

    records: list = []
    lenient = InfluenceRecorder(scorer, "tiny", [broken, records], framework="test")
    with caplog.at_level(logging.ERROR, logger="grogu.observe.influence_log"):
        lenient.run(job())
    assert len(records) == 1 and any("disk full" in r.getMessage() for r in caplog.records)
    strict = InfluenceRecorder(scorer, "tiny", [broken, records], framework="test", on_error="raise")
    with pytest.raises(OSError, match="disk full"):
        strict.run(job())
    assert len(records) == 1


def test_background_work_and_flush(scorer):
    records: list = []
    recorder = InfluenceRecorder(scorer, "tiny", [records], framework="test", on_error="raise", background=True)
    recorder.record(job(query="  "))
    recorder.record(job())
    with pytest.raises(ValueError, match="query is empty"):
        recorder.flush(timeout=120)
    recorder.flush(timeout=120)  # the failure was raised once
    assert [r["error"] is None for r in records] == [False, True]
    assert records[1]["influence"] == pytest.approx(scorer.score(QUERY, TEXTS, answer="At Mile High.").scores, abs=1e-6)


def test_event_loop_tasks_and_aflush(scorer):
    records: list = []
    recorder = InfluenceRecorder(scorer, "tiny", [records], framework="test")
    strict = InfluenceRecorder(scorer, "tiny", [records], framework="test", on_error="raise")

    async def run():
        recorder.record(job())  # a task: the loop is not blocked
        assert records == []
        with pytest.raises(RuntimeError, match="aflush"):
            recorder.flush()
        await recorder.aflush()
        assert len(records) == 1
        strict.record(job(answer="In Denver."))  # under "raise": before record() returns
        assert len(records) == 2

    asyncio.run(run())
    want = scorer.score(QUERY, TEXTS, answer="At Mile High.").scores
    assert records[0]["influence"] == pytest.approx(want, abs=1e-5)  # ascore agrees to float32 rounding


def test_arguments_and_jobs():
    """on_error's choices; a job holds only the schema's fields."""
    assert check_on_error("raise") == "raise" and check_on_error("passthrough") == "record"
    with pytest.raises(ValueError, match="on_error"):
        check_on_error("ignore")
    with pytest.raises(ValueError, match="not fields"):
        AnsweredQuery(query=QUERY, answer=None, documents=["a"], fields=[{"node_id": "x"}])
    with pytest.raises(ValueError, match="not fields"):
        AnsweredQuery(query=QUERY, answer=None, documents=[], fields=[], context={"trace": 1})
    with pytest.raises(ValueError, match="1 document fields for 2"):
        AnsweredQuery(query=QUERY, answer=None, documents=["a", "b"], fields=[{}])
    with pytest.raises(ValueError, match="answer_source"):
        AnsweredQuery(query=QUERY, answer=None, documents=[], fields=[], answer_source="mine")
    assert set(CONTEXT_FIELDS) < set(RECORD_FIELDS)
    assert grogu_utility({"grogu": {"score": -1}}) == -1.0 and grogu_utility({"grogu": {"score": None}}) is None
    assert grogu_utility(None) is None and grogu_utility({"grogu": "x"}) is None


def test_build_influence_scorer(scorer, tiny, tokenizer):
    engine = scorer.target
    labels = []

    def label(model, eng):
        labels.append(model)
        return engine_label(eng)

    same, name = build_influence_scorer(scorer, resolve_engine=None, model_label=label)
    assert same is scorer and name == engine_label(engine) and labels == [scorer]
    built, _ = build_influence_scorer(
        (tiny, tokenizer),
        resolve_engine=lambda m, d, t: get_engine(m),
        model_label=label,
        max_new_tokens=4,
        method="leave_one_out_logprob",
        seed=3,
    )
    assert built.target is engine and built.method == "leave_one_out_logprob" and built.max_new_tokens == 4
    assert remote_target("http://127.0.0.1:1") == "http://127.0.0.1:1" and remote_target("smollm2") is None
    with pytest.raises(ValueError, match="device/dtype"):
        build_influence_scorer("http://127.0.0.1:1", resolve_engine=None, model_label=label, device="cpu")


# ---------------------------------------------------------------------------------------------- both frameworks
@pytest.fixture(scope="module")
def llama_records(tiny, tokenizer):
    pytest.importorskip("llama_index.postprocessor.grogu")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguInfluenceHandler

    from grogu.runtime.models import embedded_embedder_path

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llm = HuggingFaceLLM(
            model=tiny,
            tokenizer=tokenizer,
            model_name="tiny",
            max_new_tokens=N,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
        )
    index = VectorStoreIndex.from_documents(
        [Document(text=t) for t in TEXTS],
        embed_model=HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu"),
    )
    records: list = []
    handler = GroguInfluenceHandler(model=llm, sinks=[records], max_new_tokens=N)
    get_dispatcher().add_event_handler(handler)
    try:
        response = RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=2), llm=llm).query(QUERY)
    finally:
        get_dispatcher().event_handlers.remove(handler)
    texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in response.source_nodes]
    return records, texts, str(response)


@pytest.fixture(scope="module")
def langchain_records(tiny, tokenizer):
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnableParallel, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_grogu import InfluenceCallbackHandler
    from langchain_huggingface import HuggingFaceEmbeddings, HuggingFacePipeline
    from transformers import pipeline

    from grogu.runtime.models import embedded_embedder_path

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llm = HuggingFacePipeline(
            pipeline=pipeline(
                "text-generation",
                model=tiny,
                tokenizer=tokenizer,
                max_new_tokens=N,
                do_sample=False,
                return_full_text=False,
            )
        )
    store = InMemoryVectorStore.from_documents(
        [Document(t, id=f"d{i}") for i, t in enumerate(TEXTS)],
        HuggingFaceEmbeddings(model_name=embedded_embedder_path()),
    )
    retriever = store.as_retriever(search_kwargs={"k": 2})
    context = retriever | (lambda docs: "\n\n".join(d.page_content for d in docs))
    chain = (
        RunnableParallel(context=context, question=RunnablePassthrough())
        | PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")
        | llm
        | StrOutputParser()
    )
    records: list = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)
    answer = chain.invoke(QUERY, config={"callbacks": [handler]})
    return records, [d.page_content for d in retriever.invoke(QUERY)], answer


def test_both_integrations_write_the_same_schema(llama_records, langchain_records, scorer):
    """One log pipeline reads both: the same keys, record and documents, and InfluenceScorer's scores."""
    keys = []
    for framework, (records, texts, answer) in (("llama_index", llama_records), ("langchain", langchain_records)):
        (record,) = records
        expected = scorer.score(QUERY, texts, answer=answer)
        assert record["framework"] == framework and record["error"] is None and record["query"] == QUERY
        assert record["answer"] == answer == expected.answer and record["answer_source"] == "output"
        assert record["influence"] == pytest.approx(expected.scores, abs=1e-5)
        assert [d["influence"] for d in record["documents"]] == pytest.approx(expected.scores, abs=1e-5)
        assert [d["single_answer"] for d in record["documents"]] == expected.single_answers
        assert [d["leave_one_out_answer"] for d in record["documents"]] == expected.leave_one_out_answers
        assert record["method"] == expected.method and record["embedder"] == expected.embedder
        assert len(record["documents"]) == 2 and record["run_id"]
        keys.append((set(record), [set(d) for d in record["documents"]]))
    assert keys[0] == keys[1] == (set(RECORD_FIELDS), [set(DOCUMENT_FIELDS)] * 2)
