"""GroguRerank.tune: grogu.tune run with the reranker's own LLM, QA prompt and top_n, on 4 labelled SQuAD
questions with the tiny real HuggingFaceLLM. The settings fit this reranker (no warning when it uses them), and
grogu.tune given the same LlamaIndex LLM and prompt (through LlamaIndex's framework adapter) is the same set-up."""

from __future__ import annotations

import json
import warnings

import pytest
from llama_index.core.prompts.default_prompt_selectors import DEFAULT_TEXT_QA_PROMPT_SEL
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.postprocessor.grogu import GroguRerank, template_from_llama_index

import grogu
from grogu.rerank.tuned import TunedSettingsWarning, load_tuned, model_fingerprint, prompt_hash


def _examples(paragraphs) -> list[dict]:
    """4 questions, each with its own paragraph second among 4 (cut to 40 words)."""
    cut = [" ".join(p["text"].split()[:40]) for p in paragraphs[:6]]
    return [
        {
            "question": paragraphs[i]["question"],
            "answers": paragraphs[i]["answers"],
            "documents": [cut[(i + 1) % 6], cut[i], cut[(i + 2) % 6], cut[(i + 3) % 6]],
        }
        for i in range(4)
    ]


def test_tune_fits_the_rerankers_own_llm_prompt_and_top_n(llm, paragraphs, tmp_path):
    examples, out = _examples(paragraphs), tmp_path / "tuned"
    reranker = GroguRerank(model=llm, top_n=3)  # scores with the default synthesizer's QA prompt for llm
    tuned = reranker.tune(examples, out=str(out), folds=2, progress=False)
    # fitted to what the reranker scores with: its prompt (as its LLM reads it), model and budget
    want = template_from_llama_index(DEFAULT_TEXT_QA_PROMPT_SEL, llm)
    assert tuned.prompt_hash == prompt_hash(reranker.scorer.template) == prompt_hash(want)
    assert tuned.model == reranker.scorer.model_name and tuned.fingerprint == model_fingerprint(reranker.scorer.target)
    assert (tuned.top_n, tuned.max_new_tokens, tuned.evidence["n"]) == (3, llm.max_new_tokens, 4)
    assert tuned.decision in ("tuned", "default", "keep") and tuned.path == str(out / "settings.json")
    records = (out / "records.jsonl").read_text()
    assert [json.loads(line)["top_n"] for line in records.splitlines()] == [3, 3, 3, 3]
    saved = load_tuned(out / "settings.json")
    assert (saved.settings, saved.prompt_hash, saved.model) == (tuned.settings, tuned.prompt_hash, tuned.model)
    # the result used by the same set-up: no warning
    nodes = [NodeWithScore(node=TextNode(text=t), score=1.0 - i / 10) for i, t in enumerate(examples[0]["documents"])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedSettingsWarning)
        again = GroguRerank(model=llm, top_n=3, settings=tuned)
        assert len(again.postprocess_nodes(nodes, query_str=examples[0]["question"])) == 3
    # grogu.tune with the LlamaIndex LLM and prompt themselves: the same set-up, so nothing is answered again
    same = grogu.tune(
        examples, model=llm, qa_prompt=DEFAULT_TEXT_QA_PROMPT_SEL, top_n=3, out=str(out), folds=2, progress=False
    )
    assert (out / "records.jsonl").read_text() == records
    assert (same.settings, same.decision, same.prompt_hash, same.model) == (
        tuned.settings,
        tuned.decision,
        tuned.prompt_hash,
        tuned.model,
    )


def test_tune_needs_top_n_and_a_model_it_can_run(llm):
    with pytest.raises(ValueError, match="tune needs top_n"):
        GroguRerank(model=llm, top_n=None).tune([])
    # a grogu service: nothing is sent to it (no service listens here)
    service = GroguRerank(model="http://127.0.0.1:9", top_n=3, mode="document")
    with pytest.raises(ValueError, match="GroguRerank scores through a grogu service"):
        service.tune([])
