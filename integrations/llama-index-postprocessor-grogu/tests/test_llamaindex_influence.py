"""Influence logging in real LlamaIndex query pipelines, checked against grogu.metrics.influence.InfluenceScorer
computed directly on the response's source nodes and the answer actually given."""

from __future__ import annotations

import asyncio
import json
import logging

import grogu_research.testing
import pytest
from llama_index.core.callbacks import CallbackManager
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode
from llama_index.postprocessor.grogu import (
    CallableSink,
    GroguInfluenceCallbackHandler,
    GroguInfluenceHandler,
    GroguRerank,
    JSONLSink,
    ListSink,
    LoggerSink,
)

import grogu
from grogu.metrics.influence import InfluenceScorer
from grogu.observe import sinks
from grogu.observe.influence_record import DOCUMENT_FIELDS, RECORD_FIELDS

K = 4
TOKENS = 8


@pytest.fixture(scope="module")
def reference(llm, embed_model):
    """grogu's own Influence scorer on the same LLM and embedder, called directly."""
    return InfluenceScorer((llm._model, llm._tokenizer), embedder=embed_model._model, max_new_tokens=TOKENS)


def query_engine(index, llm, **kwargs):
    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    return RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank], **kwargs
    )


def check_against_reference(response, record, reference):
    docs = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in response.source_nodes]
    expected = reference.score(record["query"], docs, answer=str(response))
    got = [n.node.metadata["influence"] for n in response.source_nodes]
    assert got == pytest.approx(expected.scores, abs=1e-5)
    assert record["answer"] == str(response) == expected.answer
    assert set(record) == set(RECORD_FIELDS) and record["framework"] == "llama_index"
    assert all(set(d) == set(DOCUMENT_FIELDS) for d in record["documents"])
    assert [d["id"] for d in record["documents"]] == [n.node.node_id for n in response.source_nodes]
    assert [d["index"] for d in record["documents"]] == list(range(len(response.source_nodes)))
    assert [d["influence"] for d in record["documents"]] == pytest.approx(expected.scores, abs=1e-5)
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-5)
    if expected.method == "exact":
        assert [d["single_answer"] for d in record["documents"]] == expected.single_answers
        assert [d["leave_one_out_answer"] for d in record["documents"]] == expected.leave_one_out_answers
    else:  # the ablation estimate generates no per-node answers
        assert expected.single_answers == [] and expected.leave_one_out_answers == []
        assert all(d["single_answer"] is None and d["leave_one_out_answer"] is None for d in record["documents"])
    assert record["method"] == expected.method


def test_handler_writes_metadata_and_one_record_per_query(index, llm, embed_model, questions, reference, attach):
    records = []
    handler = attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[records], max_new_tokens=TOKENS))
    assert handler.recorder.scorer.target is grogu.get_engine((llm._model, llm._tokenizer))  # one shared model
    assert handler.recorder.scorer.embedder is embed_model._model  # the index's embedder, reused
    engine = query_engine(index, llm)
    response = engine.query(questions[0])
    assert len(records) == 1
    record = records[0]
    assert record["query"] == questions[0] and record["model"] == "tiny-llama" and record["error"] is None
    assert record["run_id"] and record["answer_source"] == "output" and record["embedder"]
    check_against_reference(response, record, reference)
    # the reranker's values travel into the record; the influence stays out of the LLM's text
    for row, node in zip(record["documents"], response.source_nodes):
        assert row["utility"] == pytest.approx(node.node.metadata["grogu"]["score"])
        assert row["retrieval_score"] == pytest.approx(node.node.metadata["retrieval_score"])
        assert row["page_content"] == node.node.get_content(metadata_mode=MetadataMode.NONE)
        assert row["metadata"]["grogu"]["score"] == pytest.approx(node.node.metadata["grogu"]["score"])
        assert "influence" not in node.node.get_content(metadata_mode=MetadataMode.LLM)
    handler.score_response(questions[0], response)  # the same response again (e.g. a router): not re-scored
    assert len(records) == 1
    engine.query(questions[1])
    assert len(records) == 2 and records[1]["query"] == questions[1]


def test_ablation_method(index, llm, embed_model, questions, attach):
    """method="ablation": the ContextCite-style estimate, equal to InfluenceScorer's, no per-node answers."""
    records = []
    attach(
        GroguInfluenceHandler(
            model=llm, embedder=embed_model, sinks=[records], max_new_tokens=TOKENS, method="ablation", n_ablations=6
        )
    )
    response = query_engine(index, llm).query(questions[2])
    reference = InfluenceScorer(
        (llm._model, llm._tokenizer),
        embedder=embed_model._model,
        max_new_tokens=TOKENS,
        method="ablation",
        n_ablations=6,
    )
    assert len(records) == 1 and records[0]["method"] == "ablation"
    check_against_reference(response, records[0], reference)
    assert all(d["single_answer"] is None and d["leave_one_out_answer"] is None for d in records[0]["documents"])


