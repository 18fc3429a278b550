"""The scoring service across a two-node Ray cluster on this machine, under load while the worker node is
lost (grogu_research.cluster). The full load (300 requests on SmolLM2): benchmarks/serve_cluster.py."""

from __future__ import annotations

import os
import time
import warnings

import pytest
from grogu_research import testing
from grogu_research.cluster import ROUTES, expected_answers, node_loss_load, two_node_service

import grogu

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

N = 4  # answer tokens


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return testing.save_tiny_model(str(tmp_path_factory.mktemp("tiny-llama")))


def _work():
    words = ["river", "castle", "engine", "harbour", "violin", "desert", "comet", "garden"]
    work = []
    for i in range(12):
        docs = [
            {"text": f"The {words[(i + j) % 8]} is near the {words[(3 * i + j) % 8]}.", "title": words[j]}
            for j in range(2 + 2 * (i % 2))
        ]
        work.append((ROUTES[i % 3], f"Where is the {words[i % 8]} number {i}?", docs))
    return work


def test_requests_survive_the_loss_of_a_node(model_dir):
    """One replica per node; the worker node's raylet is killed under load from 4 clients. Every
    request gets the in-process answer or a 503 with Retry-After (never a 500, never nothing), a retry
    of the 503 gets the right answer, and a new node gets a replica again."""
    from grogu.apps.serve.config import ServeConfig

    work = _work()
    want = expected_answers(grogu.UtilityScorer(model_dir, device="cpu", max_new_tokens=N), work)
    config = ServeConfig(model=model_dir, device="cpu", max_batch_size=8, batch_wait_s=0.02)
    with two_node_service(config) as nodes:
        assert len(set(nodes.replica_nodes())) == 2  # one replica on each node
        head_replica = set(nodes.replica_nodes()) - {nodes.worker.node_id}
        out = node_loss_load(nodes, work, want, clients=4, requests=60, kill_after=0.3, max_new_tokens=N)
        after = set(nodes.replica_nodes())
    assert out["lost"] == 0 and out["responses_per_request"] == [1], out
    assert set(out["outcomes"]) <= {"correct", "503 with Retry-After"}, out
    assert out["outcomes"]["correct"] >= 30, out
    assert set(out["retried_once"]) <= {"correct"}, out
    assert head_replica <= after and len(after) == 2, (head_replica, after)  # the head's replica lived on


def _queries(path, n):
    import json

    words = ["river", "castle", "engine", "harbour", "violin", "desert", "comet", "garden"]
    with open(path, "w") as f:
        for i in range(n):
            a, b = words[i % 8], words[(i * 3 + 1) % 8]
            docs = [f"The {a} is near the {b}.", {"text": f"{i} {b}s", "title": a}]
            f.write(json.dumps({"query": f"Where is the {a} number {i}?", "documents": docs}) + "\n")


@pytest.mark.heavy
def test_ray_data_scoring_across_two_nodes_survives_the_loss_of_one(model_dir, tmp_path):
    """grogu score --ray with an engine on each node; the worker node is killed halfway and a new one
    joins. The output equals the sequential run's, record for record (the same bytes). Heavy (100 s on a
    2-core CPU): tests/test_serve.py runs ``score --ray`` and its resume on one node every time, and the
    two-node service test loses a node every time. Run it with the suite's thread settings (``-n``):
    Ray's workers use one thread, and so must the sequential run for the same bytes."""
    from grogu_research.cluster import score_with_node_loss, two_node_cluster

    from grogu.apps.cli import main

    _queries(tmp_path / "q.jsonl", 300)  # 600 (question, document) pairs
    common = ["score", "--queries", str(tmp_path / "q.jsonl"), "--model", model_dir, "--device", "cpu"]
    common += ["--max-new-tokens", str(N)]
    assert main([*common, "--out", str(tmp_path / "seq.jsonl")]) == 0
    out = str(tmp_path / "ray.jsonl")
    with two_node_cluster() as nodes:
        run = score_with_node_loss(
            nodes, [*common, "--out", out, "--ray", "--workers", "2"], out, kill_after_records=150, timeout=300
        )
    assert run["killed"] and 150 <= run["records_at_kill"] < 300, run
    assert run["first_run"]["finished"], run
    assert run["first_run"].get("exit") == 0 or run["resumed_run"]["exit"] == 0, run
    want = (tmp_path / "seq.jsonl").read_text().splitlines()
    assert len(want) == 300 and (tmp_path / "ray.jsonl").read_text().splitlines() == want


def _processes_naming(text: str) -> list[int]:
    """Live processes whose command line names ``text`` (a Ray session folder: its raylets, GCS, workers)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_a_service_that_fails_to_start_leaves_the_next_one_free_to_start(model_dir, monkeypatch):
    """Serve giving up on its proxy inside the two-node fixture (as it did on a busy machine): the
    error reaches the test, no process of that cluster outlives it, and the next service test's own
    Ray and Serve start and answer."""
    import httpx
    import ray

    from grogu.apps.serve.config import ServeConfig

    def give_up(**options):
        raise TimeoutError("HTTP proxies not available after 60s. (simulated)")

    config = ServeConfig(model=model_dir, device="cpu", max_batch_size=8, batch_wait_s=0.02)
    sessions: list[str] = []
    monkeypatch.setattr(testing, "start_serve", give_up)
    with pytest.raises(TimeoutError, match="simulated"):
        with two_node_service(config, sessions=sessions):
            pass
    monkeypatch.undo()
    assert len(sessions) == 1 and not ray.is_initialized()
    deadline = time.monotonic() + 20
    while _processes_naming(sessions[0]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _processes_naming(sessions[0]) == []  # no raylet, GCS or worker of it is left
    with testing.local_service(config) as url:
        body = {"query": "Where is the river?", "documents": ["The river is near the castle."], "max_new_tokens": N}
        r = httpx.post(f"{url}/score", json=body, timeout=120)
    assert r.status_code == 200 and len(r.json()["results"]) == 1
