"""Reranker habits in real LlamaIndex pipelines (VectorStoreIndex on SQuAD, packaged MiniLM, tiny real
HuggingFaceLLM): a per-call ``top_n`` (``postprocess_nodes(..., top_n=)``, ``apostprocess_nodes``, and
``with reranker.using(top_n=)`` around a query engine), ``score_scale='probability'`` with thresholds in
[0, 1], and the ``batch_size`` / ``engine_config`` knob on the engine."""

from __future__ import annotations

import asyncio

import pytest
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.rerank import ReRankStartEvent
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.postprocessor.grogu import GroguRerank
from llama_index.postprocessor.grogu.utils import resolve_engine

import grogu
from grogu.metrics.scales import probability

K = 5
TOKENS = 8


def ids(nodes):
    return [n.node.node_id for n in nodes]


def retrieve(index, query):
    return index.as_retriever(similarity_top_k=K).retrieve(query)


class TopNRecorder(BaseEventHandler):
    top_n: list = []

    @classmethod
    def class_name(cls) -> str:
        return "TopNRecorder"

    def handle(self, event, **kwargs) -> None:
        if isinstance(event, ReRankStartEvent):
            self.top_n.append(event.top_n)


@pytest.fixture
def restore_engine(llm):
    engine = resolve_engine(llm)
    before = engine.config
    yield engine
    engine.config = before


@pytest.mark.slow
def test_per_call_top_n(index, llm, questions, attach):
    query = questions[1]
    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    other = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    ranked = rerank.postprocess_nodes(retrieve(index, query), query_str=query, top_n=None)
    assert len(ranked) == K
    best = ids(ranked)

    assert ids(rerank.postprocess_nodes(retrieve(index, query), query_str=query, top_n=1)) == best[:1]
    assert ids(rerank.postprocess_nodes(retrieve(index, query), query_str=query)) == best[:3]  # the setting is back
    assert rerank.top_n == 3
    got = asyncio.run(rerank.apostprocess_nodes(retrieve(index, query), query_str=query, top_n=2))
    assert ids(got) == best[:2]

    # a query engine's own call: the block's top_n, for this reranker only, in this call only
    recorder = attach(TopNRecorder(top_n=[]))
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank]
    )
    with rerank.using(top_n=2):
        assert ids(engine.query(query).source_nodes) == best[:2]
        assert ids(other.postprocess_nodes(retrieve(index, query), query_str=query)) == best[:3]
        assert len(asyncio.run(engine.aquery(query)).source_nodes) == 2
        with rerank.using(top_n=4):  # nested blocks: the inner one wins, the outer one comes back
            assert len(engine.query(query).source_nodes) == 4
        assert len(engine.query(query).source_nodes) == 2
    assert ids(engine.query(query).source_nodes) == best[:3]
    assert recorder.top_n == [2, 3, 2, 4, 2, 3]  # the events report each call's top_n (3: the other reranker)

    # the context mode takes it too: contexts of the call's top_n nodes
    context = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS)
    assert len(context.postprocess_nodes(retrieve(index, query), query_str=query, top_n=2)) == 2
    assert len(context.postprocess_nodes(retrieve(index, query), query_str=query)) == 3

    for bad in (0, -1, True, 2.5, "2"):
        with pytest.raises(ValueError, match="top_n"):
            rerank.postprocess_nodes(retrieve(index, query), query_str=query, top_n=bad)
        with pytest.raises(ValueError, match="top_n"):
            with rerank.using(top_n=bad):
                pass
    assert ids(rerank.postprocess_nodes(retrieve(index, query), query_str=query)) == best[:3]


def test_probability_scale(index, llm, questions):
    query = questions[1]
    utility = GroguRerank(top_n=None, model=llm, max_new_tokens=TOKENS, mode="document")
    prob = GroguRerank(top_n=None, model=llm, max_new_tokens=TOKENS, mode="document", score_scale="probability")
    by_utility = utility.postprocess_nodes(retrieve(index, query), query_str=query)
    utilities = {n.node.node_id: n.score for n in by_utility}
    got = prob.postprocess_nodes(retrieve(index, query), query_str=query)
    assert ids(got) == ids(by_utility)  # the same ranking
    for n in got:
        g = n.node.metadata["grogu"]
        assert g["score"] == pytest.approx(utilities[n.node.node_id], abs=1e-6)  # details stay the utility
        assert n.score == g["probability"] == probability("key_entropy", g["score"]) and 0.0 < n.score <= 1.0
    scores = [n.score for n in got]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1

    cut = scores[2]  # exactly the three nodes at or above the third one's probability
    kept = GroguRerank(
        top_n=None, model=llm, max_new_tokens=TOKENS, mode="document", score_scale="probability", threshold=cut
    ).postprocess_nodes(retrieve(index, query), query_str=query)
    assert ids(kept) == ids(got)[:3]
    two = GroguRerank(
        top_n=2, model=llm, max_new_tokens=TOKENS, mode="document", score_scale="probability", threshold=cut
    ).postprocess_nodes(retrieve(index, query), query_str=query)
    assert ids(two) == ids(got)[:2]

    context = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, score_scale="probability")
    out = context.postprocess_nodes(retrieve(index, query), query_str=query)
    shared = out[0].node.metadata["grogu"]["context"]
    assert shared["probability"] == probability("key_entropy", shared["score"]) and 0.0 < shared["probability"] <= 1.0

    for bad in (-1.5, 1.01, -0.2):
        with pytest.raises(ValueError, match=r"threshold \(score_scale='probability'\)"):
            GroguRerank(model=llm, mode="document", score_scale="probability", threshold=bad)
    for bad in ("prob", None, 1):
        with pytest.raises(ValueError, match="score_scale"):
            GroguRerank(model=llm, score_scale=bad)


def test_batch_size_and_engine_config(index, llm, questions, restore_engine):
    engine, query = restore_engine, questions[1]
    reference = GroguRerank(top_n=None, model=llm, max_new_tokens=TOKENS, mode="document").postprocess_nodes(
        retrieve(index, query), query_str=query
    )
    small = GroguRerank(top_n=None, model=llm, max_new_tokens=TOKENS, mode="document", batch_size=2)
    assert small.scorer.target is engine and engine.config.max_batch_size == 2 and small.batch_size == 2
    got = small.postprocess_nodes(retrieve(index, query), query_str=query)
    assert ids(got) == ids(reference)
    assert [n.score for n in got] == pytest.approx([n.score for n in reference], abs=1e-4)

    GroguRerank(model=llm, engine_config=grogu.EngineConfig(max_batch_tokens=1024, max_batch_size=4))
    assert (engine.config.max_batch_size, engine.config.max_batch_tokens) == (4, 1024)
    for bad in (0, -3, 1.5, True, "2"):
        with pytest.raises(ValueError, match="batch_size"):
            GroguRerank(model=llm, batch_size=bad)
    with pytest.raises(ValueError, match="not both"):
        GroguRerank(model=llm, batch_size=2, engine_config=grogu.EngineConfig())
    with pytest.raises(TypeError, match="EngineConfig"):
        GroguRerank(model=llm, engine_config={"max_batch_size": 2})
    with pytest.raises(ValueError, match="the grogu service chooses its own"):
        GroguRerank(model="http://127.0.0.1:9", batch_size=2)
    assert (engine.config.max_batch_size, engine.config.max_batch_tokens) == (4, 1024)  # failed settings change nothing