@pytest.mark.parametrize("method", ["leave_one_out_logprob", "contextcite"])
def test_forward_only_methods(index, llm, embed_model, questions, attach, method):
    """Forward-only attribution of the answer given: the record says which method made it; the scores
    and log-probabilities equal InfluenceScorer's on the response's source nodes."""
    records = []
    n = 10 if method == "contextcite" else None
    attach(
        GroguInfluenceHandler(
            model=llm,
            embedder=embed_model,
            sinks=[records],
            max_new_tokens=TOKENS,
            method=method,
            n_ablations=n,
            seed=2,
        )
    )
    response = query_engine(index, llm).query(questions[3])
    reference = InfluenceScorer(
        (llm._model, llm._tokenizer), max_new_tokens=TOKENS, method=method, n_ablations=n, seed=2
    )
    assert len(records) == 1
    record = records[0]
    docs = [node.node.get_content(metadata_mode=MetadataMode.LLM) for node in response.source_nodes]
    expected = reference.score(record["query"], docs, answer=str(response))
    assert record["method"] == method == expected.method and record["embedder"] is None and record["error"] is None
    assert record["answer"] == str(response) == expected.answer
    assert [r["influence"] for r in record["documents"]] == pytest.approx(expected.scores, abs=1e-4)
    assert record["influence"] == pytest.approx(expected.scores, abs=1e-4)
    assert [node.node.metadata["influence"] for node in response.source_nodes] == pytest.approx(
        expected.scores, abs=1e-4
    )
    assert record["logprobs"] == pytest.approx(expected.forward.logprobs, abs=1e-4)
    assert len(record["logprobs"]) == (len(docs) + 1 if method == "leave_one_out_logprob" else 10)
    assert max(abs(r["influence"]) for r in record["documents"]) > 0
    assert all(d["single_answer"] is None and d["leave_one_out_answer"] is None for d in record["documents"])


def test_jsonl_and_logger_sinks(index, llm, embed_model, questions, reference, attach, tmp_path, caplog):
    path = tmp_path / "influence.jsonl"
    attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[str(path)], max_new_tokens=TOKENS))
    engine = query_engine(index, llm)
    responses = [engine.query(q) for q in questions[2:4]]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2
    for response, record in zip(responses, lines):
        check_against_reference(response, record, reference)

    logged = logging.getLogger("test.grogu.influence")
    attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[logged], max_new_tokens=TOKENS))
    with caplog.at_level(logging.INFO, logger="test.grogu.influence"):
        response = engine.query(questions[4])
    messages = [r.getMessage() for r in caplog.records if r.name == "test.grogu.influence"]
    assert len(messages) == 1
    record = json.loads(messages[0].split(" ", 2)[2])
    check_against_reference(response, record, reference)


def test_async_queries_do_not_block_and_are_recorded(index, llm, embed_model, questions, reference, attach):
    handler = attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[[]], max_new_tokens=TOKENS))
    engine = query_engine(index, llm)
    qs = questions[5:9]

    async def run():
        responses = await asyncio.gather(*(engine.aquery(q) for q in qs))
        await handler.aflush()
        return responses

    responses = asyncio.run(run())
    assert sorted(r["query"] for r in handler.records) == sorted(qs)
    by_query = {r["query"]: r for r in handler.records}
    for q, response in zip(qs, responses):
        check_against_reference(response, by_query[q], reference)


def test_background_thread_mode(index, llm, embed_model, questions, reference, attach):
    handler = attach(
        GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[[]], background=True, max_new_tokens=TOKENS)
    )
    response = query_engine(index, llm).query(questions[9])
    handler.flush(timeout=60)
    assert len(handler.records) == 1
    check_against_reference(response, handler.records[0], reference)


def test_legacy_callback_handler(index, llm, embed_model, questions, reference):
    handler = GroguInfluenceCallbackHandler(model=llm, embedder=embed_model, sinks=[ListSink()], max_new_tokens=TOKENS)
    engine = query_engine(index, llm, callback_manager=CallbackManager([handler]))
    response = engine.query(questions[10])
    assert len(handler.records) == 1
    check_against_reference(response, handler.records[0], reference)
    assert handler.records[0]["run_id"]  # the query's event id
    with pytest.raises(TypeError, match="unexpected"):
        GroguInfluenceCallbackHandler(model=llm, sink_list=[])


