"""GroguRetriever / GroguCompressor modes in real LCEL chains, checked against grogu's plain logic on
scores computed directly with grogu.UtilityScorer; scoring with the chain's own prompt."""

from __future__ import annotations

import math

import pytest
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_grogu import GroguCompressor, GroguRetriever, template_from_langchain

import grogu
from grogu.core.prompts import PromptBuilder
from grogu.rerank import selection

N = 8
K = 5
PROMPT = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")


def format_docs(docs) -> str:
    return "\n\n".join(d.page_content for d in docs)


@pytest.fixture(scope="module")
def base(vectorstore):
    return vectorstore.as_retriever(search_kwargs={"k": K})


def test_chain_prompt_renders_exactly_what_the_llm_reads(llm, tokenizer, documents):
    template = template_from_langchain(PROMPT, llm)
    builder = PromptBuilder(tokenizer, 8192, N, template)
    docs = documents[:3]
    got = builder.grounded_ids("Who?", [grogu.Document(d.page_content) for d in docs])
    text = PROMPT.format(context=format_docs(docs), question="Who?")
    assert got == tokenizer(text)["input_ids"]
    chat = ChatPromptTemplate.from_messages([("system", "Answer briefly."), ("human", "{context}\n\nQ: {question}")])
    builder = PromptBuilder(tokenizer, 8192, N, template_from_langchain(chat))
    rendered = tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": format_docs(docs) + "\n\nQ: Who?"},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert builder.grounded_ids("Who?", [grogu.Document(d.page_content) for d in docs]) == tokenizer.encode(
        rendered, add_special_tokens=False
    )


def test_context_mode_in_an_lcel_chain_answers_what_scoring_answered(base, llm, engine, paragraphs):
    scorer = grogu.UtilityScorer(engine, max_new_tokens=N, template=template_from_langchain(PROMPT, llm))
    # the swap candidates chosen by their KeyEntropy, as computed by hand below (the defaults: test_selection)
    retriever = GroguRetriever(
        base_retriever=base,
        model=llm,
        top_n=3,
        max_new_tokens=N,
        mode="context",
        qa_prompt=PROMPT,
        family="swap",
        rule="confidence",
        context_metric="key_entropy",
        margin=0.0,
        supported=False,
    )
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    for p in paragraphs[:3]:
        query = p["question"]
        base_docs = base.invoke(query)
        candidates = [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
        scored = scorer.score_contexts(query, [[base_docs[i].page_content for i in c] for c in candidates])
        best = selection.choose_context([s.score for s in scored])
        got = retriever.invoke(query)
        assert [d.id for d in got] == [base_docs[i].id for i in candidates[best]]
        info = got[0].metadata["grogu"]
        assert info["mode"] == "context" and info["context"]["score"] == pytest.approx(scored[best].score, abs=1e-5)
        assert chain.invoke(query).strip() == info["context"]["answer"].strip()


def test_fusion_and_prune_by_hand(base, llm, engine, paragraphs):
    query = paragraphs[2]["question"]
    docs = base.invoke(query)
    scorer = grogu.UtilityScorer(engine, max_new_tokens=N)
    utility = [r.score for r in scorer.score(query, [d.page_content for d in docs])]
    fused = selection.fuse(utility, [float(K - i) for i in range(K)], 0.6)
    got = GroguCompressor(model=llm, top_n=3, max_new_tokens=N, mode="fusion", weight=0.6).compress_documents(
        docs, query
    )
    assert [d.id for d in got] == [docs[i].id for i in selection.order_by(fused)[:3]]
    assert [d.metadata["grogu"]["fused_score"] for d in got] == pytest.approx(
        [fused[i] for i in selection.order_by(fused)[:3]]
    )
    none = scorer.score_context(query, []).score
    got = GroguCompressor(model=llm, top_n=None, max_new_tokens=N, mode="prune").compress_documents(docs, query)
    assert [d.id for d in got] == [docs[i].id for i in range(K) if utility[i] >= none]


def test_fusion_with_relevance_scores_from_metadata(llm, documents, engine):
    docs = [
        d.model_copy(update={"metadata": {**d.metadata, "relevance": r}})
        for d, r in zip(documents[:4], [0.2, 0.9, 0.5, 0.1])
    ]
    query = "When was it built?"
    utility = [
        r.score for r in grogu.UtilityScorer(engine, max_new_tokens=N).score(query, [d.page_content for d in docs])
    ]
    expected = selection.order_by(selection.fuse(utility, [0.2, 0.9, 0.5, 0.1], 0.3))[:2]
    got = GroguCompressor(
        model=llm, top_n=2, max_new_tokens=N, mode="fusion", weight=0.3, relevance_key="relevance"
    ).compress_documents(docs, query)
    assert [d.id for d in got] == [docs[i].id for i in expected]
    with pytest.raises(ValueError, match="relevance"):
        GroguCompressor(
            model=llm, top_n=2, max_new_tokens=N, mode="fusion", relevance_key="missing"
        ).compress_documents(docs, query)


def test_invoke_with_a_per_call_top_n(base, llm, paragraphs):
    retriever = GroguRetriever(base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document")
    assert len(retriever.invoke(paragraphs[0]["question"], top_n=1)) == 1
    assert len(retriever.invoke(paragraphs[0]["question"])) == 3
    with pytest.raises(ValueError, match="top_n"):
        retriever.invoke(paragraphs[0]["question"], top_n=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "best"},
        {"mode": "fusion", "weight": math.nan},
        {"mode": "fusion", "weight": 1.5},
        {"mode": "context", "margin": -0.1},
        {"mode": "context", "margin": math.inf},
        {"mode": "context", "threshold": -1.0},
        {"qa_prompt": PromptTemplate.from_template("{question}")},
    ],
)
def test_bad_settings_are_clear_errors(llm, kwargs):
    with pytest.raises(ValueError):
        GroguCompressor(model=llm, max_new_tokens=N, **kwargs)


