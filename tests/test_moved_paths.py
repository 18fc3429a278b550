"""The module paths from before grogu's layers became packages still import, each as the very module of its
new home, with a MovedPathWarning that names the new path and the version that removes the old one; the new
paths warn nothing; and importing the package or its command line's parser loads no tensor code.

This is the one test file that imports old paths on purpose; the test settings make a MovedPathWarning an
error everywhere else."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import warnings

import pytest

import grogu
from grogu._moved import MOVED, PACKAGES, REMOVED_IN, MovedPathWarning, new_home

# every path the README, docs/ and the integrations used before the move, with a name read from it
DOCUMENTED = [
    ("grogu.models", "embedded_embedder_path"),
    ("grogu.models", "default_dtype"),
    ("grogu.embedders", "relevance_scores"),
    ("grogu.engine", "EngineConfig"),
    ("grogu.engine.kernels", "CpuLinears"),
    ("grogu.engine.kvcache", "ReservedLayer"),
    ("grogu.inference_server", "target_from_llm"),
    ("grogu.inference_server", "sampling_differences"),
    ("grogu.inference_server.topk", "topk_entropy"),
    ("grogu.influence", "InfluenceScorer"),
    ("grogu.influence_record", "RECORD_FIELDS"),
    ("grogu.influence_log", "InfluenceRecorder"),
    ("grogu.integration_settings", "SharedSettings"),
    ("grogu.metrics", "METRICS"),
    ("grogu.metrics", "key_entropy"),
    ("grogu.rerank", "ModeSettings"),
    ("grogu.rerank", "plan"),
    ("grogu.rerank", "DEFAULT_GATE"),
    ("grogu.rerank_modes", "MODES"),
    ("grogu.rerank_pipeline", "plan"),
    ("grogu.scorer", "UtilityScorer"),
    ("grogu.scorer_factory", "build_scorer"),
    ("grogu.scorer_factory", "remote_target"),
    ("grogu.selection", "context_candidates"),
    ("grogu.seper", "SePerScorer"),
    ("grogu.acu", "ACUScorer"),
    ("grogu.attribution", "FORWARD_METHODS"),
    ("grogu.scales", "probability"),
    ("grogu.prompts", "RAG_QA_TEMPLATE"),
    ("grogu.checks", "check_query"),
    ("grogu.target", "Target"),
    ("grogu.results", "GateVerdict"),
    ("grogu.retrieval", "BM25Retriever"),
    ("grogu.sinks", "as_sink"),
    ("grogu.tracing", "set_tracer_provider"),
    ("grogu.audit", "from_influence_logs"),
    ("grogu.audit.signals", "SIGNALS"),
    ("grogu.serve", "RemoteScorer"),
    ("grogu.serve.proxy", None),
    ("grogu.serve.service", "build_app"),
    ("grogu.cli", "main"),
]


def _moved_path_warnings(caught: list[warnings.WarningMessage]) -> dict[str, str]:
    """old path -> message, of the MovedPathWarnings among ``caught``."""
    return {str(w.message).split()[0]: str(w.message) for w in caught if issubclass(w.category, MovedPathWarning)}


@pytest.mark.parametrize("old, name", DOCUMENTED)
def test_documented_old_paths_import(old, name):
    """An old path imports and warns, naming its new path and the version that removes it. The alias is
    dropped first, as an old path warns on its first import only. ``grogu.metrics`` and ``grogu.rerank``
    are packages now, and import without a warning."""
    moved = new_home(old) is not None
    if moved:
        sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    if name is not None:
        assert getattr(module, name) is not None
    found = _moved_path_warnings(caught)
    if not moved:
        assert found == {}
        return
    assert issubclass(MovedPathWarning, FutureWarning)
    assert new_home(old) in found[old] and REMOVED_IN in found[old]


def _new_submodules(package: str) -> list[str]:
    home = importlib.import_module(package)
    return [m.name for m in pkgutil.walk_packages(home.__path__, package + ".")]


def test_every_old_path_is_the_module_of_its_new_home():
    """Each old module, and each submodule of an old package, is the same object as its new home, so a
    class is one class and a monkeypatch through either path reaches the code."""
    olds = list(MOVED)
    for package in PACKAGES:  # grogu.engine.config, grogu.serve.api, ...
        olds += [package + name[len(MOVED[package]) :] for name in _new_submodules(MOVED[package])]
    assert len(olds) > 80
    first = [old for old in olds if old not in sys.modules]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for old in olds:
            home = new_home(old)
            if old in ("grogu.metrics", "grogu.rerank"):
                continue
            assert importlib.import_module(old) is importlib.import_module(home), old
            assert sys.modules[old] is sys.modules[home]
            assert sys.modules[home].__spec__.name == home  # the module's own spec, not the alias's
        from grogu.engine.config import EngineConfig
    assert set(first) <= set(_moved_path_warnings(caught))  # each old path warned on its first import

    from grogu.runtime.engine.config import EngineConfig as Same

    assert EngineConfig is Same and grogu.models is importlib.import_module("grogu.runtime.models")


def test_old_paths_imported_first_make_no_second_copy(tmp_path):
    """In a fresh interpreter the old path comes first: its package's submodules are not loaded twice."""
    code = (
        "import sys, grogu.engine.config as a, grogu.serve.wire as w;"
        "import grogu.runtime.engine.config as b, grogu.rerank.remote.wire as v;"
        "assert a is b and w is v;"
        "assert not [m for m in sys.modules if m.startswith('grogu.') and sys.modules[m] is None]"
    )
    subprocess.run([sys.executable, "-W", "ignore::FutureWarning", "-c", code], check=True, timeout=120)


