"""GroguRetriever.tune: grogu.tune run with the retriever's own LLM, QA prompt and top_n, on 4 labelled SQuAD
questions with the tiny real LLM. The settings fit this retriever (no warning when it uses them), and
grogu.tune given the same LangChain LLM and prompt (through LangChain's framework adapter) is the same set-up."""

from __future__ import annotations

import json
import warnings

import pytest
from langchain_core.documents import Document
from langchain_core.prompts import PromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_grogu import GroguRetriever, template_from_langchain

import grogu
from grogu.rerank.tuned import TunedSettingsWarning, load_tuned, model_fingerprint, prompt_hash

N = 8  # the tiny LLM's answer budget (tests/conftest.py)
PROMPT = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")


class Fixed(BaseRetriever):
    docs: list

    def _get_relevant_documents(self, query, *, run_manager=None):
        return self.docs


def _examples(paragraphs) -> list[dict]:
    """4 questions, each with its own paragraph second among 4 (cut to 40 words)."""
    cut = [" ".join(p["text"].split()[:40]) for p in paragraphs]
    return [
        {
            "question": paragraphs[i]["question"],
            "answers": paragraphs[i]["answers"],
            "documents": [cut[(i + 1) % 6], cut[i], cut[(i + 2) % 6], cut[(i + 3) % 6]],
        }
        for i in range(4)
    ]


def test_tune_fits_the_retrievers_own_llm_prompt_and_top_n(llm, paragraphs, tmp_path):
    examples, out = _examples(paragraphs), tmp_path / "tuned"
    docs = [Document(page_content=t, id=str(j)) for j, t in enumerate(examples[0]["documents"])]
    retriever = GroguRetriever(base_retriever=Fixed(docs=docs), model=llm, qa_prompt=PROMPT, top_n=3, max_new_tokens=N)
    tuned = retriever.tune(examples, out=str(out), folds=2, progress=False)
    # fitted to what the retriever scores with: its prompt (the chain's, as its LLM reads it), model and budget
    assert (
        tuned.prompt_hash == prompt_hash(retriever.scorer.template) == prompt_hash(template_from_langchain(PROMPT, llm))
    )
    assert tuned.model == retriever.scorer.model_name and tuned.fingerprint == model_fingerprint(
        retriever.scorer.target
    )
    assert (tuned.top_n, tuned.max_new_tokens, tuned.evidence["n"]) == (3, N, 4)
    assert tuned.decision in ("tuned", "default", "keep") and tuned.path == str(out / "settings.json")
    records = (out / "records.jsonl").read_text()
    assert [json.loads(line)["top_n"] for line in records.splitlines()] == [3, 3, 3, 3]
    saved = load_tuned(out / "settings.json")
    assert (saved.settings, saved.prompt_hash, saved.model) == (tuned.settings, tuned.prompt_hash, tuned.model)
    # the result used by the same set-up: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedSettingsWarning)
        again = GroguRetriever(
            base_retriever=Fixed(docs=docs), model=llm, qa_prompt=PROMPT, top_n=3, max_new_tokens=N, settings=tuned
        )
        assert len(again.invoke(examples[0]["question"])) == 3
    # grogu.tune with the LangChain LLM and prompt themselves: the same set-up, so nothing is answered again
    same = grogu.tune(examples, model=llm, qa_prompt=PROMPT, top_n=3, out=str(out), folds=2, progress=False)
    assert (out / "records.jsonl").read_text() == records
    assert (same.settings, same.decision, same.prompt_hash, same.model) == (
        tuned.settings,
        tuned.decision,
        tuned.prompt_hash,
        tuned.model,
    )


def test_tune_needs_top_n(llm):
    with pytest.raises(ValueError, match="tune needs top_n"):
        GroguRetriever(base_retriever=Fixed(docs=[]), model=llm, qa_prompt=PROMPT, top_n=None).tune([])
