"""Published figures are rendered from their records (benchmarks/claims.py): the README's results tables
equal their rendering, and the check fails on a missing record, a changed figure, a figure outside a
marked table, and marks a row whose measured code changed since its record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import claims  # noqa: E402


def test_the_published_figures_are_their_records_rendered(capsys):
    """README.md, CONTRIBUTING.md and every page of docs/: each table, figure and section source equals
    its rendering; every table and figure declared is used somewhere."""
    assert claims.run(write=False) == 0, capsys.readouterr().out
    assert {"README.md", "CONTRIBUTING.md", "docs/benchmarks.md", "docs/tune.md"} <= set(claims.FILES)
    text = "\n".join(open(os.path.join(claims.ROOT, f)).read() for f in claims.FILES)
    assert {name for name, _, _ in claims.marked(text.splitlines())} == {t.name for t in claims.TABLES}
    assert {m.group(1) for m in claims.FIG.finditer(text)} == set(claims.FIGURES)


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A small git repository: a record, the code it measured, a README with a marked table."""
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.org")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "engine.py").write_text("x = 1\n")
    (tmp_path / "r.json").write_text(json.dumps({"speedup": 3.14159}))
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "record")
    monkeypatch.setattr(claims, "ROOT", tmp_path)
    claims.load.cache_clear()
    claims.shallow.cache_clear()
    table = claims.Table(
        "t",
        ("benchmark", "result"),
        [claims.Row("speed", ("r.json",), ("src/",), lambda: ["speed", f"{claims.load('r.json')['speedup']:.1f}×"])],
    )
    monkeypatch.setattr(claims, "TABLES", [table])
    monkeypatch.setattr(claims, "FIGURES", {})
    monkeypatch.setattr(claims, "FILES", ("README.md",))
    (tmp_path / "README.md").write_text("Intro\n\nSpeed: <!-- claims: t -->\n\n| old |\n|---|\n| 1 |\n\nEnd\n")
    yield tmp_path
    claims.load.cache_clear()
    claims.shallow.cache_clear()


