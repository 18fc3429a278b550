"""grogu.observe.tracing without a framework: OpenInference's attribute names, the no-op paths (no
opentelemetry installed, GROGU_TRACING=0, no SDK configured) and the spans on the real SDK."""

from __future__ import annotations

import subprocess
import sys

import pytest
from openinference.semconv.trace import (
    DocumentAttributes,
    OpenInferenceSpanKindValues,
    RerankerAttributes,
    SpanAttributes,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from grogu.observe import tracing

DOCS = [
    {"id": "a", "page_content": "Paris is in France.", "metadata": {"title": "Paris"}, "score": 0.9},
    {"id": "b", "page_content": "Lyon is in France.", "metadata": {}, "score": 0.5},
]


@pytest.fixture
def exporter():
    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    yield exporter
    tracing.set_tracer_provider(None)


def test_openinference_names():
    assert tracing.SPAN_KIND == SpanAttributes.OPENINFERENCE_SPAN_KIND
    assert (tracing.INPUT_VALUE, tracing.OUTPUT_VALUE) == (SpanAttributes.INPUT_VALUE, SpanAttributes.OUTPUT_VALUE)
    assert tracing.RERANKER == OpenInferenceSpanKindValues.RERANKER.value
    assert tracing.EVALUATOR == OpenInferenceSpanKindValues.EVALUATOR.value
    assert (
        tracing.RERANKER_QUERY,
        tracing.RERANKER_MODEL_NAME,
        tracing.RERANKER_TOP_K,
        tracing.RERANKER_INPUT_DOCUMENTS,
        tracing.RERANKER_OUTPUT_DOCUMENTS,
    ) == (
        RerankerAttributes.RERANKER_QUERY,
        RerankerAttributes.RERANKER_MODEL_NAME,
        RerankerAttributes.RERANKER_TOP_K,
        RerankerAttributes.RERANKER_INPUT_DOCUMENTS,
        RerankerAttributes.RERANKER_OUTPUT_DOCUMENTS,
    )
    assert (tracing.DOCUMENT_ID, tracing.DOCUMENT_CONTENT, tracing.DOCUMENT_SCORE, tracing.DOCUMENT_METADATA) == (
        DocumentAttributes.DOCUMENT_ID,
        DocumentAttributes.DOCUMENT_CONTENT,
        DocumentAttributes.DOCUMENT_SCORE,
        DocumentAttributes.DOCUMENT_METADATA,
    )


def test_rerank_span_and_an_escaping_error(exporter):
    with pytest.raises(ValueError, match="boom"):
        with tracing.rerank_span(
            framework="test", query="Where is Paris?", model="m", top_k=1, documents=DOCS, mode="document"
        ) as span:
            span.output([{**DOCS[1], "index": 1, "score": -0.2, "retrieval_score": 0.5, "utility": -0.2}])
            raise ValueError("boom")
    (s,) = exporter.get_finished_spans()
    assert (
        s.name == "grogu.rerank"
        and s.status.status_code == StatusCode.ERROR
        and s.status.description == "ValueError: boom"
    )
    a = s.attributes
    assert a["reranker.input_documents.0.document.metadata"] == '{"title": "Paris"}'
    assert "reranker.input_documents.1.document.metadata" not in a  # empty metadata left out
    assert (
        a["reranker.output_documents.0.document.id"] == "b" and a["reranker.output_documents.0.document.score"] == -0.2
    )
    assert (
        a["grogu.output.index"] == (1,)
        and a["grogu.output.utility"] == (-0.2,)
        and a["grogu.error"] == "ValueError: boom"
    )


def test_no_sdk_no_env_no_package(monkeypatch, exporter):
    # GROGU_TRACING=0: nothing is traced even with a provider
    monkeypatch.setenv("GROGU_TRACING", "0")
    with tracing.rerank_span(framework="t", query="q", model="m", top_k=None, documents=DOCS) as span:
        assert span.span is None and not span.recording
    with tracing.influence_span() as span:
        span.finish({"query": "q"})
    assert exporter.get_finished_spans() == ()
    monkeypatch.delenv("GROGU_TRACING")
    # the API without an SDK: spans that do not record, no attribute built
    tracing.set_tracer_provider(None)
    with tracing.rerank_span(framework="t", query="q", model="m", top_k=None, documents=DOCS) as span:
        assert not span.recording
    # opentelemetry not installed: grogu.observe.tracing imports and every call is a no-op
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from grogu.observe import tracing\n"
        "assert not tracing.available() and tracing.tracer() is None and tracing.current_context() is None\n"
        "with tracing.rerank_span(framework='t', query='q', model='m', top_k=1, documents=[]) as s:\n"
        "    s.output([]); s.fail(ValueError('x'))\n"
        "with tracing.influence_span() as s:\n"
        "    s.finish({'query': 'q'})\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
