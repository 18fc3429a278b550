"""The prompt grogu scores through LangChain is the one the chain's LLM reads: a chat prompt for a model
given by name goes through the model's chat template; without ``qa_prompt`` grogu says which prompt it
scores instead."""

from __future__ import annotations

import warnings

import pytest
from grogu_research import testing
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_grogu import GroguCompressor, GroguRetriever

import grogu

SYSTEM = "Answer the question using only the documents."
PROMPT = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", "{context}\n\nQuestion: {question}")])
QUERY = "Who designed the bridge?"
NOTHING = RunnableLambda(lambda q: [])  # a base retriever (these tests retrieve nothing)
DOCS = ["The bridge was designed by Joseph Strauss.", "It opened in 1937."]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """The tiny model saved to a folder: a model given by name (a path), as the README's example gives one."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return testing.save_tiny_model(str(tmp_path_factory.mktemp("named") / "tiny"))


def test_a_chat_prompt_for_a_model_by_name_goes_through_its_chat_template(model_path, tokenizer):
    retriever = GroguRetriever(base_retriever=NOTHING, model=model_path, qa_prompt=PROMPT, max_new_tokens=4)
    scorer = retriever._scorer
    assert scorer.template.chat and scorer.template.system == SYSTEM
    # what ChatHuggingFace sends the model: the chain's messages through the tokenizer's chat template
    messages = PROMPT.invoke({"context": "\n\n".join(DOCS), "question": QUERY}).to_messages()
    roles = {"system": "system", "human": "user"}
    text = tokenizer.apply_chat_template(
        [{"role": roles[m.type], "content": m.content} for m in messages], tokenize=False, add_generation_prompt=True
    )
    docs = [grogu.Document(d) for d in DOCS]
    assert scorer.prompts.grounded_ids(QUERY, docs) == tokenizer(text, add_special_tokens=False).input_ids


def test_without_qa_prompt_a_warning_names_the_prompt_scored(llm):
    for cls, extra in ((GroguRetriever, {"base_retriever": NOTHING}), (GroguCompressor, {})):
        with pytest.warns(UserWarning, match="without qa_prompt scores the documents with LlamaIndex's QA prompt"):
            scoring = cls(model=llm, top_n=3, **extra)
        assert scoring.prompt == "rag_qa"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the measured form says nothing
            assert cls(model=llm, top_n=3, qa_prompt=PROMPT, **extra).prompt == "qa_prompt"