def test_the_rerank_settings_are_one_grogu_settings_object(base, llm):
    named = GroguCompressor(model=llm, max_new_tokens=N, family="all", swaps=1)
    assert named.settings == grogu.ModeSettings(family="all", swaps=1) and named.mode == "context"
    given = GroguCompressor(model=llm, max_new_tokens=N, settings=grogu.ModeSettings(mode="fusion"), weight=0.3)
    assert given.settings == grogu.ModeSettings(mode="fusion", weight=0.3) and given.mode == "fusion"
    assert GroguRetriever(base_retriever=base, model=llm, max_new_tokens=N, margin=0.2).settings.margin == 0.2
    with pytest.raises(ValueError, match="famly"):  # pydantic's extra_forbidden, naming the field
        GroguCompressor(model=llm, max_new_tokens=N, famly="drop")


def test_qa_chain_returns_the_scored_answer_without_a_second_generation(base, llm, paragraphs):
    import asyncio

    # the swap candidates chosen by their KeyEntropy, as computed by hand below (the defaults: test_selection)
    retriever = GroguRetriever(
        base_retriever=base,
        model=llm,
        top_n=3,
        max_new_tokens=N,
        mode="context",
        qa_prompt=PROMPT,
        family="swap",
        rule="confidence",
        context_metric="key_entropy",
        margin=0.0,
        supported=False,
    )
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    qa = retriever.as_qa_chain()
    for p in paragraphs[3:5]:
        out = qa.invoke(p["question"])
        assert out["answer"].strip() == chain.invoke(p["question"]).strip()
        assert [d.id for d in out["documents"]] == [d.id for d in retriever.invoke(p["question"])]
    assert (
        asyncio.run(qa.ainvoke(paragraphs[3]["question"]))["answer"] == qa.invoke(paragraphs[3]["question"])["answer"]
    )
    # outside the context mode the LLM answers from the chain's prompt
    doc_mode = GroguRetriever(
        base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document", qa_prompt=PROMPT
    )
    out = doc_mode.as_qa_chain(llm).invoke(paragraphs[3]["question"])
    assert out["answer"] == (PROMPT | llm | StrOutputParser()).invoke(
        {"context": format_docs(out["documents"]), "question": paragraphs[3]["question"]}
    )
    with pytest.raises(ValueError, match="qa_prompt"):
        GroguRetriever(base_retriever=base, model=llm, top_n=3, max_new_tokens=N, mode="document").as_qa_chain(llm)
    # nothing retrieved: no scored answer, so the llm answers, or it is a clear error without one
    empty = GroguRetriever(
        base_retriever=base | (lambda docs: []), model=llm, top_n=3, max_new_tokens=N, mode="context", qa_prompt=PROMPT
    )
    out = empty.as_qa_chain(llm).invoke(paragraphs[3]["question"])
    assert out["documents"] == [] and out["answer"] == (PROMPT | llm | StrOutputParser()).invoke(
        {"context": "", "question": paragraphs[3]["question"]}
    )
    with pytest.raises(ValueError, match="no scored answer"):
        empty.as_qa_chain().invoke(paragraphs[3]["question"])
