"""GroguRerank's modes in real LlamaIndex query engines, each checked against grogu's plain logic
(grogu.rerank.selection) on scores computed directly with grogu.UtilityScorer; and scoring with the pipeline's
own QA prompt, whose answer is the answer the synthesizer gives."""

from __future__ import annotations

import math

import pytest
from llama_index.core import get_response_synthesizer
from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode
from llama_index.postprocessor.grogu import GroguRerank, template_from_llama_index

import grogu
from grogu.core.prompts import PromptBuilder
from grogu.rerank import selection

K = 5
TOKENS = 8


def texts(nodes):
    return [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in nodes]


@pytest.fixture(scope="module")
def synthesizer(llm):
    return get_response_synthesizer(llm=llm, response_mode="compact")


@pytest.fixture(scope="module")
def pipe_scorer(llm, synthesizer):
    """grogu's scorer with the synthesizer's own QA prompt, as a user would call it directly."""
    return grogu.UtilityScorer(
        (llm._model, llm._tokenizer), max_new_tokens=TOKENS, template=template_from_llama_index(synthesizer, llm)
    )


def query_engine(index, llm, rerank):
    return RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank], response_mode="compact"
    )


def test_qa_template_renders_exactly_the_prompt_the_llm_reads(llm, synthesizer, index, questions):
    query = questions[0]
    nodes = index.as_retriever(similarity_top_k=3).retrieve(query)
    template = template_from_llama_index(synthesizer, llm)
    builder = PromptBuilder(llm._tokenizer, 8192, TOKENS, template)
    got = builder.grounded_ids(query, [grogu.Document(t) for t in texts(nodes)])
    prompt = synthesizer.get_prompts()["text_qa_template"].select(llm)
    messages = prompt.format_messages(context_str="\n\n".join(t.strip() for t in texts(nodes)), query_str=query)
    expected = llm._tokenizer(llm.messages_to_prompt(messages))["input_ids"]
    assert got == expected


def test_scored_elsewhere_the_prompt_is_still_the_one_the_pipelines_llm_reads(llm, synthesizer, index):
    """Scored on the service, a server or a model by name (no LLM object), grogu renders the QA prompt
    for the synthesizer's own LLM: its chat version here, and its answer budget, so that the answer
    scored is the synthesizer's and GroguSynthesizer reuses it."""
    from llama_index.postprocessor.grogu.options import scoring_prompt

    own = template_from_llama_index(synthesizer, llm)
    assert template_from_llama_index(synthesizer) == own
    engine = RetrieverQueryEngine.from_args(index.as_retriever(), llm=llm, response_synthesizer=synthesizer)
    assert template_from_llama_index(engine) == own
    completion = synthesizer.get_prompts()["text_qa_template"].select(None)  # what a reader-less render gave
    assert template_from_llama_index(completion) != own
    assert scoring_prompt(synthesizer, None, "context", None, None) == (own, llm.max_new_tokens)


