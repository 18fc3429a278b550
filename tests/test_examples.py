"""The examples run end to end, as a user runs them: the packaged SmolLM2 and MiniLM, real SQuAD
paragraphs, one question each, in a fresh process. Each must exit 0, print the answer and the table of
the documents the LLM read, and append one influence record in grogu's schema whose documents are the
ones printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grogu.influence_log import DOCUMENT_FIELDS, RECORD_FIELDS

pytestmark = pytest.mark.slow  # the examples in fresh processes: not in the fast subset (-m 'not slow')

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "examples", script), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _records(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _check_record(record: dict, framework: str, n_docs: int) -> None:
    assert tuple(record) == RECORD_FIELDS
    assert record["framework"] == framework and record["error"] is None and record["method"] == "exact"
    assert record["answer"] and record["query"]
    assert len(record["documents"]) == n_docs == len(record["influence"])
    for i, doc in enumerate(record["documents"]):
        assert tuple(doc) == DOCUMENT_FIELDS and doc["index"] == i
        assert -2.0 <= doc["influence"] <= 2.0 and doc["influence"] == record["influence"][i]


def test_llama_index_example(tmp_path):
    log = tmp_path / "influence.jsonl"
    out = _run(
        "llama_index_rag.py",
        "--paragraphs",
        "30",
        "--questions",
        "1",
        "--top-k",
        "4",
        "--top-n",
        "2",
        "--max-new-tokens",
        "16",
        "--log",
        str(log),
        "--threads",
        "1",
    )
    assert "Q: " in out and "\nA: " in out and "influence records appended" in out
    rows = [line for line in out.splitlines() if line.startswith("   ") and "[" in line and "'" in line]
    assert len(rows) == 2  # the two nodes GroguRerank kept, each with retrieval score, utility, influence
    [record] = _records(log)
    _check_record(record, "llama_index", 2)


def test_langchain_example(tmp_path):
    log = tmp_path / "influence.jsonl"
    out = _run(
        "langchain_rag.py",
        "--paragraphs",
        "30",
        "--questions",
        "1",
        "--k",
        "4",
        "--top-n",
        "2",
        "--max-new-tokens",
        "16",
        "--jsonl",
        str(log),
        "--threads",
        "1",
    )
    assert "Q: " in out and "\nA: " in out and "1 influence records appended" in out
    [record] = _records(log)
    _check_record(record, "langchain", 2)
