"""OpenTelemetry spans of GroguRetriever, GroguCompressor and InfluenceCallbackHandler in real LCEL RAG
chains (tiny real LLM, real vector store, real SQuAD), traced by OpenInference's LangChainInstrumentor
into the OpenTelemetry SDK's in-memory exporter: grogu's spans sit under the chain's own run spans, with
OpenInference's reranker attributes and grogu's scores."""

from __future__ import annotations

import json

import pytest
from grogu_research.testing import one_span as one
from grogu_research.testing import parent_span as parent_of
from grogu_research.testing import span_documents as documents
from grogu_research.testing import traced
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_grogu import GroguCompressor, GroguRetriever, InfluenceCallbackHandler
from langchain_grogu.document_scores import grogu_documents
from openinference.instrumentation.langchain import LangChainInstrumentor
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry.trace import StatusCode

from grogu.metrics.scales import probability  # noqa: E402
from grogu.observe import tracing

N, K = 8, 4
PROMPT = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")
KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
INPUTS, OUTPUTS = RerankerAttributes.RERANKER_INPUT_DOCUMENTS, RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS
ID, CONTENT = DocumentAttributes.DOCUMENT_ID, DocumentAttributes.DOCUMENT_CONTENT
SCORE, METADATA = DocumentAttributes.DOCUMENT_SCORE, DocumentAttributes.DOCUMENT_METADATA


def format_docs(docs) -> str:
    return "\n\n".join(d.page_content for d in docs)


def rag(retriever, llm):
    return {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()


@pytest.fixture
def exporter():
    """A real SDK TracerProvider with an in-memory exporter, used by grogu and by OpenInference's
    LangChain instrumentor for this test only."""
    with traced(LangChainInstrumentor()) as exporter:
        yield exporter


def test_rerank_and_influence_spans_in_a_chain(vectorstore, llm, paragraphs, exporter):
    query = paragraphs[1]["question"]
    base = vectorstore.as_retriever(search_kwargs={"k": K})
    retriever = GroguRetriever(base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document")
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], max_new_tokens=N)
    answer = rag(retriever, llm).invoke(query, config={"callbacks": [handler]})
    spans = exporter.get_finished_spans()

    # grogu.rerank: a child of the GroguRetriever run's span
    span = one(spans, tracing.RERANK_SPAN)
    assert parent_of(span, spans).name == "GroguRetriever" and span.status.status_code == StatusCode.UNSET
    a = span.attributes
    assert a[KIND] == OpenInferenceSpanKindValues.RERANKER.value and a["grogu.framework"] == "langchain"
    assert a[RerankerAttributes.RERANKER_QUERY] == query and a[RerankerAttributes.RERANKER_TOP_K] == 3
    assert a[RerankerAttributes.RERANKER_MODEL_NAME] == retriever.model_name and a["grogu.mode"] == "document"
    retrieved = base.invoke(query)
    inputs = documents(a, INPUTS)
    assert [d[ID] for d in inputs] == [d.id for d in retrieved]
    assert [d[CONTENT] for d in inputs] == [d.page_content for d in retrieved]
    # the output: grogu's utilities, equal to grogu's scorer on the same documents
    expected = retriever.scorer.rerank(query, grogu_documents(retrieved, None), top_n=3, mode="document")
    outputs = documents(a, OUTPUTS)
    assert [d[ID] for d in outputs] == [retrieved[r.index].id for r in expected]
    assert [d[SCORE] for d in outputs] == pytest.approx([probability(r.metric, r.score) for r in expected], abs=1e-5)
    assert list(a["grogu.output.utility"]) == pytest.approx([r.score for r in expected], abs=1e-5)
    assert list(a["grogu.output.index"]) == [r.index for r in expected]
    meta = json.loads(outputs[0][METADATA])
    assert meta["grogu"]["score"] == pytest.approx(expected[0].score, abs=1e-5)
    assert meta["grogu"]["rank"] == 1 and meta["title"] == retrieved[expected[0].index].metadata["title"]

    # grogu.influence: a child of the chain's root run span, carrying the whole record
    (record,) = records
    root = next(s for s in spans if s.parent is None)
    influence = one(spans, tracing.INFLUENCE_SPAN)
    assert parent_of(influence, spans) is root and influence.status.status_code == StatusCode.UNSET
    b = influence.attributes
    assert b[KIND] == OpenInferenceSpanKindValues.EVALUATOR.value
    assert b[SpanAttributes.INPUT_VALUE] == query and b[SpanAttributes.OUTPUT_VALUE] == answer == record["answer"]
    assert record["influence"] and list(b["grogu.influence.influence"]) == record["influence"]
    assert b["grogu.influence.method"] == "exact" and b["grogu.influence.model"] == handler.model_name
    assert b["grogu.influence.run_id"] == record["run_id"] and b["grogu.influence.framework"] == "langchain"
    assert list(b["grogu.influence.document_ids"]) == [r.id for r in (retrieved[x.index] for x in expected)]
    assert json.loads(b["grogu.influence.documents"]) == json.loads(json.dumps(record["documents"], default=str))
    # ... and an event on the root run's span
    (event,) = [e for e in root.events if e.name == tracing.INFLUENCE_EVENT]
    assert list(event.attributes["grogu.influence.influence"]) == record["influence"]


def test_failed_scoring_sets_error_status_and_keeps_the_record(vectorstore, llm, exporter):
    """An empty question retrieves documents but cannot be scored: the compressor passes them through
    and the influence record is written with its error, each span with status ERROR."""
    base = vectorstore.as_retriever(search_kwargs={"k": K})
    compressor = GroguCompressor(model=llm, top_n=2, on_error="passthrough", max_new_tokens=N, mode="document")
    retriever = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)
    records: list[dict] = []
    handler = InfluenceCallbackHandler(model=llm, sinks=[records], on_error="record", max_new_tokens=N)
    answer = rag(retriever, llm).invoke("  ", config={"callbacks": [handler]})
    spans = exporter.get_finished_spans()

    span = one(spans, tracing.RERANK_SPAN)
    assert parent_of(span, spans).name == "ContextualCompressionRetriever"
    assert span.status.status_code == StatusCode.ERROR and "query is empty" in span.status.description
    assert "query is empty" in span.attributes["grogu.error"] and [e.name for e in span.events] == ["exception"]
    outputs = documents(span.attributes, OUTPUTS)  # passthrough: every document, in retrieval order
    assert [d[ID] for d in outputs] == [d.id for d in base.invoke("  ")]

    (record,) = records
    assert "query is empty" in record["error"] and record["influence"] is None and record["answer"] == answer
    influence = one(spans, tracing.INFLUENCE_SPAN)
    assert parent_of(influence, spans).parent is None  # the root run's span
    assert influence.status.status_code == StatusCode.ERROR and influence.status.description == record["error"]
    b = influence.attributes
    assert "grogu.influence.influence" not in b
    # nothing of the record is lost: every field that has a value is on the span
    for key, value in record.items():
        if value is None:
            assert f"grogu.influence.{key}" not in b, key
        elif key in ("documents", "metadata"):
            assert json.loads(b[f"grogu.influence.{key}"]) == json.loads(json.dumps(value, default=str)), key
        else:
            assert b[f"grogu.influence.{key}"] == (tuple(value) if isinstance(value, list) else value), key
    assert len(record["documents"]) == K