def test_context_mode_answer_is_the_synthesizers_answer(index, llm, synthesizer, pipe_scorer, questions):
    for query in questions[:3]:
        retrieved = index.as_retriever(similarity_top_k=K).retrieve(query)
        docs = texts(retrieved)
        # by hand: the retriever's top-3, and its last node swapped for the 4th and the 5th
        candidates = [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
        scored = pipe_scorer.score_contexts(query, [[docs[i] for i in c] for c in candidates])
        best = max(range(3), key=lambda i: (scored[i].score, -i))
        best = best if scored[best].score > scored[0].score else 0

        rerank = GroguRerank(
            top_n=3,
            model=llm,
            max_new_tokens=TOKENS,
            mode="context",
            qa_template=synthesizer,
            family="swap",
            rule="confidence",
            context_metric="key_entropy",
            margin=0.0,
            supported=False,
        )
        response = query_engine(index, llm, rerank).query(query)
        got = response.source_nodes
        assert [n.node.node_id for n in got] == [retrieved[i].node.node_id for i in candidates[best]]
        assert [n.score for n in got] == pytest.approx([retrieved[i].score for i in candidates[best]])
        meta = got[0].node.metadata["grogu"]
        assert meta["mode"] == "context" and meta["context"]["score"] == pytest.approx(scored[best].score, abs=1e-5)
        # the answer generated while scoring is the answer the pipeline gave
        assert meta["context"]["answer"].strip() == str(response).strip()
        assert "grogu" not in got[0].node.get_content(metadata_mode=MetadataMode.LLM)


def test_fusion_mode_by_hand(index, llm, questions):
    query = questions[1]
    retrieved = index.as_retriever(similarity_top_k=K).retrieve(query)
    utility = [
        r.score
        for r in grogu.UtilityScorer((llm._model, llm._tokenizer), max_new_tokens=TOKENS).score(query, texts(retrieved))
    ]
    fused = selection.fuse(utility, [n.score for n in retrieved], 0.4)
    expected = selection.order_by(fused)[:3]
    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=TOKENS, mode="fusion", weight=0.4)
    got = query_engine(index, llm, rerank).query(query).source_nodes
    assert [n.node.node_id for n in got] == [retrieved[i].node.node_id for i in expected]
    assert [n.score for n in got] == pytest.approx([fused[i] for i in expected])
    assert [n.node.metadata["grogu"]["score"] for n in got] == pytest.approx([utility[i] for i in expected], abs=1e-5)


def test_prune_mode_by_hand(index, llm, questions):
    query = questions[2]
    retrieved = index.as_retriever(similarity_top_k=K).retrieve(query)
    scorer = grogu.UtilityScorer((llm._model, llm._tokenizer), max_new_tokens=TOKENS)
    utility = [r.score for r in scorer.score(query, texts(retrieved))]
    none = scorer.score_context(query, []).score
    expected = [i for i in range(K) if utility[i] >= none]
    rerank = GroguRerank(model=llm, max_new_tokens=TOKENS, mode="prune")
    got = rerank.postprocess_nodes([NodeWithScore(node=n.node, score=n.score) for n in retrieved], query_str=query)
    assert [n.node.node_id for n in got] == [retrieved[i].node.node_id for i in expected]


def test_default_is_the_context_mode_on_the_default_synthesizers_prompt(index, llm, synthesizer, questions):
    from llama_index.postprocessor.grogu import GroguSynthesizer

    query = questions[4]
    default = GroguRerank(top_n=3, model=llm)
    explicit = GroguRerank(
        top_n=3, model=llm, mode="context", qa_template=synthesizer, max_new_tokens=llm.max_new_tokens
    )
    assert default.mode == "context" and default.max_new_tokens == llm.max_new_tokens
    retrieved = index.as_retriever(similarity_top_k=K).retrieve(query)
    a = default.postprocess_nodes([NodeWithScore(node=n.node, score=n.score) for n in retrieved], query_str=query)
    b = explicit.postprocess_nodes([NodeWithScore(node=n.node, score=n.score) for n in retrieved], query_str=query)
    assert [n.node.node_id for n in a] == [n.node.node_id for n in b]
    assert a[0].node.metadata["grogu"]["context"] == b[0].node.metadata["grogu"]["context"]
    # so a default pipeline reuses the answer
    reusing = GroguSynthesizer(get_response_synthesizer(llm=llm))
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[default], response_synthesizer=reusing
    )
    engine.query(query)
    assert reusing.reused == 1


