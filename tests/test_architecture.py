"""The package's layering, read from the source (no import is run): no import cycle between grogu's
modules, the plug-in never imports the research harness (research/, grogu_research), and no module imports
another module's private name. The wheel holds the plug-in only."""

from __future__ import annotations

import ast
import os

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "src")


def _modules() -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(os.path.join(SRC, "grogu")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, SRC)[:-3].replace(os.sep, ".")
                out[rel[: -len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


MODULES = _modules()


def _imports(module: str, path: str) -> list[tuple[str, list[str]]]:
    """(imported module, names taken from it) for every import in the file, lazy ones included."""
    package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "grogu"]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            if target.split(".")[0] != "grogu":
                continue
            for alias in node.names:  # "from package import submodule" imports the submodule
                sub = f"{target}.{alias.name}"
                found.append((sub, []) if sub in MODULES else (target, [alias.name]))
    out = []
    for target, names in found:
        while target not in MODULES and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in MODULES and target != module:
            out.append((target, names))
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_the_graph_was_read():
    assert len(MODULES) > 50
    assert {"grogu.rerank.batch", "grogu.rerank.scorer"} <= {
        t for t, _ in GRAPH["grogu.apps.cli"]
    }  # lazy imports included
    assert ("grogu.core.checks", ["check_query"]) in GRAPH["grogu.rerank.scorer"] or any(
        t == "grogu.core.checks" and "check_query" in n for t, n in GRAPH["grogu.rerank.scorer"]
    )


def test_no_import_cycle():
    edges = {m: {t for t, _ in deps} for m, deps in GRAPH.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(t) :] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_the_plug_in_never_imports_the_harness():
    """The research harness lives in research/ (grogu_research) and uses the plug-in, never the reverse."""
    up = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            up += [f"{module} imports {n}" for n in names if n.split(".")[0] == "grogu_research"]
    assert up == []
    assert not any(m.startswith(("grogu.harness", "grogu.naive", "grogu.testing")) for m in MODULES)


def test_no_module_imports_another_modules_private_name():
    private = sorted(
        f"{m} imports {t}.{n}"
        for m, deps in GRAPH.items()
        for t, names in deps
        for n in names
        if n.startswith("_") and not n.startswith("__")
    )
    assert private == []


# The layers, lowest first: each is a package of grogu, and a module's layer is the package it lives in.
LAYERS = ["core", "runtime", "metrics", "rerank", "observe", "apps"]


def layer_of(module: str) -> int | None:
    """The layer of a module, from its folder (None: the package root and the table of old paths, which
    re-export and sit above every layer)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in LAYERS:
        return None
    return LAYERS.index(parts[1])


def test_every_module_is_in_a_layer():
    """Only the root ``__init__`` and the table of old paths sit outside the layer packages."""
    assert sorted(m for m in MODULES if layer_of(m) is None) == ["grogu", "grogu._moved"]
    assert {LAYERS[layer_of(m)] for m in MODULES if layer_of(m) is not None} == set(LAYERS)
    assert layer_of("grogu.apps.serve.cli") == 5 and layer_of("grogu.rerank.remote.client") == 3
    assert layer_of("grogu.core.types") == 0 and layer_of("grogu.runtime.engine.core") == 1


def test_the_package_folder_is_the_layers():
    """``ls src/grogu``: the six layer packages, the root ``__init__``, the table of old paths and package data."""
    listed = sorted(os.listdir(os.path.join(SRC, "grogu")))
    assert [n for n in listed if n != "__pycache__"] == sorted([*LAYERS, "__init__.py", "_moved.py", "data"])


def test_no_module_imports_a_higher_layer():
    up = sorted(
        f"{m} ({LAYERS[layer_of(m)]}) imports {t} ({LAYERS[layer_of(t)]})"
        for m, deps in GRAPH.items()
        if layer_of(m) is not None
        for t, _ in deps
        if layer_of(t) is not None and layer_of(t) > layer_of(m)
    )
    assert up == []


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The check reads imports as the real ones are read: an upward one in a file is found."""
    path = tmp_path / "m.py"
    path.write_text("from ...apps.serve import api\nfrom ..checks import check_query\n")
    found = _imports("grogu.core.fake.m", str(path))
    assert [t for t, _ in found if layer_of(t) > layer_of("grogu.core.fake.m")] == ["grogu.apps.serve.api"]


def test_the_two_targets_do_not_import_each_other():
    """The engine and the inference-server target both implement grogu.core.target.Target; the result types
    they share live in the core (grogu.core.types)."""
    crossing = sorted(
        f"{m} imports {t}"
        for m, deps in GRAPH.items()
        for t, _ in deps
        if (m.startswith("grogu.runtime.engine") and t.startswith("grogu.runtime.inference_server"))
        or (m.startswith("grogu.runtime.inference_server") and t.startswith("grogu.runtime.engine"))
    )
    assert crossing == []


def test_no_module_imports_the_package_root():
    """The root re-exports the public names; a module importing it would run every import above it."""
    assert sorted(m for m, deps in GRAPH.items() if m != "grogu" and "grogu" in {t for t, _ in deps}) == []


def test_no_module_over_400_lines():
    """The size this project sets itself, for the plug-in and both integration packages (not their tests)."""
    root = os.path.join(os.path.dirname(__file__), "..")
    folders = [
        os.path.join(SRC, "grogu"),
        os.path.join(root, "integrations", "llama-index-postprocessor-grogu", "llama_index"),
        os.path.join(root, "integrations", "langchain-grogu", "langchain_grogu"),
    ]
    sizes = {
        os.path.relpath(os.path.join(d, f), root): sum(1 for _ in open(os.path.join(d, f), encoding="utf-8"))
        for folder in folders
        for d, _, files in os.walk(folder)
        for f in files
        if f.endswith(".py")
    }
    assert len(sizes) > 60
    assert {path: n for path, n in sizes.items() if n > 400} == {}


# The integration packages sit above grogu: they import it, and grogu reaches them only through the adapters
# they register (grogu.core.frameworks), never by an import.
INTEGRATIONS = ("langchain_grogu", "llama_index.postprocessor.grogu")


def _integration_imports(path: str) -> list[str]:
    """Each integration module the file imports: import statements (lazy ones included) and
    ``importlib.import_module`` / ``__import__`` calls with a literal name."""
    names = []
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names += [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    return sorted({n for n in names if any(n == i or n.startswith(i + ".") for i in INTEGRATIONS)})


def test_grogu_never_imports_an_integration():
    up = sorted(f"{m} imports {n}" for m, path in MODULES.items() for n in _integration_imports(path))
    assert up == []


def test_the_integration_check_catches_every_form_of_import(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(
        "import importlib\n"
        "def f():\n"
        "    from langchain_grogu.target import answer_budget\n"
        "    import llama_index.postprocessor.grogu.utils\n"
        "    from llama_index.postprocessor import grogu\n"
        "    from llama_index.core import schema\n"
        "    return importlib.import_module('langchain_grogu')\n"
    )
    assert _integration_imports(str(path)) == [
        "langchain_grogu",
        "langchain_grogu.target",
        "langchain_grogu.target.answer_budget",
        "llama_index.postprocessor.grogu",
        "llama_index.postprocessor.grogu.utils",
    ]