def test_failure_is_recorded_not_raised(index, llm, embed_model, tokenizer, questions, attach, caplog):
    """A real failure: the scoring model's 256-token window cannot hold the long query."""
    small = grogu.Engine(
        grogu_research.testing.tiny_model("llama", max_position_embeddings=256), tokenizer, device="cpu"
    )
    handler = attach(GroguInfluenceHandler(model=small, embedder=embed_model, sinks=[[]], max_new_tokens=TOKENS))
    engine = query_engine(index, llm)
    query = questions[11] + " Please explain in detail. " * 60
    with caplog.at_level(logging.WARNING, logger="llama_index.postprocessor.grogu.influence"):
        response = engine.query(query)  # the query itself still succeeds
    assert response.source_nodes and all("influence" not in n.node.metadata for n in response.source_nodes)
    (record,) = handler.records
    assert "context window" in record["error"] and len(record["documents"]) == len(response.source_nodes)
    assert record["influence"] is None and all(d["influence"] is None for d in record["documents"])
    assert set(record) == set(RECORD_FIELDS) and all(set(d) == set(DOCUMENT_FIELDS) for d in record["documents"])
    assert [d["id"] for d in record["documents"]] == [n.node.node_id for n in response.source_nodes]
    assert any("influence failed" in r.getMessage() for r in caplog.records)

    strict = GroguInfluenceCallbackHandler(
        model=small, embedder=embed_model, sinks=[[]], on_error="raise", max_new_tokens=TOKENS
    )
    with pytest.raises(ValueError, match="context window"):
        query_engine(index, llm, callback_manager=CallbackManager([strict])).query(query)
    assert "context window" in strict.records[0]["error"]


def test_streaming_response_is_scored_once_read(index, llm, embed_model, questions, reference, attach, caplog):
    handler = attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[[]], max_new_tokens=TOKENS))
    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank], streaming=True
    )
    with caplog.at_level(logging.WARNING, logger="llama_index.postprocessor.grogu.influence"):
        response = engine.query(questions[1])
    assert handler.records == [] and any("not consumed" in r.getMessage() for r in caplog.records)
    text = str(response)  # the caller still gets the whole stream (str() reads it into response_txt)
    assert text and text == response.response_txt
    handler.score_response(questions[1], response)
    (record,) = handler.records
    check_against_reference(response, record, reference)


def test_bad_sink_is_a_clear_error(llm, embed_model):
    with pytest.raises(TypeError, match="sink must be"):
        GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[42])
    with pytest.raises(OSError):  # a folder that cannot be created
        GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=["/proc/no/such/folder/log.jsonl"])
    with pytest.raises(ValueError, match="on_error"):
        GroguInfluenceHandler(model=llm, embedder=embed_model, on_error="ignore")


def test_the_sinks_are_grogus_shared_sinks(index, llm, embed_model, questions, reference, tmp_path):
    """The package exports grogu's sink classes under grogu's names (langchain-grogu exports the same)."""
    import llama_index.postprocessor.grogu as package

    assert (JSONLSink, ListSink, LoggerSink, CallableSink) == (
        sinks.JSONLSink,
        sinks.ListSink,
        sinks.LoggerSink,
        sinks.CallableSink,
    )
    assert not hasattr(package, "JsonlSink") and not hasattr(package, "MemorySink")
    path, called = tmp_path / "influence.jsonl", []
    handler = GroguInfluenceCallbackHandler(
        model=llm,
        embedder=embed_model,
        sinks=[ListSink(), JSONLSink(path), CallableSink(called.append)],
        max_new_tokens=TOKENS,
    )
    response = query_engine(index, llm, callback_manager=CallbackManager([handler])).query(questions[0])
    (record,) = handler.records
    check_against_reference(response, record, reference)
    (line,) = path.read_text().splitlines()
    check_against_reference(response, json.loads(line), reference)
    assert len(called) == 1 and called[0]["influence"] == record["influence"]


@pytest.mark.parametrize("handler_class", [GroguInfluenceHandler, GroguInfluenceCallbackHandler])
@pytest.mark.parametrize("removed", ["sink", "raise_errors"])
def test_removed_arguments_are_errors(llm, embed_model, handler_class, removed):
    """``sink=`` and ``raise_errors=`` are not arguments (``sinks=[...]``, ``on_error=`` are); no ``handler.sink``."""
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{removed}'"):
        handler_class(model=llm, embedder=embed_model, **{removed: []})
    assert not hasattr(handler_class(model=llm, embedder=embed_model, sinks=[]), "sink")
