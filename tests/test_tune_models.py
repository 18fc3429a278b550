"""grogu tune on the packaged SmolLM2, offline, in the exact forms the README shows (on examples/tune): the command line, then
``grogu.tune`` with a LangChain ``ChatHuggingFace`` and ``ChatPromptTemplate`` (the same set-up, so it resumes
from the command's records), then one settings file loaded by every front end with the same result."""

from __future__ import annotations

import json
import os
import warnings

import pytest

import grogu
from grogu.apps.cli import main
from grogu.apps.tune.replay import replay
from grogu.core.prompts import read_prompt_file
from grogu.rerank.tuned import TunedSettings, TunedSettingsWarning, load_tuned, model_fingerprint, prompt_hash

pytestmark = pytest.mark.slow

TOKENS = 8
SYSTEM, USER = "Answer the question using only the documents.", "{context}\n\nQuestion: {question}"


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "tune")


def _chat(engine):
    from langchain_huggingface import ChatHuggingFace, HuggingFacePipeline
    from transformers import pipeline

    pipe = pipeline(
        "text-generation",
        model=engine.model,
        tokenizer=engine.tokenizer,
        max_new_tokens=TOKENS,
        do_sample=False,
        return_full_text=False,
    )
    return ChatHuggingFace(llm=HuggingFacePipeline(pipeline=pipe), tokenizer=engine.tokenizer, model_id="smollm2")


def test_tune_on_the_packaged_model_and_every_front_end_loads_its_file(smol_engine, tmp_path, capsys):
    from langchain_core.documents import Document as LCDocument
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_grogu import GroguCompressor, GroguRetriever
    from llama_index.core.schema import NodeWithScore, TextNode
    from llama_index.postprocessor.grogu import GroguRerank

    # the example's 6 labelled SQuAD questions (5 paragraphs each, their own second) and the README's prompt
    ex_path, prompt_path, out = (
        os.path.join(EXAMPLE, "labelled.jsonl"),
        os.path.join(EXAMPLE, "prompt.json"),
        tmp_path / "tuned",
    )
    examples = [json.loads(line) for line in open(ex_path)]
    assert json.load(open(prompt_path)) == {"system": SYSTEM, "user": USER}
    # the command line
    args = ["tune", "--examples", str(ex_path), "--model", "smollm2-135m-instruct", "--prompt-file", str(prompt_path)]
    args += ["--top-n", "3", "--out", str(out), "--max-new-tokens", str(TOKENS), "--device", "cpu", "--quiet"]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().out
    tuned = load_tuned(out / "settings.json")
    assert tuned.evidence["n"] == 6 and tuned.top_n == 3 and tuned.max_new_tokens == TOKENS
    assert "<h1>grogu tune</h1>" in (out / "report.html").read_text() and (out / "report.txt").exists()
    records = (out / "records.jsonl").read_text()
    assert len(records.splitlines()) == 6
    # Python: a ChatHuggingFace and its ChatPromptTemplate are the same set-up, so the records are reused
    chat = _chat(smol_engine)
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", USER)])
    again = grogu.tune(examples, model=chat, qa_prompt=prompt, top_n=3, out=str(out), progress=False)
    assert (out / "records.jsonl").read_text() == records  # nothing answered again
    assert (again.settings, again.decision, again.prompt_hash) == (tuned.settings, tuned.decision, tuned.prompt_hash)

    # one file with settings that change the order, for this model and prompt, loaded everywhere
    moving = grogu.ModeSettings(family="reversed", gate="always", rule="confidence", margin=0.0)  # 2 contexts
    template = read_prompt_file(prompt_path)
    path = str(tmp_path / "moving.json")
    TunedSettings(
        moving, "smollm2-135m-instruct", prompt_hash(template), 3, TOKENS, "tuned", {}, model_fingerprint(smol_engine)
    ).save(path)
    recs = [json.loads(line) for line in records.splitlines()]
    want = [rec["candidates"][replay(moving.for_target(False), rec).candidate] for rec in recs]
    assert any(w != [0, 1, 2] for w in want)  # the file does change some order

    scorer = grogu.UtilityScorer(smol_engine, max_new_tokens=TOKENS, template=template)

    class Fixed(BaseRetriever):
        docs: list

        def _get_relevant_documents(self, query, *, run_manager=None):
            return self.docs

    # a question whose order the file changes, through each front end
    i = next(i for i, w in enumerate(want) if w != [0, 1, 2])
    ex, w = examples[i], want[i]
    docs = [LCDocument(page_content=t, id=str(j)) for j, t in enumerate(ex["documents"])]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedSettingsWarning)  # the same model and prompt: no warning
        assert [d.index for d in scorer.rerank(ex["question"], ex["documents"], 3, settings=path)] == w
        retriever = GroguRetriever(
            base_retriever=Fixed(docs=docs), model=chat, qa_prompt=prompt, top_n=3, settings=path
        )
        assert [int(d.id) for d in retriever.invoke(ex["question"])] == w
        compressor = GroguCompressor(model=chat, qa_prompt=prompt, top_n=3, settings=path)
        assert [int(d.id) for d in compressor.compress_documents(docs, ex["question"])] == w
    # LlamaIndex's reranker scores with its own QA prompt here, not the tuned one: it warns, and runs
    nodes = [
        NodeWithScore(node=TextNode(text=t, id_=str(i)), score=1.0 - i / 10) for i, t in enumerate(ex["documents"])
    ]
    with pytest.warns(TunedSettingsWarning, match="QA prompt"):
        kept = GroguRerank(
            model="smollm2-135m-instruct", device="cpu", top_n=3, max_new_tokens=TOKENS, settings=path
        ).postprocess_nodes(nodes, query_str=ex["question"])
    assert len(kept) == 3
    # the command line's rerank, with the same prompt file: the file's order
    docs_path = tmp_path / "docs.jsonl"
    docs_path.write_text("".join(json.dumps(d) + "\n" for d in ex["documents"]))
    rerank = ["rerank", "--query", ex["question"], "--docs", str(docs_path), "--settings", path, "--json"]
    assert main(rerank + ["--prompt-file", str(prompt_path), "--max-new-tokens", str(TOKENS), "--device", "cpu"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [d["index"] for d in printed["results"]] == w


def test_a_bad_settings_file_fails_before_any_model_loads(tmp_path):
    from langchain_grogu import GroguRetriever
    from llama_index.postprocessor.grogu import GroguRerank

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "grogu-tuned-settings", "version": 1, "decision": "tuned"}))
    with pytest.raises(ValueError, match="lacks"):
        GroguRerank(model="no-such-model-anywhere", settings=str(bad))
    with pytest.raises(ValueError, match="lacks"):
        GroguRetriever(base_retriever=None, model="no-such-model-anywhere", settings=str(bad))
    with pytest.raises(SystemExit):
        main(["rerank", "--query", "q?", "--docs", str(bad), "--settings", str(tmp_path / "missing.json")])