def _warnings_in_a_fresh_interpreter(code: str) -> list[dict[str, str]]:
    """The warnings that ``code`` gives in a new interpreter, every one shown: category, message, file."""
    script = (
        "import json, warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + "print(json.dumps([{'category': w.category.__name__, 'message': str(w.message), 'file': w.filename}"
        " for w in caught]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], check=True, timeout=120, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def test_an_old_path_warns_once_at_its_importer():
    """In a fresh interpreter an old path warns on its first import only, with a MovedPathWarning that names
    the old path, its new path and the version that removes old paths, and points at the importing line;
    an old package below which a module is imported warns too, for itself."""
    found = _warnings_in_a_fresh_interpreter(
        "import grogu.serve.wire\n"
        "import grogu.serve.wire as again\n"
        "import importlib; importlib.import_module('grogu.checks')\n"
        "import grogu; grogu.prompts\n"
    )
    assert [w["message"].split()[0] for w in found] == [
        "grogu.serve",
        "grogu.serve.wire",
        "grogu.checks",
        "grogu.prompts",
    ]
    assert {w["category"] for w in found} == {"MovedPathWarning"} and {w["file"] for w in found} == {"<string>"}
    wire = found[1]["message"]
    assert "grogu.rerank.remote.wire" in wire and REMOVED_IN == "0.3.0" and "0.3.0" in wire
    assert "grogu.apps.serve" in found[0]["message"] and "grogu.core.prompts" in found[3]["message"]


def test_the_new_paths_warn_nothing():
    """Every new home, imported in a fresh interpreter: no MovedPathWarning, and no warning from grogu."""
    homes = sorted(set(MOVED.values()))
    found = _warnings_in_a_fresh_interpreter(f"import importlib\nfor name in {homes!r}: importlib.import_module(name)")
    folder = os.path.dirname(grogu.__file__)
    assert [w for w in found if w["category"] == "MovedPathWarning" or w["file"].startswith(folder)] == []


def test_the_package_and_the_command_line_parser_load_no_tensor_code():
    """``import grogu``, ``grogu.serve.proxy`` and every sub-command's parser (``grogu --help``) import
    neither torch nor transformers."""
    code = (
        "import sys, grogu, grogu.serve.proxy;"
        "from grogu.apps.cli.arguments import build_parser; build_parser();"
        "heavy = [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules];"
        "assert not heavy, heavy"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        grogu.nonsense  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("grogu.engine.nonsense")
