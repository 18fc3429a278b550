"""GroguRerank in real LlamaIndex pipelines (index -> retriever -> GroguRerank -> synthesizer), checked
against grogu.UtilityScorer computed directly on the same nodes."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import Any

import grogu_research.testing
import pytest
from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode
from llama_index.postprocessor.grogu import GroguRerank
from llama_index.postprocessor.grogu.utils import resolve_engine

import grogu

K = 5
TOKENS = 8


def texts(nodes):
    return [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]


def retrieve(index, query):
    return index.as_retriever(similarity_top_k=K).retrieve(query)


@pytest.fixture(scope="module")
def scorer(llm):
    """The reference: grogu's own scorer on the LLM's model, as a user would call it directly."""
    return grogu.UtilityScorer((llm._model, llm._tokenizer), max_new_tokens=TOKENS)


def test_pipeline_order_metadata_and_shared_model(index, llm, scorer, questions):
    query = questions[0]
    retrieved = retrieve(index, query)
    expected = scorer.rerank(query, texts(retrieved), top_n=3, mode="document")

    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    assert rerank.scorer.target is scorer.target and rerank.scorer.target.model is llm._model  # no second copy
    assert rerank.model == "tiny-llama"
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank]
    )
    response = engine.query(query)

    got = response.source_nodes
    assert [n.node.node_id for n in got] == [retrieved[r.index].node.node_id for r in expected]
    assert [n.score for n in got] == pytest.approx([r.score for r in expected], abs=1e-6)
    assert all(a.score >= b.score for a, b in zip(got, got[1:]))
    for n, r in zip(got, expected):
        meta = n.node.metadata
        assert meta["retrieval_score"] == pytest.approx(retrieved[r.index].score)
        g = meta["grogu"]
        assert g["score"] == pytest.approx(r.score, abs=1e-6)
        assert g["metric"] == "key_entropy" and g["model"] == "tiny-llama"
        assert g["answer"] == r.answer and g["n_key_tokens"] == r.n_key_tokens >= 1
        assert g["retrieval_rank"] == r.index
        # the scores are not part of what the LLM or the embedder reads
        for mode in (MetadataMode.LLM, MetadataMode.EMBED):
            content = n.node.get_content(metadata_mode=mode)
            assert "grogu" not in content and "retrieval_score" not in content
    # the synthesizer really answered with the same LLM from the reranked nodes
    assert isinstance(response.response, str) and response.response.strip()


def test_top_n_and_threshold(index, llm, scorer, questions):
    query = questions[1]
    retrieved = retrieve(index, query)
    scores = sorted((r.score for r in scorer.score(query, texts(retrieved))), reverse=True)
    threshold = (scores[2] + scores[3]) / 2  # three nodes above it
    # the default keeps 3 (grogu.rerank.scorer.DEFAULT_TOP_N, as in LangChain); top_n=None keeps every node
    assert GroguRerank(model=llm, max_new_tokens=TOKENS, mode="document").top_n == 3
    all_nodes = GroguRerank(model=llm, top_n=None, max_new_tokens=TOKENS, mode="document").postprocess_nodes(
        retrieve(index, query), query_str=query
    )
    assert len(all_nodes) == K and [n.score for n in all_nodes] == pytest.approx(scores, abs=1e-6)

    kept = GroguRerank(
        model=llm, top_n=None, threshold=threshold, max_new_tokens=TOKENS, mode="document"
    ).postprocess_nodes(retrieve(index, query), query_str=query)
    assert [n.score for n in kept] == pytest.approx(scores[:3], abs=1e-6)
    assert all(n.score >= threshold for n in kept)

    both = GroguRerank(
        top_n=2, model=llm, threshold=threshold, max_new_tokens=TOKENS, mode="document"
    ).postprocess_nodes(retrieve(index, query), query_str=query)
    assert [n.node.node_id for n in both] == [n.node.node_id for n in kept[:2]]

    none = GroguRerank(model=llm, threshold=scores[0] + 1.0, max_new_tokens=TOKENS, mode="document").postprocess_nodes(
        retrieve(index, query), query_str=query
    )
    assert none == []


def test_metric_is_selectable(index, llm, questions):
    query = questions[6]
    retrieved = retrieve(index, query)
    expected = grogu.UtilityScorer((llm._model, llm._tokenizer), metric="key_ppl", max_new_tokens=TOKENS).rerank(
        query, texts(retrieved), top_n=3, mode="document"
    )  # GroguRerank keeps 3 by default
    out = GroguRerank(model=llm, metric="key_ppl", max_new_tokens=TOKENS, mode="document").postprocess_nodes(
        retrieve(index, query), query_str=query
    )
    assert [n.node.node_id for n in out] == [retrieved[r.index].node.node_id for r in expected]
    assert [n.score for n in out] == pytest.approx([r.score for r in expected], abs=1e-6)
    assert out[0].node.metadata["grogu"]["metric"] == "key_ppl" and all(n.score < 0 for n in out)


def test_orders_family_picks_the_best_order_of_the_top_n(index, llm, scorer, questions):
    """The context mode's ``orders`` family: the retrieved top-n as given, reversed and in
    LongContextReorder's order; the order with the best context-level GROGU is kept."""
    query = questions[3]
    retrieved = retrieve(index, query)
    docs = texts(retrieved)
    layouts = list(grogu.standard_layouts(list(range(3))).items())
    choice = scorer.best_layout(query, [[docs[i] for i in o] for _, o in layouts])
    orders = GroguRerank(
        top_n=3,
        model=llm,
        max_new_tokens=TOKENS,
        family="orders",
        rule="confidence",
        context_metric="key_entropy",
        gate="always",
        margin=0.0,
        supported=False,
        qa_template=None,
    )
    out = orders.postprocess_nodes(retrieve(index, query), query_str=query)
    order = layouts[choice.best][1]
    assert [n.node.node_id for n in out] == [retrieved[i].node.node_id for i in order]
    assert [n.score for n in out] == pytest.approx([retrieved[i].score for i in order])  # retrieval scores kept
    context = out[0].node.metadata["grogu"]["context"]
    assert context["score"] == pytest.approx(choice.scores[choice.best].score, abs=1e-5)
    assert context["nodes"] == list(order)


