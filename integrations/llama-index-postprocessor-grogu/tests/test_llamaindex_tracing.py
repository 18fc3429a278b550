"""OpenTelemetry spans of GroguRerank and the influence handler in a real LlamaIndex query engine, traced
by OpenInference's LlamaIndexInstrumentor into the OpenTelemetry SDK's in-memory exporter: grogu's
spans sit under LlamaIndex's own, with OpenInference's reranker attributes and grogu's scores."""

from __future__ import annotations

import json

import grogu_research.testing
import pytest
from grogu_research.testing import one_span as one
from grogu_research.testing import parent_span as parent_of
from grogu_research.testing import span_documents as documents
from grogu_research.testing import traced
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode
from llama_index.postprocessor.grogu import GroguInfluenceHandler, GroguRerank
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry.trace import StatusCode

import grogu
from grogu.observe import tracing

K, TOKENS = 4, 8
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
INPUTS, OUTPUTS = RerankerAttributes.RERANKER_INPUT_DOCUMENTS, RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS
ID, CONTENT = DocumentAttributes.DOCUMENT_ID, DocumentAttributes.DOCUMENT_CONTENT
SCORE, METADATA = DocumentAttributes.DOCUMENT_SCORE, DocumentAttributes.DOCUMENT_METADATA


@pytest.fixture
def exporter():
    """A real SDK TracerProvider with an in-memory exporter, used by grogu and by OpenInference's
    LlamaIndex instrumentor for this test only."""
    with traced(LlamaIndexInstrumentor()) as exporter:
        yield exporter


def test_rerank_and_influence_spans_in_a_query_engine(index, llm, embed_model, questions, attach, exporter):
    query = questions[2]
    rerank = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, mode="document")
    records = []
    attach(GroguInfluenceHandler(model=llm, embedder=embed_model, sinks=[records], max_new_tokens=TOKENS))
    retriever = index.as_retriever(similarity_top_k=K)
    retrieved = retriever.retrieve(query)
    response = RetrieverQueryEngine.from_args(retriever, llm=llm, node_postprocessors=[rerank]).query(query)
    spans = exporter.get_finished_spans()

    # grogu.rerank: a child of LlamaIndex's postprocessor span, inside the query's trace
    span = one(spans, tracing.RERANK_SPAN)
    assert parent_of(span, spans).name.startswith("GroguRerank.")
    query_span = next(s for s in spans if s.name.startswith("RetrieverQueryEngine.query"))
    assert span.context.trace_id == query_span.context.trace_id and span.status.status_code == StatusCode.UNSET
    a = span.attributes
    assert a[KIND] == OpenInferenceSpanKindValues.RERANKER.value
    assert a[RerankerAttributes.RERANKER_QUERY] == query and a[RerankerAttributes.RERANKER_TOP_K] == 2
    assert a[RerankerAttributes.RERANKER_MODEL_NAME] == "tiny-llama"
    assert a["grogu.mode"] == "document" and a["grogu.metric"] == rerank.metric
    inputs = documents(a, INPUTS)
    assert [d[ID] for d in inputs] == [n.node.node_id for n in retrieved]
    assert [d[SCORE] for d in inputs] == pytest.approx([n.score for n in retrieved])  # the retriever's
    assert [d[CONTENT] for d in inputs] == [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in retrieved]
    # the output: grogu's utilities, equal to grogu's scorer on the same texts
    texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in retrieved]
    expected = rerank.scorer.rerank(query, texts, top_n=2, mode="document")
    outputs = documents(a, OUTPUTS)
    assert (
        [d[ID] for d in outputs]
        == [n.node.node_id for n in response.source_nodes]
        == [retrieved[r.index].node.node_id for r in expected]
    )
    assert [d[SCORE] for d in outputs] == pytest.approx([r.score for r in expected], abs=1e-5)
    assert list(a["grogu.output.utility"]) == pytest.approx([r.score for r in expected], abs=1e-5)
    assert list(a["grogu.output.index"]) == [r.index for r in expected]
    assert list(a["grogu.output.retrieval_score"]) == pytest.approx([retrieved[r.index].score for r in expected])
    meta = json.loads(outputs[0][METADATA])
    assert meta["grogu"]["score"] == pytest.approx(expected[0].score, abs=1e-5)
    assert meta["retrieval_score"] == pytest.approx(retrieved[expected[0].index].score)

    # grogu.influence: a child of the query's span, carrying the whole record
    (record,) = records
    influence = one(spans, tracing.INFLUENCE_SPAN)
    assert parent_of(influence, spans) is query_span and influence.status.status_code == StatusCode.UNSET
    b = influence.attributes
    assert b[KIND] == OpenInferenceSpanKindValues.EVALUATOR.value
    assert b[SpanAttributes.INPUT_VALUE] == query and b[SpanAttributes.OUTPUT_VALUE] == str(response)
    assert (
        list(b["grogu.influence.influence"])
        == record["influence"]
        == [n.node.metadata["influence"] for n in response.source_nodes]
    )
    assert b["grogu.influence.method"] == record["method"] == "exact"
    assert b["grogu.influence.model"] == "tiny-llama" and b["grogu.influence.run_id"] == record["run_id"]
    assert list(b["grogu.influence.document_ids"]) == [n.node.node_id for n in response.source_nodes]
    assert json.loads(b["grogu.influence.documents"]) == json.loads(json.dumps(record["documents"], default=str))
    # ... and an event on the query's span
    (event,) = [e for e in query_span.events if e.name == tracing.INFLUENCE_EVENT]
    assert list(event.attributes["grogu.influence.influence"]) == record["influence"]
    assert event.attributes["grogu.influence.method"] == "exact"


