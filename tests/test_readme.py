"""The README's examples run as written, and the README stays readable.

The LlamaIndex and LangChain examples are the first ```python block under their headings. Each runs in
a fresh process, and every line of the ```text block that follows it must be a line the example
printed. The readability test measures the prose of the README and of the two integration READMEs:
lines, sentence lengths, table cells and where the pitch sits. Run this file as a script to print the
figures: `python tests/test_readme.py`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
READMES = {
    "README.md": README,
    "llama-index README": os.path.join(REPO, "integrations", "llama-index-postprocessor-grogu", "README.md"),
    "langchain README": os.path.join(REPO, "integrations", "langchain-grogu", "README.md"),
}

# the limits each README keeps
MAX_LINES = 250
MAX_MEAN_WORDS = 25.0
MAX_SENTENCE_WORDS = 60
MAX_CELL_CHARS = 200
PITCH_WITHIN = 10  # the sentence that says what grogu does, within the first lines


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


# --- the examples ---------------------------------------------------------------------------------------


def example(text: str, heading: str) -> tuple[str, list[str]]:
    """The first python block under `heading` and the lines of the text block right after it."""
    lines = text.splitlines()
    start = lines.index(heading)
    code: list[str] = []
    shown: list[str] = []
    i = start + 1
    while not lines[i].startswith("```python"):
        assert not lines[i].startswith("## "), f"no python block under {heading!r}"
        i += 1
    i += 1
    while lines[i] != "```":
        code.append(lines[i])
        i += 1
    i += 1
    while not lines[i].strip():
        i += 1
    assert lines[i] == "```text", f"the example under {heading!r} has no ```text block of its output"
    i += 1
    while lines[i] != "```":
        shown.append(lines[i])
        i += 1
    return "\n".join(code) + "\n", shown


HEADINGS = ["## With LlamaIndex", "## With LangChain"]


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[str, tuple[str, int, str]]:
    """Each README example run in a fresh process, both at once (one thread each, one per core):
    {heading: (stdout, exit status, stderr)}."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = {}
    for i, heading in enumerate(HEADINGS):
        folder = tmp_path_factory.mktemp(f"readme_example_{i}")
        (folder / "example.py").write_text(example(_read(README), heading)[0], encoding="utf-8")
        procs[heading] = subprocess.Popen(
            [sys.executable, "example.py"],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    return {h: (*p.communicate(timeout=900), p.returncode) for h, p in procs.items()}


@pytest.mark.slow  # the real SmolLM2 in a fresh process: not in the fast subset (-m "not slow")
@pytest.mark.parametrize("heading", HEADINGS)
def test_readme_example_prints_what_it_shows(heading, printed):
    _, shown = example(_read(README), heading)
    assert shown, f"no output shown under {heading!r}"
    stdout, stderr, code = printed[heading]
    assert code == 0, f"the example failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    lines = stdout.splitlines()
    assert lines == shown, f"{heading}: the README shows\n" + "\n".join(shown) + "\nthe code printed\n" + stdout


# --- readability ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    lines: int
    sentences: int
    mean_words: float
    longest_sentence: int
    longest_sentence_text: str
    longest_cell: int
    longest_cell_text: str
    pitch_line: int | None


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def prose(text: str) -> tuple[list[str], list[str]]:
    """The paragraphs of prose (list items and paragraphs, headings left out) and the table rows, both
    outside code blocks."""
    paragraphs: list[str] = []
    rows: list[str] = []
    current: list[str] = []
    in_code = False

    def flush():
        if current:
            paragraphs.append(" ".join(current))
            current.clear()

    for line in text.splitlines():
        stripped = re.sub(r"<!--.*?-->", "", line).strip()  # markers (benchmarks/claims.py) are not read
        if stripped.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            continue
        if not stripped or stripped.startswith("#"):
            flush()
        elif stripped.startswith("|"):
            flush()
            rows.append(stripped)
        elif re.match(r"([-*]|\d+\.)\s", stripped):
            flush()
            current.append(stripped)
        else:
            current.append(stripped)
    flush()
    return paragraphs, rows


def sentences(paragraphs: list[str]) -> list[str]:
    out = []
    for p in paragraphs:
        out.extend(s for s in _SENTENCE_END.split(p) if s.strip())
    return out


def words(sentence: str) -> int:
    return len(sentence.split())


def cells(rows: list[str]) -> list[str]:
    out = []
    for row in rows:
        if set(row) <= set("|-: "):
            continue  # the header's rule
        out.extend(c.strip() for c in row.strip("|").split("|"))
    return out


def figures(path: str) -> Figures:
    text = _read(path)
    paragraphs, rows = prose(text)
    sents = sentences(paragraphs)
    lengths = [words(s) for s in sents]
    longest = max(range(len(sents)), key=lengths.__getitem__)
    all_cells = cells(rows) or [""]
    cell = max(all_cells, key=len)
    return Figures(
        len(text.splitlines()),
        len(sents),
        sum(lengths) / len(lengths),
        lengths[longest],
        sents[longest],
        len(cell),
        cell,
        pitch_line(text),
    )


def pitch_line(text: str) -> int | None:
    """The line of the first prose outside code blocks and headings: the sentence that says what it does."""
    in_code = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.strip() and not line.startswith(("#", "|")):
            return i
    return None


@pytest.mark.parametrize("name", list(READMES))
def test_readme_limits(name):
    f = figures(READMES[name])
    assert f.lines <= MAX_LINES, f"{name}: {f.lines} lines"
    assert f.mean_words <= MAX_MEAN_WORDS, f"{name}: {f.mean_words:.1f} words a sentence on average"
    assert f.longest_sentence <= MAX_SENTENCE_WORDS, (
        f"{name}: a sentence of {f.longest_sentence} words: {f.longest_sentence_text}"
    )
    assert f.longest_cell <= MAX_CELL_CHARS, (
        f"{name}: a table cell of {f.longest_cell} characters: {f.longest_cell_text}"
    )
    assert f.pitch_line is not None and f.pitch_line <= PITCH_WITHIN, f"{name}: the pitch is on line {f.pitch_line}"


def test_readme_first_block_is_the_two_commands():
    """`.ci/run` runs line 1 (up to "&& grogu") and line 2 of the README's first code block."""
    lines = _read(README).splitlines()
    first = lines.index("```bash")
    assert not any(line.startswith("```") for line in lines[:first])
    block = lines[first + 1 : lines.index("```", first + 1)]
    assert len(block) == 2
    assert block[0].startswith("pip install torch==") and block[0].endswith("&& grogu rerank --example")
    assert "-e research" in block[1] or '-e "research[' in block[1]  # the research harness and test helpers
    # parallel, Ray tests together, the heavy tier left to a run by hand (CONTRIBUTING.md)
    assert block[1].endswith('&& python -m pytest -q -n auto --dist loadgroup -m "not heavy"')


def test_readme_keeps_its_sections():
    text = _read(README)
    for heading in ("## Which rerank mode", "## What it costs", "## Benchmarks"):
        assert heading in text.splitlines(), heading
    assert "docs/benchmarks.md" in text


if __name__ == "__main__":
    for name, path in READMES.items():
        f = figures(path)
        print(
            f"{name}: {f.lines} lines, {f.sentences} sentences, mean {f.mean_words:.1f} words, "
            f"longest sentence {f.longest_sentence} words, longest cell {f.longest_cell} characters, "
            f"pitch on line {f.pitch_line}"
        )
    for path in sys.argv[1:]:
        f = figures(path)
        print(
            f"{path}: {f.lines} lines, mean {f.mean_words:.1f} words, longest {f.longest_sentence}: "
            f"{f.longest_sentence_text[:120]}..."
        )
