"""The light entry points load no tensor code: each is imported in a fresh interpreter, which must not
load torch, transformers or numpy. These are the modules a process imports that never runs a model: the
service's client, the integrations' shared settings (``EngineConfig`` included), a server target until its
first request (made, it sends none), the service's HTTP proxy, and the package itself."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "numpy")

#: (what is imported, the statement that imports and uses it)
LIGHT = [
    ("grogu", "import grogu; grogu.__version__"),
    (
        "RemoteScorer",
        "from grogu.rerank.remote.client import RemoteScorer, RemoteInfluenceScorer, RemoteSePerScorer;"
        "from grogu.rerank.remote import wire",
    ),
    ("RemoteScorer via grogu", "import grogu; grogu.RemoteScorer"),
    (
        "integration_settings",
        "from grogu.apps.integration_settings import SharedSettings;"
        "from grogu.runtime.engine import EngineConfig; EngineConfig(max_batch_size=4)",
    ),
    (
        "ServerTarget",
        "from grogu.runtime.inference_server import ServerTarget, APIS, APIS_BY_NAME, ServerAPI, topk_entropy;"
        "from grogu.runtime.inference_server import server_target, requests, next_token, apis, connecting;"
        "ServerTarget('http://127.0.0.1:9/v1', 'm', api='vllm', tokenizer='t')",  # made, not connected
    ),
    ("proxy", "import grogu.apps.serve.proxy"),
    (
        "results",
        "from grogu.core import types, results; from grogu.metrics import results as m, defaults;"
        "from grogu.rerank import settings, tuned",
    ),
]


@pytest.mark.parametrize("name, code", LIGHT, ids=[n for n, _ in LIGHT])
def test_the_light_entry_points_load_no_tensor_code(name, code):
    probe = f"import sys, json; {code}; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, timeout=120, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [], f"{name} loads tensor code"


def test_the_lazy_engine_package_gives_the_same_objects():
    """``grogu.runtime.engine`` imports its names on first use: each is the object of the module it lives in,
    and an unknown name is an AttributeError."""
    import grogu.runtime.engine as engine
    from grogu.runtime.engine.config import EngineConfig
    from grogu.runtime.engine.core import Engine, get_engine

    assert engine.EngineConfig is EngineConfig and engine.Engine is Engine and engine.get_engine is get_engine
    assert set(engine.__all__) == set(engine._EXPORTS) and set(engine.__all__) <= set(dir(engine))
    with pytest.raises(AttributeError, match="no attribute 'Engin'"):
        engine.Engin  # noqa: B018


def test_the_metric_results_are_one_class_under_each_name():
    """The metrics' result classes live in :mod:`grogu.metrics.results`; each metric's module gives the same
    class, so a result made by the client and by the scorer are of one type."""
    from grogu.metrics import acu, attribution, influence, results, seper

    assert acu.ACUResult is results.ACUResult and seper.SePerResult is results.SePerResult
    assert influence.InfluenceResult is results.InfluenceResult and influence.Ablations is results.Ablations
    assert attribution.ForwardData is results.ForwardData


def test_a_package_gives_its_table_names_and_its_modules():
    """``grogu.metrics`` and ``grogu.rerank`` (one table each, PEP 562): a name of the table is the object of
    the module it comes from; a module's name imports that module; anything else is an AttributeError."""
    import grogu.metrics as metrics
    import grogu.rerank as rerank
    from grogu.metrics import grogu as family
    from grogu.metrics import scales
    from grogu.rerank import settings

    assert metrics.key_entropy is family.key_entropy and metrics.ALPHA == family.ALPHA
    assert rerank.ModeSettings is settings.ModeSettings and rerank.DEFAULT_TOP_N == settings.DEFAULT_TOP_N
    assert scales.__name__ == "grogu.metrics.scales" and set(metrics.__all__) <= set(dir(metrics))
    for package in (metrics, rerank):
        with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
            package.nonsense  # noqa: B018