def test_write_renders_then_check_passes_and_a_changed_figure_fails(repo, capsys):
    assert claims.run(write=False) == 1  # the table is not yet its rendering
    assert claims.run(write=True) == 0
    text = (repo / "README.md").read_text()
    head = subprocess.run(["git", "log", "-1", "--format=%h"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert f"| speed | 3.1× | {head} |" in text and text.startswith("Intro") and text.endswith("End\n")
    assert claims.run(write=False) == 0
    (repo / "README.md").write_text(text.replace("3.1×", "3.2×"))  # a figure edited by hand
    assert claims.run(write=False) == 1
    assert "differs from its records" in capsys.readouterr().out


def test_a_missing_record_fails(repo, capsys):
    (repo / "r.json").unlink()
    assert claims.run(write=True) == 1
    assert "record missing: r.json" in capsys.readouterr().out


def test_a_row_whose_code_changed_since_its_record_says_older_code(repo):
    claims.run(write=True)
    assert "older code" not in (repo / "README.md").read_text()
    (repo / "src" / "engine.py").write_text("x  =  1\n\n\n")  # reformatted: the same code
    _git(repo, "commit", "-qam", "engine reformatted")
    assert claims.run(write=False) == 0
    (repo / "src" / "engine.py").write_text("x = 2\n")
    _git(repo, "commit", "-qam", "engine changed")
    assert claims.run(write=False) == 1  # the published row no longer says what code it describes
    claims.run(write=True)
    assert "older code" in (repo / "README.md").read_text()


def test_a_figure_outside_a_marked_table_fails(repo, capsys):
    claims.run(write=True)
    with open(repo / "README.md", "a") as f:
        f.write("\n| benchmark | result |\n|---|---|\n| typed by hand | 9.9× |\n")
    assert claims.run(write=False) == 1
    assert "a figure outside a marked table: | typed by hand | 9.9× |" in capsys.readouterr().out


def test_a_shallow_clone_checks_the_figures_but_not_the_code_column(repo, monkeypatch, capsys):
    claims.run(write=True)
    monkeypatch.setattr(claims.Row, "code", lambda self: "abc1234 (not in this history)")
    assert claims.run(write=False) == 0
    text = (repo / "README.md").read_text()
    (repo / "README.md").write_text(text.replace("3.1×", "3.2×"))
    assert claims.run(write=False) == 1


def test_a_row_with_no_record_says_so():
    row = claims.Row("ContextCite")
    assert row.render(4) == ["ContextCite", "no record", "–", "–"]


def test_the_sign_test_is_exact():
    assert claims.sign_test(44, 17) == pytest.approx(0.000728, abs=2e-6)
    assert claims.sign_test(9, 8) == 1.0 and claims.sign_test(0, 0) == 1.0
    assert claims.sign_test(5, 0) == pytest.approx(2 / 32)


@pytest.fixture
def prose(repo, monkeypatch):
    """The repository above with a figure in prose and a section whose source is stated."""
    monkeypatch.setattr(
        claims,
        "FIGURES",
        {"speed": claims.Figure(("r.json",), ("src/",), lambda: f"{claims.load('r.json')['speedup']:.2f}×")},
    )
    (repo / "docs").mkdir()
    (repo / "README.md").write_text("It is <!-- fig: speed --><!-- /fig --> faster.\n\n## Else\n\nNothing.\n")
    (repo / "docs" / "runs.md").write_text(
        "# Runs\n\n## Speed\n\n<!-- source: r.json; measures: src/ -->\n\nIt took 3.2 s and 4.5 s.\n\n"
        "```python\n# a comment, not a heading\n```\n\nStill 2.1×.\n\n## Later\n\nNo figure.\n"
    )
    monkeypatch.setattr(claims, "FILES", ("README.md", "docs/runs.md"))
    assert claims.run(write=True) == 0
    return repo


def test_a_figure_in_prose_is_rendered_and_a_hand_edit_fails(prose, capsys):
    text = (prose / "README.md").read_text()
    assert "<!-- fig: speed -->3.14×<!-- /fig --> faster" in text
    runs = (prose / "docs" / "runs.md").read_text()
    head = subprocess.run(["git", "log", "-1", "--format=%h"], cwd=prose, capture_output=True, text=True).stdout.strip()
    assert f"<!-- source: r.json; measures: src/ -->\n*Records: [r.json](../r.json). Code measured: {head}.*" in runs
    assert claims.run(write=False) == 0
    (prose / "README.md").write_text(text.replace("3.14×", "3.15×"))
    assert claims.run(write=False) == 1
    assert "figure speed says '3.15×', its record '3.14×'" in capsys.readouterr().out


def test_a_figure_or_a_source_whose_record_is_deleted_fails(prose, monkeypatch, capsys):
    monkeypatch.setattr(claims, "TABLES", [])
    monkeypatch.setattr(claims, "FIGURES", {})
    (prose / "README.md").write_text("Nothing measured.\n")
    assert claims.run(write=False) == 0
    (prose / "r.json").unlink()
    assert claims.run(write=False) == 1
    assert "docs/runs.md:5: record missing: r.json" in capsys.readouterr().out


def test_changed_code_marks_the_figure_and_the_section_as_older(prose):
    (prose / "src" / "engine.py").write_text("x = 2\n")
    _git(prose, "commit", "-qam", "engine changed")
    assert claims.run(write=False) == 1
    claims.run(write=True)
    assert "3.14× (older code: " in (prose / "README.md").read_text()
    assert "the code measured has changed since, so a new run is due" in (prose / "docs" / "runs.md").read_text()


def test_a_figure_outside_a_marker_fails_and_a_source_covers_its_section_only(prose, capsys):
    with open(prose / "docs" / "runs.md", "a") as f:
        f.write("It took 7.5 s here.\n")  # in "Later": no source covers it
    assert claims.run(write=False) == 1
    out = capsys.readouterr().out
    assert "docs/runs.md:19: a figure outside a marker: '7.5 s'" in out
    assert "3.2 s" not in out and "2.1×" not in out  # covered by the Speed section's source, code block and all


def test_a_source_with_no_record_says_why():
    assert claims.Source.parse("none; why: the run printed its figures").render("docs/x.md") == (
        "*No record: the run printed its figures. They cannot be checked.*"
    )
    with pytest.raises(ValueError):
        claims.Source.parse("r.json; measured: src/")


def test_the_order_of_a_rule_and_its_sample_is_read_from_the_history(repo):
    def head():
        return subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"], cwd=repo, capture_output=True, text=True
        ).stdout.strip()

    rule = head()
    (repo / "sample.jsonl").write_text("{}\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "sample")
    sample = head()
    assert claims.commit_order(rule, sample) == "rule first"
    assert claims.commit_order(sample, rule) == "the sample came first"
    assert claims.commit_order(sample, sample) == "one commit: the history cannot show the rule came first"
