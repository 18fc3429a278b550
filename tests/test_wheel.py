"""The wheel holds the plug-in only: no research harness, reference loop or test helpers (those live in
research/, the grogu-research package), and every module and data file the plug-in needs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.mark.slow
def test_the_wheel_holds_the_plug_in_only(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), ROOT],
        check=True,
        capture_output=True,
    )
    (wheel,) = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    modules = {n[:-3].replace("/", ".") for n in names if n.endswith(".py")}
    assert not [m for m in modules if m.startswith(("grogu.harness", "grogu_research"))]
    assert "grogu.naive" not in modules and "grogu.testing" not in modules
    source = {
        os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "src"))[:-3].replace(os.sep, ".")
        for d, _, files in os.walk(os.path.join(ROOT, "src", "grogu"))
        for f in files
        if f.endswith(".py")
    }
    assert modules == source  # every module of src/grogu, nothing else
    assert {"grogu.rerank.retrieval", "grogu.apps.audit.setups", "grogu.apps.cli.__init__", "grogu._moved"} <= modules
    data = [n for n in names if n.startswith("grogu/data/") or n.startswith("grogu/apps/audit/templates/")]
    assert any(n.endswith(".j2") for n in data) and any(n.endswith((".json", ".jsonl")) for n in data)


def test_the_research_commands_live_in_their_own_package():
    from grogu_research.cli import COMMANDS, build_parser

    from grogu.apps.cli.arguments import EXTRA_COMMANDS

    assert set(COMMANDS) == {"eval", "rewrite-pairs", "train-rewriter"}
    assert not set(COMMANDS) & set(EXTRA_COMMANDS)
    args = build_parser().parse_args(["eval", "winrate", "--limit", "3"])
    assert (args.command, args.experiment, args.limit) == ("eval", "winrate", 3)


def test_grogu_points_a_research_command_to_its_home(capsys):
    from grogu.apps.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["eval", "winrate"])
    assert exit_.value.code == 2 and "grogu-research eval" in capsys.readouterr().err
