"""Reranker habits on real LangChain pipelines (tiny real LLM, packaged MiniLM vector store, SQuAD):
``metadata['relevance_score']`` in every mode (compressor in ``ContextualCompressionRetriever``, and
``GroguRetriever``), ``score_scale='probability'`` with thresholds in [0, 1], and the ``batch_size`` /
``engine_config`` knob on the engine."""

from __future__ import annotations

import asyncio

import pytest
from langchain_classic.retrievers import ContextualCompressionRetriever
from langchain_core.documents import Document
from langchain_grogu import METADATA_KEY, RELEVANCE_KEY, GroguCompressor, GroguRetriever

from grogu import EngineConfig, UtilityScorer
from grogu.metrics.scales import probability

N = 8  # max_new_tokens everywhere (as in conftest)
K = 5  # documents the vector store returns


@pytest.fixture(scope="module")
def query(paragraphs):
    return paragraphs[0]["question"]


@pytest.fixture(scope="module")
def base(vectorstore):
    return vectorstore.as_retriever(search_kwargs={"k": K})


@pytest.fixture
def restore_engine(engine):
    """The session's shared engine, its configuration put back after the test."""
    before = engine.config
    yield engine
    engine.config = before


def _pipeline(base, **kwargs):
    compressor = GroguCompressor(max_new_tokens=N, **kwargs)
    return ContextualCompressionRetriever(base_compressor=compressor, base_retriever=base)


def test_relevance_score_is_the_score_of_the_chosen_mode(llm, engine, base, query):
    texts = [d.page_content for d in base.invoke(query)]
    scorer = UtilityScorer(engine, max_new_tokens=N)

    out = _pipeline(base, model=llm, top_n=None, mode="document", score_scale="utility").invoke(query)
    expected = scorer.rerank(query, texts, top_n=None, mode="document")
    assert [d.page_content for d in out] == [texts[r.index] for r in expected]
    assert [d.metadata[RELEVANCE_KEY] for d in out] == [d.metadata[METADATA_KEY]["score"] for d in out]
    assert [d.metadata[RELEVANCE_KEY] for d in out] == pytest.approx([r.score for r in expected], abs=1e-6)
    relevance = [d.metadata[RELEVANCE_KEY] for d in out]
    assert relevance == sorted(relevance, reverse=True) and len(set(relevance)) > 1

    fused = _pipeline(base, model=llm, top_n=3, mode="fusion").invoke(query)
    assert len(fused) == 3
    assert [d.metadata[RELEVANCE_KEY] for d in fused] == [d.metadata[METADATA_KEY]["fused_score"] for d in fused]
    assert all(0.0 <= d.metadata[RELEVANCE_KEY] <= 1.0 for d in fused)

    context = _pipeline(base, model=llm, top_n=3, mode="context", score_scale="utility").invoke(query)
    shared = context[0].metadata[METADATA_KEY]["context"]["score"]
    assert len(context) == 3 and all(d.metadata[RELEVANCE_KEY] == shared for d in context)

    pruned = _pipeline(base, model=llm, top_n=None, mode="prune", score_scale="utility").invoke(query)
    assert 0 < len(pruned) <= K
    assert all(d.metadata[RELEVANCE_KEY] == d.metadata[METADATA_KEY]["score"] for d in pruned)

    # the default scale: in [0, 1], as LangChain's rerankers give it; the utility stays in metadata["grogu"]
    default = _pipeline(base, model=llm, top_n=None, mode="document").invoke(query)
    assert [d.page_content for d in default] == [d.page_content for d in out]
    assert [d.metadata[RELEVANCE_KEY] for d in default] == pytest.approx(
        [probability("key_entropy", r.score) for r in expected], abs=1e-6
    )
    assert all(0.0 < d.metadata[RELEVANCE_KEY] <= 1.0 for d in default)
    assert [d.metadata[METADATA_KEY]["score"] for d in default] == pytest.approx([r.score for r in expected], abs=1e-6)