def test_nodes_without_scores_keep_their_order_as_the_retrieval_order(llm):
    nodes = [
        NodeWithScore(node=TextNode(text=t, id_=str(i)), score=None)
        for i, t in enumerate(
            [
                "Paris is the capital of France.",
                "Berlin is in Germany.",
                "The Seine flows through Paris.",
                "Rome is in Italy.",
            ]
        )
    ]
    rerank = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, mode="context", swaps=0)
    got = rerank.postprocess_nodes(nodes, query_str="What is the capital of France?")
    assert [n.node.node_id for n in got] == ["0", "1"]  # one candidate: the first two as given


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "best"}, "mode"),
        ({"mode": "fusion", "weight": math.nan}, "weight"),
        ({"mode": "context", "margin": -1.0}, "margin"),
        ({"mode": "context", "threshold": -1.0}, "threshold"),
        ({"mode": "context", "family": "best"}, "family"),
    ],
)
def test_bad_mode_settings_are_clear_errors(llm, kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroguRerank(model=llm, max_new_tokens=TOKENS, **kwargs)


def test_qa_template_errors(llm):
    with pytest.raises(TypeError, match="text_qa_template"):
        template_from_llama_index(object(), llm)
    from llama_index.core.prompts import PromptTemplate

    with pytest.raises(ValueError, match="context_str"):
        template_from_llama_index(PromptTemplate("Answer {query_str}"), llm)


def test_grogu_synthesizer_reuses_the_scored_answer(index, llm, synthesizer, questions):
    from llama_index.postprocessor.grogu import GroguSynthesizer

    rerank = GroguRerank(top_n=3, model=llm, max_new_tokens=llm.max_new_tokens, mode="context", qa_template=synthesizer)
    reusing = GroguSynthesizer(synthesizer)
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank], response_synthesizer=reusing
    )
    plain = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[rerank], response_synthesizer=synthesizer
    )
    for query in questions[3:6]:
        assert str(engine.query(query)).strip() == str(plain.query(query)).strip()
    assert reusing.reused == 3
    # nodes it did not choose (no context metadata): generated as usual
    nodes = index.as_retriever(similarity_top_k=2).retrieve(questions[6])
    for n in nodes:
        n.node.metadata.pop("grogu", None)
    assert (
        str(reusing.synthesize(questions[6], nodes)).strip() == str(synthesizer.synthesize(questions[6], nodes)).strip()
    )
    assert reusing.reused == 3
    # a rerank scored with grogu's own prompt: its answer is not the synthesizer's, so it is not reused
    own = GroguRerank(top_n=3, model=llm, max_new_tokens=llm.max_new_tokens, mode="context", qa_template=None)
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=K), llm=llm, node_postprocessors=[own], response_synthesizer=reusing
    )
    engine.query(questions[7])
    assert reusing.reused == 3


def test_the_rerank_settings_are_one_grogu_settings_object(llm):
    settings = grogu.ModeSettings(family="drop", margin=0.1)
    given = GroguRerank(model=llm, max_new_tokens=TOKENS, settings=settings)
    named = GroguRerank(model=llm, max_new_tokens=TOKENS, family="drop", margin=0.1)
    assert given.settings == named.settings == settings and given.mode == "context"
    # a setting given by name replaces the settings' value; any grogu.ModeSettings setting is taken by name
    assert GroguRerank(model=llm, max_new_tokens=TOKENS, settings=settings, swaps=3).settings == grogu.ModeSettings(
        family="drop", margin=0.1, swaps=3
    )
    assert GroguRerank(model=llm, max_new_tokens=TOKENS, settings=grogu.ModeSettings(mode="fusion")).mode == "fusion"
    with pytest.raises(ValidationError, match="famly"):
        GroguRerank(model=llm, max_new_tokens=TOKENS, famly="drop")
    with pytest.raises(ValueError, match="swaps"):
        GroguRerank(model=llm, max_new_tokens=TOKENS, settings=settings, swaps=-1)
    # the settings reach the scorer: the orders family's choice equals the scorer's own
    texts = ["Paris is the capital of France.", "Berlin is in Germany.", "The Seine flows through Paris."]
    nodes = [NodeWithScore(node=TextNode(text=t, id_=str(i)), score=1.0 - i / 10) for i, t in enumerate(texts)]
    for named in (
        {"family": "orders"},
        {"family": "swap_orders", "rule": "combined", "confidence_weight": 0.25},
        {"family": "swap_reversed", "rule": "agreement", "supported": False},
    ):
        rerank = GroguRerank(top_n=2, model=llm, max_new_tokens=TOKENS, qa_template=None, **named)
        got = rerank.postprocess_nodes(nodes, query_str="What is the capital of France?")
        want = rerank.scorer.rerank(
            "What is the capital of France?",
            texts,
            top_n=2,
            relevance=[n.score for n in nodes],
            settings=grogu.ModeSettings(**named),
        )
        assert [n.node.node_id for n in got] == [str(r.index) for r in want]
