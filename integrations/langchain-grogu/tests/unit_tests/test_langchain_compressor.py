"""GroguCompressor against grogu.UtilityScorer computed directly, on real documents and a tiny real LLM."""

from __future__ import annotations

import asyncio
import copy

import pytest
from langchain_core.documents import BaseDocumentCompressor
from langchain_grogu import METADATA_KEY, RELEVANCE_KEY, GroguCompressor
from pydantic import ValidationError

from grogu import METRICS, UtilityScorer

N = 8  # max_new_tokens everywhere (as in conftest)


@pytest.fixture(scope="module")
def reference(engine, documents, paragraphs):
    """UtilityScorer's own ranking of the documents, computed without LangChain."""
    query = paragraphs[0]["question"]
    texts = [d.page_content for d in documents]
    ranked = UtilityScorer(engine, max_new_tokens=N).rerank(query, texts, top_n=None, mode="document")
    return query, ranked


def test_is_a_document_compressor(llm):
    assert isinstance(GroguCompressor(model=llm, max_new_tokens=N, mode="document"), BaseDocumentCompressor)


def test_order_and_scores_equal_utility_scorer(llm, documents, reference):
    query, ranked = reference
    out = GroguCompressor(model=llm, top_n=None, max_new_tokens=N, mode="document").compress_documents(documents, query)
    assert [d.id for d in out] == [documents[r.index].id for r in ranked]
    assert [d.metadata[METADATA_KEY]["score"] for d in out] == [r.score for r in ranked]
    assert [d.metadata[METADATA_KEY]["answer"] for d in out] == [r.answer for r in ranked]
    scores = [d.metadata[METADATA_KEY]["score"] for d in out]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1


def test_top_n_and_threshold(llm, documents, reference):
    query, ranked = reference
    scores = [r.score for r in ranked]
    threshold = scores[len(scores) // 2]  # keeps the better half (ties included), on the utility's scale
    expect_ids = [documents[r.index].id for r in ranked]

    top3 = GroguCompressor(model=llm, top_n=3, max_new_tokens=N, mode="document").compress_documents(documents, query)
    assert [d.id for d in top3] == expect_ids[:3]

    above = GroguCompressor(
        model=llm, top_n=None, threshold=threshold, max_new_tokens=N, mode="document", score_scale="utility"
    )
    kept = above.compress_documents(documents, query)
    assert [d.id for d in kept] == [documents[r.index].id for r in ranked if r.score >= threshold]
    assert 0 < len(kept) < len(documents)

    both = GroguCompressor(
        model=llm, top_n=2, threshold=threshold, max_new_tokens=N, mode="document", score_scale="utility"
    )
    assert [d.id for d in both.compress_documents(documents, query)] == [d.id for d in kept][:2]

    nothing = GroguCompressor(
        model=llm, top_n=None, threshold=scores[0] + 1.0, max_new_tokens=N, mode="document", score_scale="utility"
    )
    assert nothing.compress_documents(documents, query) == []


def test_metadata_kept_and_added_inputs_untouched(llm, documents, reference):
    query, ranked = reference
    before = copy.deepcopy(documents)
    out = GroguCompressor(model=llm, top_n=4, max_new_tokens=N, mode="document").compress_documents(documents, query)
    assert documents == before  # inputs are not mutated
    for rank, (doc, r) in enumerate(zip(out, ranked), start=1):
        original = documents[r.index]
        assert doc.id == original.id and doc.page_content == original.page_content
        assert {k: v for k, v in doc.metadata.items() if k not in (METADATA_KEY, RELEVANCE_KEY)} == original.metadata
        info = doc.metadata[METADATA_KEY]
        assert doc.metadata[RELEVANCE_KEY] == info["probability"]  # the document mode's score, in [0, 1]
        assert info["rank"] == rank and info["index"] == r.index
        assert info["metric"] == "key_entropy" and info["confidence"] == pytest.approx(-info["score"])
        assert set(info["variants"]) == set(METRICS)  # every metric, the paper's four included
        assert info["n_tokens"] == r.n_tokens and info["answer_finished"] == r.answer_finished
        assert info["model"]


def test_title_key_changes_the_prompt(llm, documents, paragraphs, engine):
    query = paragraphs[0]["question"]
    titled = GroguCompressor(model=llm, top_n=None, title_key="title", max_new_tokens=N, mode="document")
    expected = UtilityScorer(engine, max_new_tokens=N).score(
        query, [{"text": d.page_content, "title": d.metadata["title"]} for d in documents]
    )
    got = {d.id: d.metadata[METADATA_KEY]["score"] for d in titled.compress_documents(documents, query)}
    assert [got[d.id] for d in documents] == [r.score for r in expected]


def test_async_equals_sync_and_does_not_block_the_loop(llm, documents, paragraphs):
    compressor = GroguCompressor(model=llm, top_n=5, max_new_tokens=N, mode="document")
    queries = [p["question"] for p in paragraphs[:3]]
    sync = [compressor.compress_documents(documents, q) for q in queries]

    async def run():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(compressor.acompress_documents(documents, q) for q in queries))
        done.set()
        await tick_task
        return results, ticks

    results, ticks = asyncio.run(run())
    assert ticks > 10  # the event loop kept running while the engine scored
    for a, s in zip(results, sync):
        assert [d.id for d in a] == [d.id for d in s]
        for da, ds in zip(a, s):
            ga, gs = da.metadata[METADATA_KEY], ds.metadata[METADATA_KEY]
            assert ga["answer"] == gs["answer"] and ga["rank"] == gs["rank"]
            assert ga["score"] == pytest.approx(gs["score"], abs=1e-5)


