"""A new setting or rerank mode touches one file: a rerank setting grogu/rerank/settings.py's ModeSettings, a
rerank mode grogu/rerank/modes.py's registry, a setting both integrations share
grogu/apps/integration_settings.py's SharedSettings.

The test copies the package, adds one field to ModeSettings and one mode to the registry in the copy,
and checks that every entry point takes both by name: the scorer's rerank, the command line, the
service's request body, and both integrations. A name that is not a setting stays an error everywhere.
It then adds one field to SharedSettings, with its default and grogu's check, and checks that both
integrations take it, default it and check it alike.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
FIELD = """    probe_setting: int = _setting(7, "a setting added in one place")
"""
ANCHOR = "    def __post_init__(self) -> None:\n"
#: a probe mode: each document scored alone, the least useful first
MODE = """

class ReverseMode(RerankMode):
    name = "reverse"

    def order(self, settings, base, utility, scored, relevance):
        return selection.order_by(utility)[::-1], {}


register_mode(ReverseMode())
"""

SCRIPT = r"""
import contextlib, io, sys
import grogu
from grogu import UtilityScorer
from grogu.rerank import ModeOverrides, ModeSettings
from grogu_research.testing import embedded_tokenizer, tiny_model

assert grogu.__file__.startswith(sys.argv[1]), grogu.__file__
assert ModeSettings().probe_setting == 7 and ModeSettings.build(probe_setting=3).probe_setting == 3
assert "probe_setting" in ModeOverrides.__annotations__

scorer = UtilityScorer((tiny_model(), embedded_tokenizer()), max_new_tokens=2)
docs = ["Paris is the capital of France.", "Berlin is in Germany."]
assert len(scorer.rerank("Capital of France?", docs, mode="document", probe_setting=3)) == 2
try:
    scorer.rerank("Capital of France?", docs, mode="document", no_such_setting=3)
    raise SystemExit("an unknown setting was accepted")
except TypeError as e:
    assert "no_such_setting" in str(e)

from grogu.apps.cli.arguments import build_parser
out = io.StringIO()
with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
    build_parser().parse_args(["rerank", "--help"])
assert "--probe-setting" in out.getvalue()

from grogu.rerank.remote.schema import RerankRequest
body = RerankRequest(query="q", documents=["d"], probe_setting=3)
assert body.mode_settings().probe_setting == 3

from llama_index.postprocessor.grogu import GroguRerank
assert GroguRerank(model=scorer.target, probe_setting=3).settings.probe_setting == 3

from langchain_grogu import GroguCompressor
assert GroguCompressor(model=scorer.target, probe_setting=3).settings.probe_setting == 3

# the new mode, everywhere by name
docs = docs + ["Madrid is the capital of Spain."]
best = [d.index for d in scorer.rerank("Capital of France?", docs, mode="document", top_n=None)]
worst = [d.index for d in scorer.rerank("Capital of France?", docs, mode="reverse", top_n=None)]
assert worst == best[::-1], (best, worst)
assert build_parser().parse_args(["rerank", "--example", "--mode", "reverse"]).mode == "reverse"
assert RerankRequest(query="q", documents=["d"], mode="reverse").mode_settings().mode == "reverse"
assert GroguRerank(model=scorer.target, mode="reverse").settings.mode == "reverse"
assert GroguCompressor(model=scorer.target, mode="reverse").settings.mode == "reverse"
print("travelled")
"""

SHARED_FIELD = """    probe_shared: Annotated[int, checked(check_positive_int, "probe_shared")] = Field(
        default=5, description="a setting both integrations share, added in one place"
    )
"""
SHARED_ANCHOR = "    device: Optional[str] = Field("

SHARED_SCRIPT = r"""
import sys
import grogu
from grogu_research.testing import embedded_tokenizer, tiny_model
from langchain_grogu import GroguCompressor, GroguRetriever
from llama_index.postprocessor.grogu import GroguRerank

assert grogu.__file__.startswith(sys.argv[1]), grogu.__file__
engine = grogu.Engine(tiny_model(), embedded_tokenizer(), device="cpu")
for cls in (GroguRerank, GroguCompressor):
    assert cls(model=engine).probe_shared == 5
    assert cls(model=engine, probe_shared=2).probe_shared == 2
    try:
        cls(model=engine, probe_shared=0)
        raise SystemExit(f"{cls.__name__} accepted probe_shared=0")
    except ValueError as e:  # pydantic's ValidationError is a ValueError; grogu's message inside
        assert "probe_shared" in str(e) and "positive" in str(e), e
assert "probe_shared" in GroguRetriever.model_fields
print("shared")
"""


@pytest.mark.heavy  # copies the package and runs every entry point in a subprocess
def test_a_new_setting_or_mode_touches_one_file(tmp_path):
    src = os.path.join(tmp_path, "src")
    shutil.copytree(os.path.join(ROOT, "src", "grogu"), os.path.join(src, "grogu"))
    path = os.path.join(src, "grogu", "rerank", "settings.py")
    text = open(path, encoding="utf-8").read()
    assert text.count(ANCHOR) == 1
    open(path, "w", encoding="utf-8").write(text.replace(ANCHOR, FIELD + "\n" + ANCHOR))
    path = os.path.join(src, "grogu", "rerank", "modes.py")
    open(path, "a", encoding="utf-8").write(MODE)
    changed = [
        os.path.relpath(os.path.join(d, f), src)
        for d, _, files in os.walk(os.path.join(src, "grogu"))
        for f in files
        if f.endswith(".py")
        and open(os.path.join(d, f), encoding="utf-8").read()
        != open(os.path.join(ROOT, "src", os.path.relpath(os.path.join(d, f), src)), encoding="utf-8").read()
    ]
    assert sorted(changed) == [
        os.path.join("grogu", "rerank", "modes.py"),
        os.path.join("grogu", "rerank", "settings.py"),
    ]
    integrations = [
        os.path.join(ROOT, "integrations", "llama-index-postprocessor-grogu"),
        os.path.join(ROOT, "integrations", "langchain-grogu"),
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, *integrations]), OMP_NUM_THREADS="1")
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, src], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("travelled")

    # a setting both integrations share: one field in SharedSettings
    path = os.path.join(src, "grogu", "apps", "integration_settings.py")
    text = open(path, encoding="utf-8").read()
    assert text.count(SHARED_ANCHOR) == 1
    open(path, "w", encoding="utf-8").write(text.replace(SHARED_ANCHOR, SHARED_FIELD + SHARED_ANCHOR))
    run = subprocess.run(
        [sys.executable, "-c", SHARED_SCRIPT, src], env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("shared")