def test_async_equals_sync_and_concurrent_queries_share_batches(index, llm, questions):
    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="document")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank]
    )
    qs = questions[4:8]
    sync = [engine.query(q) for q in qs]

    async def run_all():
        return await asyncio.gather(*(engine.aquery(q) for q in qs))

    concurrent = asyncio.run(run_all())
    for s, a in zip(sync, concurrent):
        assert [n.node.node_id for n in a.source_nodes] == [n.node.node_id for n in s.source_nodes]
        assert [n.score for n in a.source_nodes] == pytest.approx([n.score for n in s.source_nodes], abs=1e-5)
        assert a.response == s.response

    # 4 concurrent reranks share engine batches, and the event loop keeps running meanwhile
    node_lists = [retrieve(index, q) for q in qs]
    before = rerank.scorer.async_batches_run

    async def concurrent_rerank():
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0.001)

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(rerank.apostprocess_nodes(n, query_str=q) for n, q in zip(node_lists, qs)))
        done = True
        await tick_task
        return results, ticks

    results, ticks = asyncio.run(concurrent_rerank())
    assert ticks > 1
    assert rerank.scorer.async_batches_run - before < len(qs)  # shared batches (usually exactly one)
    for r, s in zip(results, sync):
        assert [n.node.node_id for n in r] == [n.node.node_id for n in s.source_nodes]


def test_passthrough_keeps_every_node_in_order(index, llm, tokenizer, questions, caplog):
    """A real scoring failure: the target LLM's 256-token window cannot hold this long query."""
    small = grogu.Engine(
        grogu_research.testing.tiny_model("llama", max_position_embeddings=256), tokenizer, device="cpu"
    )
    query = questions[0] + " Please explain in detail. " * 60
    retrieved = retrieve(index, query)
    before = [(n.node.node_id, n.score) for n in retrieved]

    with pytest.raises(ValueError, match="context window"):
        GroguRerank(top_n=2, model=small, max_new_tokens=TOKENS, mode="document").postprocess_nodes(
            retrieve(index, query), query_str=query
        )

    rerank = GroguRerank(top_n=2, model=small, on_error="passthrough", max_new_tokens=TOKENS, mode="document")
    with caplog.at_level(logging.WARNING, logger="llama_index.postprocessor.grogu.base"):
        out = rerank.postprocess_nodes(retrieved, query_str=query)
    assert [(n.node.node_id, n.score) for n in out] == before
    assert all("context window" in n.node.metadata["grogu"]["error"] for n in out)
    assert any("passing 5 nodes through" in r.getMessage() for r in caplog.records)

    async_out = asyncio.run(rerank.apostprocess_nodes(retrieve(index, query), query_str=query))
    assert [(n.node.node_id, n.score) for n in async_out] == before

    # in a full pipeline the synthesizer still gets every retrieved node
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank]
    )
    response = engine.query(query)
    assert [n.node.node_id for n in response.source_nodes] == [i for i, _ in before]


