"""Every dotted name ``grogu.…`` that grogu's docstrings and comments or its docs cite resolves: the longest
prefix that is a module imports, and the rest are attributes of it. An old module path (``grogu._moved``)
is a stale reference, except in text about the old paths.

Logger names need no exception: every grogu logger is named after its module. The names that are not
Python names are the OpenTelemetry span and attribute names of ``grogu.observe.tracing`` (read from its
source) and the few in ``NOT_PYTHON`` below."""

from __future__ import annotations

import ast
import importlib
import io
import os
import re
import tokenize

import pytest

from grogu._moved import new_home

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
SRC = os.path.join(ROOT, "src", "grogu")

#: a dotted name starting with grogu; not part of a longer name (llama_index.postprocessor.grogu.base),
#: a path (src/grogu.py) or a file name (grogu-tuned.json)
NAME = re.compile(r"(?<![\w./-])grogu(?:\.[A-Za-z_][A-Za-z0-9_]*)+")

#: (file, old path) where the text is about the old module paths
ABOUT_OLD_PATHS = {
    ("src/grogu/__init__.py", "grogu.models"): "the package docstring and __getattr__ say the old paths still import",
    ("src/grogu/__init__.py", "grogu.engine"): "the package docstring says the old paths still import",
}
#: files that are all about the old module paths
OLD_PATH_FILES = {"src/grogu/_moved.py": "the table of old paths and its docstring"}

#: names that are not Python names, with the reason
NOT_PYTHON = {
    "grogu.ignored": "a field of the scoring service's rerank answer (JSON)",
    "grogu.frameworks": "the entry-point group where integrations advertise their adapters (grogu.core.frameworks)",
}
#: a name ending in one of these is a file name (docs/engine.md's tree: metrics/grogu.py)
FILE_SUFFIXES = {"py": "a Python file", "json": "a JSON file", "jsonl": "a JSONL file", "md": "a Markdown file"}


def _tracing_names() -> tuple[set[str], set[str]]:
    """The span and attribute names ``grogu.observe.tracing`` writes: whole names, and prefixes (ending in a
    dot) that a field name completes (``grogu.gate.`` + ``in_doubt``)."""
    with open(os.path.join(SRC, "observe", "tracing.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names, prefixes = set(), set()
    for node in ast.walk(tree):  # an f-string's leading text ("grogu.gate.") is a constant of its own
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value.rstrip(".")):
            (prefixes if node.value.endswith(".") else names).add(node.value)
    return names, prefixes


SPAN_NAMES, SPAN_PREFIXES = _tracing_names()


def _is_span_name(name: str) -> bool:
    """A span or attribute name, or a prefix of a family of them cited alone (``grogu.gate.*``)."""
    return (
        name in SPAN_NAMES
        or f"{name}." in SPAN_PREFIXES
        or any(name.startswith(p) and re.fullmatch(r"[a-z_]+", name[len(p) :]) for p in SPAN_PREFIXES)
    )


def _python_texts(path: str) -> list[tuple[int, str]]:
    """(line number, line) of the docstrings, other bare strings and comments of a Python file."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            lines += [(node.lineno + i, line) for i, line in enumerate(node.value.value.splitlines())]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            lines.append((token.start[0], token.string))
    return sorted(lines)


def _texts(relative: str) -> list[tuple[int, str]]:
    path = os.path.join(ROOT, relative)
    if relative.endswith(".py"):
        return _python_texts(path)
    with open(path, encoding="utf-8") as f:
        return list(enumerate(f.read().splitlines(), 1))


def _files() -> list[str]:
    found = []
    for folder, _, names in os.walk(SRC):
        found += [os.path.relpath(os.path.join(folder, n), ROOT) for n in names if n.endswith(".py")]
    docs = os.path.join(ROOT, "docs")
    found += [os.path.join("docs", n) for n in os.listdir(docs) if n.endswith(".md")]
    found += [n for n in ("README.md", "CONTRIBUTING.md") if os.path.exists(os.path.join(ROOT, n))]
    return sorted(f.replace(os.sep, "/") for f in found)


FILES = _files()


def unresolved(name: str) -> str | None:
    """Why ``name`` names nothing (None: it resolves). Old paths are not imported: the finder of old paths
    would resolve them."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if new_home(prefix) is not None:
            return f"{prefix} is an old module path: {new_home(prefix)}"
        try:
            found = importlib.import_module(prefix)
        except ModuleNotFoundError as e:
            if e.name == prefix or prefix.startswith(f"{e.name}."):
                continue  # no such module: a shorter prefix
            return None  # the module is there but needs an extra not installed here: its names are not read
        for i, attribute in enumerate(parts[end:], end):
            if not hasattr(found, attribute):
                return f"{'.'.join(parts[:i])} has no attribute {attribute!r}"
            found = getattr(found, attribute)
        return None
    return "no module"  # pragma: no cover - "grogu" always imports


def stale(relative: str) -> list[str]:
    """``file:line: name: why`` for every name in the file that does not resolve."""
    out = []
    for number, line in _texts(relative):
        for name in NAME.findall(line):
            if relative in OLD_PATH_FILES or (relative, name) in ABOUT_OLD_PATHS or name in NOT_PYTHON:
                continue
            if name.rsplit(".", 1)[1] in FILE_SUFFIXES or _is_span_name(name):
                continue
            why = unresolved(name)
            if why is not None:
                out.append(f"{relative}:{number}: {name}: {why}")
    return out


def test_the_files_and_names_were_read():
    assert {"src/grogu/_moved.py", "docs/usage.md", "README.md"} <= set(FILES) and len(FILES) > 80
    cited = {name for f in FILES for _, line in _texts(f) for name in NAME.findall(line)}
    assert len(cited) > 100 and "grogu.observe.influence_record" in cited
    assert {"grogu.influence", "grogu.rerank", "grogu.error"} <= SPAN_NAMES
    assert {"grogu.influence.", "grogu.gate."} <= SPAN_PREFIXES


def test_the_check_finds_a_stale_name():
    """An old path, a module that does not exist and a missing attribute are stale; a name that is there is not."""
    assert unresolved("grogu.engine.Engine") == "grogu.engine.Engine is an old module path: grogu.runtime.engine.Engine"
    # (not grogu.apps.serve.wire: importing the old path grogu.serve.wire, as test_moved_paths does, makes
    # it an attribute of the package both paths name)
    assert "no attribute 'wire'" in unresolved("grogu.apps.tune.wire.check_template")
    assert "no attribute 'nonsense'" in unresolved("grogu.core.types.nonsense")
    assert unresolved("grogu.rerank.remote.wire.check_template") is None
    assert unresolved("grogu.metrics.influence.InfluenceScorer.score") is None
    assert _is_span_name("grogu.influence.document_ids") and not _is_span_name("grogu.influence.InfluenceScorer")


@pytest.mark.parametrize("relative", FILES)
def test_every_cited_name_resolves(relative):
    found = stale(relative)
    assert not found, "stale references:\n" + "\n".join(found)