def test_retriever_writes_relevance_score_sync_async_and_keeps_a_previous_one(llm, base, query):
    retriever = GroguRetriever(base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document")
    out = retriever.invoke(query)
    assert len(out) == 3 and [d.metadata[RELEVANCE_KEY] for d in out] == [
        d.metadata[METADATA_KEY]["probability"] for d in out
    ]
    one = retriever.invoke(query, top_n=1)  # per-call top_n: the best of the same ranking
    assert [d.page_content for d in one] == [out[0].page_content]
    aout = asyncio.run(retriever.ainvoke(query))
    assert [d.page_content for d in aout] == [d.page_content for d in out]
    assert [d.metadata[RELEVANCE_KEY] for d in aout] == pytest.approx(
        [d.metadata[RELEVANCE_KEY] for d in out], abs=1e-5
    )

    # a score an earlier reranker wrote is replaced, and kept in grogu's details
    docs = [Document(d.page_content, metadata={RELEVANCE_KEY: 0.9 - 0.1 * i}) for i, d in enumerate(base.invoke(query))]
    again = GroguCompressor(model=llm, top_n=None, max_new_tokens=N, mode="document").compress_documents(docs, query)
    for d in again:
        original = docs[d.metadata[METADATA_KEY]["index"]]
        assert d.metadata[METADATA_KEY]["previous_relevance_score"] == original.metadata[RELEVANCE_KEY]
        assert d.metadata[RELEVANCE_KEY] == d.metadata[METADATA_KEY]["probability"]


def test_probability_scale_bounds_scores_and_thresholds(llm, base, query):
    utility = _pipeline(base, model=llm, top_n=None, mode="document").invoke(query)
    prob = _pipeline(base, model=llm, top_n=None, mode="document", score_scale="probability").invoke(query)
    assert [d.page_content for d in prob] == [d.page_content for d in utility]  # same ranking
    for u, p in zip(utility, prob):
        info = p.metadata[METADATA_KEY]
        assert info["score"] == u.metadata[METADATA_KEY]["score"]  # grogu's details stay the utility
        assert p.metadata[RELEVANCE_KEY] == info["probability"] == probability("key_entropy", info["score"])
        assert 0.0 < p.metadata[RELEVANCE_KEY] <= 1.0
    values = [d.metadata[RELEVANCE_KEY] for d in prob]
    assert values == sorted(values, reverse=True) and len(set(values)) > 1

    cut = values[2]  # a threshold equal to the third document's probability keeps exactly the top three
    kept = _pipeline(base, model=llm, top_n=None, mode="document", score_scale="probability", threshold=cut).invoke(
        query
    )
    assert [d.page_content for d in kept] == [d.page_content for d in prob if d.metadata[RELEVANCE_KEY] >= cut]
    assert len(kept) == 3
    assert (
        _pipeline(base, model=llm, top_n=None, mode="document", score_scale="probability", threshold=1.0).invoke(query)
        == []
    )
    assert (
        len(
            _pipeline(base, model=llm, top_n=None, mode="document", score_scale="probability", threshold=0.0).invoke(
                query
            )
        )
        == K
    )

    context = _pipeline(base, model=llm, top_n=2, score_scale="probability").invoke(query)
    shared = context[0].metadata[METADATA_KEY]["context"]
    assert all(
        d.metadata[RELEVANCE_KEY] == shared["probability"] == probability("key_entropy", shared["score"])
        for d in context
    )

    for bad in (-0.5, 1.5, -1.5):  # a utility threshold is not a probability
        with pytest.raises(ValueError, match=r"threshold \(score_scale='probability'\)"):
            GroguCompressor(model=llm, mode="document", score_scale="probability", threshold=bad)
    for bad in ("prob", "", None):
        with pytest.raises(ValueError, match="score_scale"):
            GroguCompressor(model=llm, score_scale=bad)


def test_batch_size_and_engine_config_set_the_engine(llm, base, query, restore_engine):
    engine = restore_engine
    reference = _pipeline(base, model=llm, top_n=None, mode="document").invoke(query)
    small = _pipeline(base, model=llm, top_n=None, mode="document", batch_size=2)
    assert engine.config.max_batch_size == 2 and small.base_compressor.scorer.target is engine  # the shared engine
    out = small.invoke(query)
    assert [d.page_content for d in out] == [d.page_content for d in reference]
    assert [d.metadata[RELEVANCE_KEY] for d in out] == pytest.approx(
        [d.metadata[RELEVANCE_KEY] for d in reference], abs=1e-4
    )

    GroguRetriever(base_retriever=base, model=llm, engine_config=EngineConfig(max_batch_tokens=1024, max_batch_size=4))
    assert (engine.config.max_batch_size, engine.config.max_batch_tokens) == (4, 1024)
    for bad in (0, -1, 2.5, True, "4"):
        with pytest.raises(ValueError, match="batch_size"):
            GroguCompressor(model=llm, batch_size=bad)
    with pytest.raises(ValueError, match="not both"):
        GroguCompressor(model=llm, batch_size=2, engine_config=EngineConfig())
    with pytest.raises(ValueError, match="service chooses its own"):
        GroguCompressor(model="http://127.0.0.1:9", batch_size=2)
    assert (engine.config.max_batch_size, engine.config.max_batch_tokens) == (4, 1024)  # failed settings change nothing
