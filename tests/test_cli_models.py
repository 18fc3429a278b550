"""Model loading paths and the command line, on a tiny model saved to a local directory."""

from __future__ import annotations

import json

import pytest
from grogu_research.testing import tiny_model

from grogu import ModeSettings, UtilityScorer, get_engine
from grogu.apps.cli import main
from grogu.core.files import read_documents
from grogu.runtime.models import resolve_spec


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    out = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama", seed=5).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.mark.slow
def test_unknown_model_says_what_was_tried(monkeypatch):
    # offline, as CI is: the hub is not asked (without network the request would retry for about 40 s)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError) as err:
        get_engine("no-such-org/no-such-model-xyz", device="cpu")
    msg = str(err.value)
    assert "no-such-org/no-such-model-xyz" in msg and "embedded aliases" in msg and "hub id" in msg


@pytest.mark.slow
def test_model_specs(model_dir):
    assert resolve_spec("SmolLM2-135M-Instruct").gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert resolve_spec("default").name == "smollm2-135m-instruct"
    with pytest.raises(FileNotFoundError):
        resolve_spec("/nowhere/model.gguf")
    with pytest.raises(TypeError):
        get_engine(12)
    engine = get_engine(model_dir, device="cpu")
    assert engine is get_engine(model_dir, device="cpu")  # one engine per (model, device, dtype)
    assert UtilityScorer(model_dir, device="cpu").target is engine


