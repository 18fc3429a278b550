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
    assert {"grogu.batch", "grogu.scorer"} <= {t for t, _ in GRAPH["grogu.cli"]}  # lazy imports included
    assert ("grogu.checks", ["check_query"]) in GRAPH["grogu.scorer"] or any(
        t == "grogu.checks" and "check_query" in n for t, n in GRAPH["grogu.scorer"]
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


# The layers, lowest first. A module may import its own layer and those below it, never one above.
LAYERS = [
    (
        "base",
        [
            "grogu.version",
            "grogu.checks",
            "grogu.prompts",
            "grogu.files",
            "grogu.extras",
            "grogu.gguf_meta",
            "grogu.results",
            "grogu.sinks",
            "grogu.coalescer",
            "grogu.target",
            "grogu.tracing",
            "grogu.engine.types",
        ],
    ),
    ("runtime: the models", ["grogu.models", "grogu.embedders", "grogu.engine", "grogu.inference_server"]),
    (
        "metrics",
        [
            "grogu.metrics",
            "grogu.scales",
            "grogu.selection",
            "grogu.attribution",
            "grogu.influence",
            "grogu.acu",
            "grogu.seper",
            "grogu.rerank_modes",
            "grogu.rerank",
        ],
    ),
    (
        "scorers",
        [
            "grogu.scorer",
            "grogu.context_scoring",
            "grogu.rerank_pipeline",
            "grogu.influence_record",
            "grogu.influence_log",
        ],
    ),
    ("the service", ["grogu.serve"]),
    (
        "front ends",
        [
            "grogu",
            "grogu.scorer_factory",
            "grogu.integration_settings",
            "grogu.batch",
            "grogu.cli",
            "grogu.cli_arguments",
            "grogu.cli_runners",
            "grogu.serve.cli",
            "grogu.audit",
            "grogu.retrieval",
        ],
    ),
]


def layer_of(module: str) -> int:
    """The layer of the longest prefix that names the module or a package above it."""
    best, found = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            below = module.startswith(p + ".") and p != "grogu"  # the root names itself only
            if (module == p or below) and len(p) > best:
                best, found = len(p), i
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def test_every_module_has_a_layer():
    assert {m: layer_of(m) for m in MODULES}  # layer_of fails on a module in no layer
    assert layer_of("grogu.serve.cli") == 5 and layer_of("grogu.serve.client") == 4
    assert layer_of("grogu.engine.types") == 0 and layer_of("grogu.engine.core") == 1


def test_no_module_imports_a_higher_layer():
    up = sorted(
        f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]})"
        for m, deps in GRAPH.items()
        for t, _ in deps
        if layer_of(t) > layer_of(m)
    )
    assert up == []


def test_the_two_targets_do_not_import_each_other():
    """The engine and the inference-server target both implement grogu.target.Target. The server
    side takes the engine's result types only."""
    crossing = sorted(
        f"{m} imports {t}"
        for m, deps in GRAPH.items()
        for t, _ in deps
        if (m.startswith("grogu.engine") and t.startswith("grogu.inference_server"))
        or (m.startswith("grogu.inference_server") and t.startswith("grogu.engine") and t != "grogu.engine.types")
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