class _Collect(BaseEventHandler):
    events: list = []

    def handle(self, event, **kwargs):
        if isinstance(event, (ReRankStartEvent, ReRankEndEvent)):
            self.events.append(event)


def test_instrumentation_and_callback_events(index, llm, questions, attach):
    collect = attach(_Collect(events=[]))
    debug = LlamaDebugHandler()
    rerank = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, mode="document")
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K),
        llm=llm,
        node_postprocessors=[rerank],
        callback_manager=CallbackManager([debug]),
    )
    response = engine.query(questions[5])
    start, end = collect.events
    assert isinstance(start, ReRankStartEvent) and isinstance(end, ReRankEndEvent)
    assert start.top_n == 2 and start.model_name == "tiny-llama" and len(start.nodes) == K
    assert start.query.query_str == questions[5]
    assert [n.node.node_id for n in end.nodes] == [n.node.node_id for n in response.source_nodes]
    pairs = debug.get_event_pairs(CBEventType.RERANKING)
    assert len(pairs) == 1 and len(pairs[0][1].payload["nodes"]) == 2


def test_bad_input_gives_clear_errors(index, llm, questions):
    rerank = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, mode="document")
    nodes = retrieve(index, questions[0])
    with pytest.raises(ValueError, match="needs the query"):
        rerank.postprocess_nodes(nodes)
    with pytest.raises(ValueError, match="query is empty"):
        rerank.postprocess_nodes(nodes, query_str="   ")
    with pytest.raises(TypeError, match="node 1 is a TextNode"):
        rerank.postprocess_nodes([nodes[0], TextNode(text="x")], query_str="q")
    assert rerank.postprocess_nodes([], query_bundle=QueryBundle("q")) == []
    for kwargs, match in [
        ({"top_n": 0}, "top_n"),
        ({"metric": "bleu"}, "metric"),
        ({"on_error": "ignore"}, "on_error"),
        ({"threshold": "high"}, "threshold"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"score_scale": "prob"}, "score_scale"),
        ({"answer_style": "terse"}, "answer_style"),
    ]:
        with pytest.raises(ValueError, match=match):
            GroguRerank(model=llm, **kwargs)
    with pytest.raises(TypeError, match="does not expose token probabilities"):
        GroguRerank(model=MockLLM(), mode="document")
    with pytest.raises(TypeError, match="model must be"):
        GroguRerank(model=3.5, mode="document")
    with pytest.raises(ValueError, match="device/dtype"):
        GroguRerank(model=llm, device="cpu", mode="document")


def test_model_forms_share_one_engine(llm):
    engine = resolve_engine(llm)
    assert resolve_engine((llm._model, llm._tokenizer)) is engine
    assert GroguRerank(model=engine, mode="document").scorer.target is engine
    assert GroguRerank(model=grogu.UtilityScorer(engine), mode="document").scorer.target is engine
    assert GroguRerank(model=engine, metric="ppl", mode="document").to_dict()["metric"] == "ppl"


def test_settings_are_pydantic_fields_declared_once(llm):
    """Each setting is one pydantic field with a description: the signature (help(), IDEs) lists the
    fields and nothing else, and the built reranker holds what it resolved."""
    fields = GroguRerank.model_fields
    assert set(inspect.signature(GroguRerank).parameters) == set(fields)
    for name in ("model", "top_n", "threshold", "metric", "settings", "qa_template", "template", "max_new_tokens"):
        assert fields[name].description, name
    assert all(f.description for name, f in fields.items() if name != "callback_manager")
    assert fields["model"].annotation is Any and fields["qa_template"].annotation is Any
    rerank = GroguRerank(model=llm, mode="document", top_n=2)
    assert rerank.model == "tiny-llama" and rerank.metric == "key_entropy" and rerank.max_new_tokens == 64
    assert rerank.settings == grogu.ModeSettings(mode="document") and rerank.mode == "document"
    dumped = json.loads(rerank.to_json())
    assert dumped["model"] == "tiny-llama" and dumped["settings"]["mode"] == "document" and "qa_template" not in dumped


@pytest.mark.parametrize("removed", ["layout", "famly", "sink", "raise_errors"])
def test_unknown_arguments_are_validation_errors(llm, removed):
    """An argument that is no field nor a grogu.ModeSettings setting (``layout=`` was never released) is refused."""
    with pytest.raises(ValidationError, match=rf"{removed}\n\s+Extra inputs are not permitted"):
        GroguRerank(model=llm, **{removed: "after"})