def test_failed_scoring_sets_error_status_and_keeps_the_record(
    index, llm, tokenizer, embed_model, questions, attach, exporter
):
    """A real scoring failure: a target LLM whose 256-token window cannot hold this long query."""
    small = grogu.Engine(
        grogu_research.testing.tiny_model("llama", max_position_embeddings=256), tokenizer, device="cpu"
    )
    query = questions[0] + " Please explain in detail. " * 60
    rerank = GroguRerank(top_n=2, model=small, on_error="passthrough", max_new_tokens=TOKENS, mode="document")
    records = []
    attach(GroguInfluenceHandler(model=small, embedder=embed_model, sinks=[records], max_new_tokens=TOKENS))
    retriever = index.as_retriever(similarity_top_k=K)
    retrieved = retriever.retrieve(query)
    response = RetrieverQueryEngine.from_args(retriever, llm=llm, node_postprocessors=[rerank]).query(query)
    spans = exporter.get_finished_spans()

    span = one(spans, tracing.RERANK_SPAN)
    assert span.status.status_code == StatusCode.ERROR and "context window" in span.status.description
    assert "context window" in span.attributes["grogu.error"]
    assert [e.name for e in span.events] == ["exception"]
    outputs = documents(span.attributes, OUTPUTS)  # passthrough: every node, retrieval order and scores
    assert [d[ID] for d in outputs] == [n.node.node_id for n in retrieved]
    assert [d[SCORE] for d in outputs] == pytest.approx([n.score for n in retrieved])

    (record,) = records
    assert "context window" in record["error"] and record["influence"] is None
    influence = one(spans, tracing.INFLUENCE_SPAN)
    assert influence.status.status_code == StatusCode.ERROR and influence.status.description == record["error"]
    b = influence.attributes
    assert b["grogu.influence.error"] == record["error"] and "grogu.influence.influence" not in b
    assert b[SpanAttributes.INPUT_VALUE] == query and b[SpanAttributes.OUTPUT_VALUE] == str(response)
    # nothing of the record is lost: every field that has a value is on the span
    for key, value in record.items():
        if value is not None and key not in ("documents", "metadata"):
            assert b[f"grogu.influence.{key}"] == value, key
    assert json.loads(b["grogu.influence.documents"]) == json.loads(json.dumps(record["documents"], default=str))
    assert json.loads(b["grogu.influence.metadata"]) == record["metadata"]
    assert [d["id"] for d in record["documents"]] == [n.node.node_id for n in retrieved]