def test_empty_documents(llm):
    compressor = GroguCompressor(model=llm, max_new_tokens=N, mode="document")
    assert compressor.compress_documents([], "anything?") == []
    assert asyncio.run(compressor.acompress_documents([], "anything?")) == []


def test_on_error_raise_and_passthrough(llm, documents):
    docs = documents[:4]
    with pytest.raises(ValueError, match="query is empty"):
        GroguCompressor(model=llm, max_new_tokens=N, mode="document").compress_documents(docs, "   ")

    passthrough = GroguCompressor(model=llm, top_n=2, on_error="passthrough", max_new_tokens=N, mode="document")
    for out in (passthrough.compress_documents(docs, "   "), asyncio.run(passthrough.acompress_documents(docs, "   "))):
        assert [d.id for d in out] == [d.id for d in docs]  # every document, input order, despite top_n
        for i, (d, original) in enumerate(zip(out, docs)):
            info = d.metadata[METADATA_KEY]
            assert info["score"] is None and info["index"] == i and "query is empty" in info["error"]
            assert {k: v for k, v in d.metadata.items() if k != METADATA_KEY} == original.metadata


def test_bad_input_is_a_clear_error(llm, documents):
    compressor = GroguCompressor(model=llm, max_new_tokens=N, mode="document")
    with pytest.raises(TypeError, match="query must be a str"):
        compressor.compress_documents(documents, None)
    with pytest.raises(TypeError, match="sequence of langchain Documents"):
        compressor.compress_documents("just a string", "q?")
    with pytest.raises(TypeError, match="document 1 is a str"):
        compressor.compress_documents([documents[0], "raw text"], "q?")
    # bad input is not a scoring failure: passthrough does not hide it
    with pytest.raises(TypeError):
        GroguCompressor(model=llm, on_error="passthrough", max_new_tokens=N, mode="document").compress_documents(
            [{"text": "x"}], "q?"
        )


def test_bad_options_are_clear_errors(llm, engine):
    with pytest.raises(ValidationError):
        GroguCompressor(model=llm, top_n=0, mode="document")
    with pytest.raises(ValidationError):
        GroguCompressor(model=llm, on_error="ignore", mode="document")
    with pytest.raises(ValidationError):
        GroguCompressor(model=llm, unknown_option=1, mode="document")
    with pytest.raises(ValueError, match="metric"):
        GroguCompressor(model=llm, metric="bleu", mode="document")
    with pytest.raises(TypeError, match="cannot use a object as the target LLM.*ChatOpenAI on the OpenAI API"):
        GroguCompressor(model=object(), mode="document")
    with pytest.raises(ValueError, match="device/dtype only apply"):
        GroguCompressor(model=llm, device="cpu", mode="document")


def test_target_llm_reuses_the_shared_engine(llm, engine, tiny, tokenizer):
    from langchain_huggingface import ChatHuggingFace

    assert GroguCompressor(model=llm, max_new_tokens=N, mode="document").scorer.target is engine
    assert GroguCompressor(model=llm.pipeline, max_new_tokens=N, mode="document").scorer.target is engine
    assert GroguCompressor(model=(tiny, tokenizer), max_new_tokens=N, mode="document").scorer.target is engine
    assert GroguCompressor(model=engine, max_new_tokens=N, mode="document").scorer.target is engine
    chat = ChatHuggingFace(llm=llm, tokenizer=tokenizer, model_id="tiny-llama")
    assert GroguCompressor(model=chat, max_new_tokens=N, mode="document").scorer.target is engine
