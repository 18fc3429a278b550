"""Every way in runs the one rerank pipeline: the same documents kept and the same gate verdict from
``UtilityScorer.rerank``, LlamaIndex's ``GroguRerank`` and LangChain's ``GroguCompressor``, for every size of
``top_n``, on one engine and one prompt (the tiny model, which is in doubt on every query)."""

from __future__ import annotations

import pytest

from grogu import GateVerdict, PromptTemplate, UtilityScorer
from grogu.rerank.scorer import DEFAULT_TOP_N

QUERY = "What is the capital city of Australia?"
TEXTS = [
    "Canberra is the capital city of Australia.",
    "Sydney is the largest city in Australia.",
    "Kangaroos are marsupials native to Australia.",
    "Australia's parliament sits in Parliament House.",
]
TEMPLATE = PromptTemplate(document="{text}", titled_document="{text}")
N = 6


@pytest.fixture(scope="module")
def scorer(tiny_engine):
    return UtilityScorer(tiny_engine, template=TEMPLATE, max_new_tokens=N)


def llama_index_choice(engine, top_n, **settings):
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.postprocessor.grogu import GroguRerank

    rerank = GroguRerank(model=engine, template=TEMPLATE, max_new_tokens=N, top_n=top_n, **settings)
    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 - i / 10) for i, t in enumerate(TEXTS)]
    kept = rerank.postprocess_nodes(nodes, query_str=QUERY)
    meta = [n.node.metadata["grogu"] for n in kept]
    return [m["retrieval_rank"] for m in meta], meta[0]["context"].get("gate") if meta else None


def langchain_choice(engine, top_n, **settings):
    from langchain_core.documents import Document
    from langchain_grogu import GroguCompressor

    compressor = GroguCompressor(model=engine, template=TEMPLATE, max_new_tokens=N, top_n=top_n, **settings)
    kept = compressor.compress_documents([Document(t) for t in TEXTS], QUERY)
    meta = [d.metadata["grogu"] for d in kept]
    return [m["index"] for m in meta], meta[0]["context"].get("gate") if meta else None


@pytest.mark.parametrize("top_n", [None, 1, 2, 10])
@pytest.mark.parametrize("gate", ["doubt", "always"])
def test_every_front_end_keeps_the_same_documents_and_verdict(scorer, tiny_engine, top_n, gate):
    want = scorer.rerank(QUERY, TEXTS, top_n=top_n, gate=gate)
    indices, verdict = [r.index for r in want], want[0].gate
    assert isinstance(verdict, GateVerdict) and all(r.gate == verdict for r in want)
    # the sizes, by hand: None and 10 keep all four, 1 and 2 keep that many
    assert len(indices) == (len(TEXTS) if top_n in (None, 10) else top_n)
    # candidates answered: the retriever's context alone when calm; in doubt the family (top_n None or
    # above the documents: as given and reversed; 1: the first and the next two alone; 2: six)
    family = {None: 2, 10: 2, 1: 3, 2: 6}[top_n]
    assert verdict.candidates == (family if verdict.in_doubt or gate == "always" else 1)
    for got, meta in (
        llama_index_choice(tiny_engine, top_n, gate=gate),
        langchain_choice(tiny_engine, top_n, gate=gate),
    ):
        assert got == indices
        assert meta == verdict.as_dict()


def test_both_integrations_default_to_the_same_top_n(tiny_engine):
    from langchain_grogu import GroguCompressor
    from llama_index.postprocessor.grogu import GroguRerank

    assert DEFAULT_TOP_N == 3
    assert GroguRerank(model=tiny_engine).top_n == GroguCompressor(model=tiny_engine).top_n == DEFAULT_TOP_N
    # the answer budget where none is given: 64, or 16 in the short answer style, everywhere
    assert GroguRerank(model=tiny_engine, qa_template=None).max_new_tokens == 64
    assert GroguCompressor(model=tiny_engine).max_new_tokens == 64
    assert GroguCompressor(model=tiny_engine, answer_style="short").max_new_tokens == 16
    assert GroguRerank(model=tiny_engine, qa_template=None, answer_style="short").max_new_tokens == 16
    assert UtilityScorer(tiny_engine, answer_style="short").max_new_tokens == 16
