"""The scoring service across a two-node Ray cluster on this machine, under load while the worker node is
lost (grogu_research.cluster). The full load (300 requests on SmolLM2): benchmarks/serve_cluster.py."""

from __future__ import annotations

import warnings

import pytest
from grogu_research import testing
from grogu_research.cluster import ROUTES, expected_answers, node_loss_load, two_node_service

import grogu

pytestmark = pytest.mark.slow

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