def test_local_dir_equals_loaded_pair(model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    pair = (AutoModelForCausalLM.from_pretrained(model_dir), tokenizer)
    docs = ["one document here", "another, longer document about something else entirely"]
    a = UtilityScorer(model_dir, device="cpu", max_new_tokens=6).score("what?", docs)
    b = UtilityScorer(pair, max_new_tokens=6).score("what?", docs)
    assert [r.score for r in a] == pytest.approx([r.score for r in b], abs=1e-5)


def test_cli_rerank_json(model_dir, tmp_path, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('"plain string document"\n{"text": "titled document text", "title": "T"}\n"third"\n')
    assert (
        main(
            [
                "rerank",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--query",
                "what is it?",
                "--docs",
                str(docs),
                "--top-n",
                "2",
                "--max-new-tokens",
                "6",
                "--json",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    expected = UtilityScorer(model_dir, device="cpu", max_new_tokens=6).rerank(
        "what is it?", read_documents(str(docs)), top_n=2
    )
    assert [r["index"] for r in record["results"]] == [r.index for r in expected]
    assert [r["score"] for r in record["results"]] == pytest.approx([r.score for r in expected], abs=1e-5)


def test_cli_rerank_settings_are_grogu_mode_settings(model_dir, tmp_path, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps(t) for t in ["first doc", "second doc", "third doc", "fourth doc"]))
    assert (
        main(
            [
                "rerank",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--query",
                "what is it?",
                "--docs",
                str(docs),
                "--top-n",
                "2",
                "--max-new-tokens",
                "6",
                "--json",
                "--family",
                "swap_orders",
                "--rule",
                "combined",
                "--confidence-weight",
                "0.25",
                "--supported",
                "false",
            ]
        )
        == 0
    )
    record = json.loads(capsys.readouterr().out)
    expected = UtilityScorer(model_dir, device="cpu", max_new_tokens=6).rerank(
        "what is it?",
        read_documents(str(docs)),
        top_n=2,
        settings=ModeSettings(family="swap_orders", rule="combined", confidence_weight=0.25, supported=False),
    )
    assert [r["index"] for r in record["results"]] == [r.index for r in expected] and record["mode"] == "context"
    # a bad setting, or settings that do not go together, are usage errors (exit status 2) naming the setting
    for bad, message in (
        (["--swaps", "-1"], "swaps must be an int >= 0"),
        (["--rule", "vote"], "--rule"),
        (["--threshold", "-1"], "threshold applies to per-document"),
        (["--supported", "maybe"], "not true or false"),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["rerank", "--model", model_dir, "--query", "q?", "--docs", str(docs), *bad])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cli_many_queries_table(model_dir, tmp_path, capsys):
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "\n".join(json.dumps({"query": f"question {i}?", "documents": ["a doc", "b doc"]}) for i in range(3))
    )
    assert (
        main(
            [
                "score",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--queries",
                str(queries),
                "--max-new-tokens",
                "4",
                "--batch-queries",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("query: question") == 3 and "utility" in out
    text = tmp_path / "docs.txt"
    text.write_text("first paragraph\nstill first\n\nsecond paragraph\n")
    assert read_documents(str(text)) == ["first paragraph\nstill first", "second paragraph"]
    with pytest.raises(SystemExit):
        main(["score", "--model", model_dir, "--query", "only a query"])


def test_cli_other_metrics(model_dir, tmp_path, capsys):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('"The Vltava flows through Prague."\n"Bananas are yellow."\n')
    assert (
        main(
            [
                "influence",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--query",
                "Which river?",
                "--docs",
                str(docs),
                "--max-new-tokens",
                "5",
                "--json",
            ]
        )
        == 0
    )
    rec = json.loads(capsys.readouterr().out)
    from grogu.metrics.influence import InfluenceScorer

    ref = InfluenceScorer(model_dir, device="cpu", max_new_tokens=5).score("Which river?", read_documents(str(docs)))
    assert rec["scores"] == pytest.approx(ref.scores, abs=1e-5) and rec["method"] == "exact"
    assert (
        main(
            [
                "influence",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--query",
                "Which river?",
                "--docs",
                str(docs),
                "--max-new-tokens",
                "5",
                "--method",
                "ablation",
                "--ablations",
                "6",
                "--seed",
                "3",
                "--json",
            ]
        )
        == 0
    )
    rec = json.loads(capsys.readouterr().out)
    ref = InfluenceScorer(model_dir, device="cpu", max_new_tokens=5, method="ablation", n_ablations=6, seed=3).score(
        "Which river?", read_documents(str(docs))
    )
    assert rec["method"] == "ablation" and rec["single_answers"] == [] and len(rec["scores"]) == 2
    assert rec["scores"] == pytest.approx(ref.scores, abs=1e-5)
    for method, extra in (("leave_one_out_logprob", []), ("contextcite", ["--ablations", "8", "--seed", "2"])):
        assert (
            main(
                [
                    "influence",
                    "--model",
                    model_dir,
                    "--device",
                    "cpu",
                    "--query",
                    "Which river?",
                    "--docs",
                    str(docs),
                    "--max-new-tokens",
                    "5",
                    "--method",
                    method,
                    "--answer",
                    "The Vltava.",
                    *extra,
                    "--json",
                ]
            )
            == 0
        )
        rec = json.loads(capsys.readouterr().out)
        ref = InfluenceScorer(
            model_dir,
            device="cpu",
            max_new_tokens=5,
            method=method,
            n_ablations=8 if extra else None,
            seed=2 if extra else 0,
        ).score("Which river?", read_documents(str(docs)), answer="The Vltava.")
        assert rec["method"] == method and rec["answer"] == "The Vltava." and len(rec["scores"]) == 2
        assert rec["scores"] == pytest.approx(ref.scores, abs=1e-5) and rec["logprobs"] == pytest.approx(
            ref.forward.logprobs, abs=1e-5
        )
        assert len(rec["masks"]) == (8 if extra else 3) and max(map(abs, rec["scores"])) > 0
    assert (
        main(
            [
                "acu",
                "--model",
                model_dir,
                "--device",
                "cpu",
                "--claim",
                "The sky is blue.",
                "--evidence",
                "The sky is blue on clear days.",
                "--stance",
                "SUPPORTS",
                "--json",
            ]
        )
        == 0
    )
    rec = json.loads(capsys.readouterr().out)
    assert -1 <= rec["acu"] <= 1 and set(rec["p_with"]) == {"True", "None", "False"}


def test_engine_name_of_a_loaded_pair(tokenizer):
    from grogu import Engine

    assert Engine(tiny_model("llama"), tokenizer, device="cpu").model_name == "LlamaForCausalLM"
