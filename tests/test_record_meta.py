"""Records say what they measured (benchmarks/record_meta.py): the commit, the machine, the command and the
settings; a JSONL record's sidecar and a benchmark's own JSON record give benchmarks/claims.py that commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import claims  # noqa: E402
import record_meta  # noqa: E402


def head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short=7", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def claims_in(tmp_path, monkeypatch):
    """claims.py reading records under ``tmp_path`` (its paths are relative to its ROOT)."""
    monkeypatch.setattr(claims, "ROOT", tmp_path)
    claims.load.cache_clear()
    yield tmp_path
    claims.load.cache_clear()


def test_meta_names_the_commit_the_machine_and_the_command():
    before = head()
    m = record_meta.meta(settings={"dtype": "bfloat16"}, command=["python", "benchmarks/x.py", "--n", "2"], note=1)
    assert len(m["commit"]) == 7 and all(c in "0123456789abcdef" for c in m["commit"])
    assert m["commit"] in {before, head()}  # (another commit may land meanwhile)
    assert isinstance(m["dirty"], bool)
    assert m["machine"]["cpu"] == record_meta.cpu_model() and m["machine"]["cpu"]
    assert m["machine"]["cores"] == os.cpu_count()
    assert m["command"] == "python benchmarks/x.py --n 2"
    assert m["settings"] == {"dtype": "bfloat16"} and m["note"] == 1
    assert "torch" in m["versions"]
    assert record_meta.meta()["command"]  # by default the process's own command line


def test_a_sidecar_gives_claims_the_commit_of_a_jsonl_record(claims_in):
    before = head()
    record = claims_in / "rows.jsonl"
    record.write_text('{"a": 1}\n')
    path = record_meta.write_sidecar(str(record), {"questions": 2})
    assert path == f"{record}.meta.json"
    written = json.loads(open(path).read())
    assert written["settings"] == {"questions": 2}
    # claims' fallback (the commit that added the file) finds nothing here: tmp_path is no repository
    assert claims.measured_commit("rows.jsonl") in {before, head()}


@pytest.mark.slow
def test_a_benchmark_writes_its_record_with_the_meta(tmp_path, claims_in):
    """sampled_decode.py on a tiny random-weight model (no download), smallest settings: its JSON record
    holds ``meta`` with HEAD's commit, its command and the settings that differ from its defaults."""
    before = head()
    out = tmp_path / "sampled_decode.json"
    args = ["--random-arch", "qwen2-tiny", "--rows", "1", "--samples", "2", "--tokens", "4", "--repeats", "1"]
    run = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "sampled_decode.py"), *args, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    m = json.loads(out.read_text())["meta"]
    assert m["commit"] in {before, head()}
    assert m["machine"]["cpu"] == record_meta.cpu_model() and m["machine"]["threads"] == "1"
    assert m["command"].startswith("benchmarks/sampled_decode.py --random-arch qwen2-tiny")
    assert m["settings"] == {
        "random_arch": "qwen2-tiny",
        "rows": 1,
        "samples": 2,
        "tokens": 4,
        "repeats": 1,
        "out": str(out),
    }
    assert claims.measured_commit("sampled_decode.json") == m["commit"]
    assert "meta" not in run.stdout  # what it prints is unchanged


@pytest.mark.slow
def test_gpu_check_writes_the_run_folders_meta_without_a_repository(tmp_path):
    """gpu_check.sh on a machine that got the working tree without .git: git answers the commit prepare
    recorded (so record_meta's records name it too), and meta.json gathers each call's command."""
    root, xfer, out, shim = (tmp_path / d for d in ("root", "xfer", "out", "bin"))
    for d in (root / "benchmarks", xfer, out):
        d.mkdir(parents=True)
    (root / "benchmarks" / "record_meta.py").write_text(open(record_meta.__file__).read())
    prepared = {**record_meta.meta(), "commit": "abc1234", "dirty": False}
    (xfer / "prepared.json").write_text(json.dumps(prepared))
    script = open(os.path.join(ROOT, "benchmarks", "gpu_check.sh")).read().splitlines()
    funcs, inside = [], False
    for line in script:  # git_shim and write_meta, the shim put in tmp_path rather than /tmp/bin
        inside = inside or line.startswith(("git_shim() {", "write_meta() {"))
        if inside:
            funcs.append(line.replace("/tmp/bin", str(shim)))
        inside = inside and line != "}"
    body = "\n".join(funcs)
    calls = (
        f'root={root} xfer={xfer} OUT={out}\ngit_shim\nwrite_meta "bash benchmarks/gpu_check.sh run .gpu/p0" device=cuda\n'
        'write_meta "bash benchmarks/gpu_check.sh run .gpu/p2" quick=0\n'
        f"cd {root} && python -c \"import sys; sys.path.insert(0, 'benchmarks'); from record_meta import meta; "
        "print(meta()['commit'], meta()['dirty'])\""
    )
    run = subprocess.run(
        ["bash", "-c", f"set -uo pipefail\n{body}\n{calls}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["abc1234", "False"]  # what the benchmarks' records say there
    m = json.loads((out / "meta.json").read_text())
    assert m["commit"] == "abc1234" and m["dirty"] is False
    assert m["commands"] == ["bash benchmarks/gpu_check.sh run .gpu/p0", "bash benchmarks/gpu_check.sh run .gpu/p2"]
    assert m["settings"] == {"device": "cuda", "quick": "0"}
    assert m["prepared"]["commit"] == "abc1234" and m["machine"]["cpu"] == record_meta.cpu_model()
