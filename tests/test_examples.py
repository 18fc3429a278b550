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

from grogu.observe.influence_record import DOCUMENT_FIELDS, RECORD_FIELDS

# the examples in fresh processes: not in the fast subset (-m 'not slow'); heavy: the README's examples,
# which test_readme runs, are the same pipelines
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _start(script: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [sys.executable, os.path.join(REPO, "examples", script), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _checked(script: str, stdout: str, stderr: str, code: int) -> str:
    assert code == 0, f"{script} failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return stdout


LLAMA_INDEX_ARGS = ["--paragraphs", "30", "--questions", "1", "--top-k", "4", "--top-n", "2", "--max-new-tokens", "16"]
LANGCHAIN_ARGS = ["--paragraphs", "30", "--questions", "1", "--k", "4", "--top-n", "2", "--max-new-tokens", "16"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both examples at once, one thread each (one per core): {script: (stdout, influence log)}."""
    tmp = tmp_path_factory.mktemp("examples")
    logs = {"llama_index_rag.py": tmp / "llama_index.jsonl", "langchain_rag.py": tmp / "langchain.jsonl"}
    procs = {
        "llama_index_rag.py": _start(
            "llama_index_rag.py", *LLAMA_INDEX_ARGS, "--log", str(logs["llama_index_rag.py"]), "--threads", "1"
        ),
        "langchain_rag.py": _start(
            "langchain_rag.py", *LANGCHAIN_ARGS, "--jsonl", str(logs["langchain_rag.py"]), "--threads", "1"
        ),
    }
    done = {script: (*proc.communicate(timeout=600), proc.returncode) for script, proc in procs.items()}
    return {script: (_checked(script, *done[script]), logs[script]) for script in procs}


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


def test_llama_index_example(runs):
    out, log = runs["llama_index_rag.py"]
    assert "Q: " in out and "\nA: " in out and "influence records appended" in out
    rows = [line for line in out.splitlines() if line.startswith("   ") and "[" in line and "'" in line]
    assert len(rows) == 2  # the two nodes GroguRerank kept, each with retrieval score, utility, influence
    [record] = _records(log)
    _check_record(record, "llama_index", 2)


def test_langchain_example(runs):
    out, log = runs["langchain_rag.py"]
    assert "Q: " in out and "\nA: " in out and "1 influence records appended" in out
    [record] = _records(log)
    _check_record(record, "langchain", 2)
