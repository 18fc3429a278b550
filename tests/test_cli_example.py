"""``grogu rerank --example``, the README's first command, on the embedded SmolLM2: the first bundled
question is one the retriever's own top 3 answers wrongly; the gate is in doubt, and grogu's chosen
context holds the answering document and gives the right answer. The second is one the retriever gets
right; the gate is calm and nothing changes. The text output tells both stories; --json carries the
verdicts."""

from __future__ import annotations

import json

import pytest

from grogu.apps.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def records():
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["rerank", "--example", "--json", "--device", "cpu"]) == 0
    return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def test_the_example_fixes_one_answer_and_keeps_the_other(records):
    fixed, calm = records
    assert fixed["gate"]["in_doubt"] and fixed["gate"]["changed"] and fixed["gate"]["reasons"]
    assert "1927" not in fixed["gate"]["answer"]  # the retriever's top 3 (no Canberra document) answers wrongly
    assert "1927" in fixed["results"][0]["answer"]  # the chosen context answers right
    assert "Canberra" in [r["document"]["title"] for r in fixed["results"]] and len(fixed["results"]) == 3
    assert not calm["gate"]["in_doubt"] and not calm["gate"]["changed"] and calm["gate"]["candidates"] == 1
    assert "Canberra" in calm["gate"]["answer"] and [r["index"] for r in calm["results"]] == [0, 1, 2]
    assert fixed["top_n"] == calm["top_n"] == 3


def test_the_text_output_tells_the_story(records, capsys):
    from grogu.apps.cli.runners import iter_queries, record_table

    class Args:
        example, queries = True, None

    fixed, calm = (record_table(r, item["documents"]) for r, item in zip(records, iter_queries(Args())))
    assert "retriever's top 3: [Melbourne] [Sydney] [Photosynthesis]" in fixed
    assert "gate: in doubt (support" in fixed and "6 candidate contexts answered" in fixed
    assert "chosen: [Canberra]" in fixed and "1927" in fixed.split("chosen:")[1]
    assert "gate: calm" in calm and "chosen:" not in calm
