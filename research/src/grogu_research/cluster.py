"""A two-node Ray cluster on one machine, the scoring service across it, and mixed load while the
worker node is lost.

:func:`two_node_service` starts a head node and a worker node (``ray.cluster_utils.Cluster``, which
Ray's own fault-tolerance tests use to run several nodes on one host; 127.0.0.1 only), then ``grogu
serve``'s application with one replica on each node (``max_replicas_per_node=1``) behind the head's
HTTP proxy. :func:`node_loss_load` sends a steady mixed load, kills the worker node's raylet when a
share of the requests is done, adds a new worker node, and counts every request's outcome.

Used by ``tests/test_serve_cluster.py`` (a small load on the tiny model, every CI run) and
``benchmarks/serve_cluster.py`` (the full load, by hand).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import httpx

#: the load's routes, in turn: grogu's own /score and /rerank, and Cohere's /v2/rerank
ROUTES = ("score", "rerank", "v2")


@dataclass
class TwoNodes:
    """A running two-node cluster and the service on it (``url``)."""

    url: str
    cluster: Any
    worker: Any
    app: str = "grogu"
    killed: list = field(default_factory=list)  # killed nodes whose processes are not cleaned up yet
    lost: list = field(default_factory=list)  # ids of the nodes killed (Ray may count them alive a while)

    def replicas(self) -> list[tuple[str, int]]:
        """(node id, process id) of each live replica of the service on a live node (Ray's actor table),
        none on a node killed here."""
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]} - set(self.lost)
        return sorted(
            (a["Address"]["NodeID"], a["Pid"])
            for a in ray._private.state.actors().values()
            if a["State"] == "ALIVE"
            and a["ActorClassName"].startswith("ServeReplica:")
            and self.app in a["ActorClassName"]
            and a["Address"]["NodeID"] in alive
        )

    def replica_nodes(self) -> list[str]:
        """The node id of each live replica of the service on a live node."""
        return [node for node, _ in self.replicas()]

    def running_replicas(self) -> int:
        from ray import serve

        status = serve.status().applications[self.app].deployments
        return sum(d.replica_states.get("RUNNING", 0) for d in status.values())

    def kill_worker_node(self) -> list[int]:
        """The worker node goes away at once, as a machine that loses power: SIGKILL its raylet and every
        process the raylet started (its workers, the replica among them). Returns the pids killed."""
        import ray

        raylet = self.worker.all_processes[ray._private.ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
        pids = [raylet, *_descendants(raylet)]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.killed.append(self.worker)
        self.lost.append(self.worker.node_id)
        return pids

    def rejoin(self, num_cpus: int = 1) -> None:
        """Clean up the lost node's remaining processes and add a new worker node in its place."""
        for node in self.killed:
            with contextlib.suppress(Exception):
                self.cluster.remove_node(node, allow_graceful=False)
        self.killed.clear()
        self.worker = self.cluster.add_node(num_cpus=num_cpus)

    def wait_for_replicas(self, n: int = 2, timeout: float = 180.0) -> float:
        """Seconds until ``n`` replicas run on ``n`` distinct nodes (TimeoutError past ``timeout``)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            nodes = self.replica_nodes()
            if self.running_replicas() >= n and len(set(nodes)) >= n:
                return time.monotonic() - start
            time.sleep(0.5)
        raise TimeoutError(f"{n} replicas on {n} nodes not running after {timeout} s: nodes {self.replica_nodes()}")


@contextlib.contextmanager
def two_node_cluster(
    *, cpus_per_node: int = 1, env: dict[str, str] | None = None, sessions: list[str] | None = None
) -> Iterator[TwoNodes]:
    """A head and a worker node of ``cpus_per_node`` CPUs each on this machine, this process connected
    as the driver in a namespace of its own; ``env`` (with Ray Serve's patient settings,
    :data:`~grogu_research.testing.PATIENT_SERVE_ENV`) is set for the nodes' processes. Whatever happens
    inside, every process of the cluster is shut down after. ``sessions``: the cluster's session folder
    is appended to it as soon as the head exists (every process of the cluster names it)."""
    import ray
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    from .testing import patient_serve_env

    # Ray resolves a loopback address to the machine's own IP unless clusters are "off" (its setting for
    # machines without multi-node support): so every process here, this one included, keeps to loopback
    env = {**(env or {}), ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR: "0"}
    with patient_serve_env(env):  # the nodes' processes inherit it
        saved_flag, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
        cluster = None
        try:
            cluster = Cluster(
                initialize_head=True,
                head_node_args={"num_cpus": cpus_per_node, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
            )
            if sessions is not None:
                sessions.append(cluster.head_node.get_session_dir_path())
            worker = cluster.add_node(num_cpus=cpus_per_node, node_ip_address="127.0.0.1")
            ray.init(address=cluster.address, log_to_driver=False, namespace="grogu-two-nodes")
            yield TwoNodes("", cluster, worker)
        finally:
            ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            ray_constants.ENABLE_RAY_CLUSTER = saved_flag


@contextlib.contextmanager
def two_node_service(
    config: Any,
    *,
    cpus_per_node: int = 1,
    request_timeout_s: float = 300,
    header_timeout_s: float = 10.0,
    sessions: list[str] | None = None,
) -> Iterator[TwoNodes]:
    """:func:`two_node_cluster` with the application of ``config`` (a
    :class:`grogu.apps.serve.config.ServeConfig`): two replicas of 1 CPU, one per node, behind the head
    node's proxy (configured as ``grogu serve`` configures it), Serve waited for until its proxy is ready
    (:func:`~grogu_research.testing.start_serve`). Shuts all down after, whatever happens."""
    from ray import serve

    from grogu.apps.serve.proxy import http_options, proxy_environment
    from grogu.apps.serve.service import build_app

    from .testing import free_port, start_serve

    env = proxy_environment(max_body_bytes=config.max_body_bytes, header_timeout_s=header_timeout_s)
    # the proxy would send every request to the replica on its own node while that one keeps up: spread
    # them, so that the lost node's replica has requests in flight
    env["RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING"] = "0"
    with two_node_cluster(cpus_per_node=cpus_per_node, env=env, sessions=sessions) as nodes:
        port = free_port()
        try:
            start_serve(
                proxy_location="HeadOnly",  # one proxy: both nodes share this machine's ports
                http_options=http_options(
                    "127.0.0.1", port, request_timeout_s=request_timeout_s, keep_alive_timeout_s=5
                ),
            )
            serve.run(build_app(config, num_replicas=2, max_replicas_per_node=1), name=nodes.app, route_prefix="/")
            nodes.url = f"http://127.0.0.1:{port}"
            nodes.wait_for_replicas(2)
            yield nodes
        finally:
            with contextlib.suppress(Exception):
                serve.shutdown()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux: from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ray_nodes() -> list[dict]:
    import ray

    return ray.nodes()


def request_body(route: str, query: str, docs: list[dict], max_new_tokens: int) -> dict:
    """The JSON body of one load request on ``route`` (one of :data:`ROUTES`)."""
    if route == "v2":
        return {"query": query, "documents": [d["text"] for d in docs], "top_n": 2}
    body = {"query": query, "documents": docs, "max_new_tokens": max_new_tokens}
    return body | ({"top_n": 2} if route == "rerank" else {})


def path(route: str) -> str:
    return {"score": "/score", "rerank": "/rerank", "v2": "/v2/rerank"}[route]


def expected_answers(scorer: Any, work: list[tuple[str, str, list[dict]]]) -> list[Any]:
    """What an in-process ``scorer`` gives each (route, query, docs): per document (answer, score) for
    /score, the kept indices for the reranks. /v2/rerank (Cohere's request: no answer budget) runs with
    the scorer's defaults, as the service does."""
    from grogu import UtilityScorer

    defaults = UtilityScorer(scorer.target)
    out = []
    for route, query, docs in work:
        if route == "score":
            out.append([(r.answer, r.score) for r in scorer.score(query, docs)])
        elif route == "rerank":
            out.append([r.index for r in scorer.rerank(query, docs, top_n=2)])
        else:
            out.append([r.index for r in defaults.rerank(query, [d["text"] for d in docs], top_n=2)])
    return out


def matches(route: str, data: dict, want: Any, tol: float = 1e-4) -> bool:
    """Whether a 200 answer equals the in-process one (:func:`expected_answers`)."""
    rows = data["results"]
    if route == "score":
        return len(rows) == len(want) and all(
            r["answer"] == a and abs(r["score"] - s) <= tol for r, (a, s) in zip(rows, want)
        )
    return [r["index"] for r in rows] == want


def node_loss_load(
    nodes: TwoNodes,
    work: list[tuple[str, str, list[dict]]],
    want: list[Any],
    *,
    clients: int = 4,
    requests: int = 300,
    kill_after: float = 0.3,
    rejoin_after_s: float = 5.0,
    max_new_tokens: int = 8,
    token: str | None = None,
    timeout: float = 300.0,
    on_event: Callable[[str], None] | None = None,
) -> dict:
    """``clients`` threads send ``requests`` requests in all, request ``j`` being ``work[j % len(work)]``;
    when ``kill_after`` of them are answered the worker node's raylet is killed, and ``rejoin_after_s``
    later a new worker node joins. Each request is sent once; a 503 with Retry-After is retried once
    after its wait. Returns the count of each outcome, the retries' outcomes, and the recovery times."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    outcomes: dict[str, int] = {}
    retried: dict[str, int] = {}
    answered = [0] * requests  # responses per request: each must be exactly 1
    wrong: list = []  # (route, work index, answer, in-process answer) of each wrong answer
    lock = threading.Lock()
    next_j = iter(range(requests))
    done = [0]
    events: dict[str, float] = {}
    killed = threading.Event()
    start = time.monotonic()

    def note(what: str) -> None:
        events[what] = round(time.monotonic() - start, 2)
        if on_event:
            on_event(f"{events[what]:7.1f} s  {what}")

    def classify(route: str, r: httpx.Response | None, exc: Exception | None, j: int) -> str:
        if exc is not None:
            return f"exception {type(exc).__name__}"
        if r.status_code == 200:
            if matches(route, r.json(), want[j % len(want)]):
                return "correct"
            wrong.append((route, j % len(want), r.json(), want[j % len(want)]))
            return f"wrong answer ({path(route)})"
        if r.status_code == 503 and r.headers.get("retry-after"):
            return "503 with Retry-After"
        return f"status {r.status_code}"

    def send(client: httpx.Client, route: str, body: dict) -> tuple[httpx.Response | None, Exception | None]:
        try:
            return client.post(path(route), json=body, headers=headers, timeout=timeout), None
        except httpx.HTTPError as exc:
            return None, exc

    def worker() -> None:
        with httpx.Client(base_url=nodes.url) as client:
            for j in next_j:
                route, query, docs = work[j % len(work)]
                body = request_body(route, query, docs, max_new_tokens)
                r, exc = send(client, route, body)
                kind = classify(route, r, exc, j)
                with lock:
                    answered[j] += r is not None
                    outcomes[kind] = outcomes.get(kind, 0) + 1
                if kind == "503 with Retry-After":
                    time.sleep(float(r.headers["retry-after"]))
                    r2, exc2 = send(client, route, body)
                    kind2 = classify(route, r2, exc2, j)
                    with lock:
                        retried[kind2] = retried.get(kind2, 0) + 1
                with lock:
                    done[0] += 1
                    if done[0] >= kill_after * requests or done[0] == requests:
                        killed.set()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    # the node's kill and rejoin run here: Ray adds nodes from the main thread only
    while not killed.wait(0.2) and any(t.is_alive() for t in threads):
        pass  # (clients that all failed before the kill end the wait: their requests count as lost)
    if killed.is_set() and done[0] < requests:
        before = nodes.replicas()
        lost_node = nodes.worker.node_id
        replica = next(pid for node, pid in before if node == lost_node)
        pids = nodes.kill_worker_node()
        note(f"killed the worker node: its raylet and {len(pids) - 1} processes below it, the replica among them")
        deadline = time.monotonic() + rejoin_after_s
        while time.monotonic() < deadline and (replica is not None or lost_node is not None):
            if replica is not None and not _alive(replica):
                note(f"the worker node's replica (pid {replica}) is gone")
                replica = None
            if lost_node is not None and lost_node not in {n["NodeID"] for n in _ray_nodes() if n["Alive"]}:
                note("Ray marked the worker node dead")
                lost_node = None
            time.sleep(0.1)
        time.sleep(max(0.0, deadline - time.monotonic()))
        nodes.rejoin()
        note("a new worker node joined")
        nodes.wait_for_replicas(2)
        note("two replicas run again, one per node")
    for t in threads:
        t.join()
    return {
        "requests": requests,
        "clients": clients,
        "outcomes": outcomes,
        "retried_once": retried,
        "responses_per_request": sorted(set(answered)),
        "lost": requests - sum(outcomes.values()),
        "events_s": events,
        "seconds": round(time.monotonic() - start, 1),
        "wrong": wrong,
    }


def _lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def score_with_node_loss(
    nodes: TwoNodes,
    argv: list[str],
    out: str,
    *,
    kill_after_records: int,
    rejoin_after_s: float = 5.0,
    timeout: float = 900.0,
    on_event: Callable[[str], None] | None = None,
) -> dict:
    """``grogu score`` with ``argv`` (``--ray`` on this cluster, writing ``out``) in a thread; when ``out``
    holds ``kill_after_records`` records the worker node is killed, and ``rejoin_after_s`` later a new
    one joins. When the run fails it is run again, which resumes from the records written (a run still
    going ``timeout`` seconds after the kill is reported as such, and not run again beside itself).
    Returns what happened, with times."""
    from grogu.apps.cli import main

    start = time.monotonic()
    events: dict[str, float] = {}

    def note(what: str) -> None:
        events[what] = round(time.monotonic() - start, 2)
        if on_event:
            on_event(f"{events[what]:7.1f} s  {what}")

    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["exit"] = main(argv)
        except BaseException as exc:  # noqa: BLE001 - the run's failure is the measurement
            result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while thread.is_alive() and _lines(out) < kill_after_records:
        time.sleep(0.1)
    records_at_kill = _lines(out)
    killed = thread.is_alive()
    if killed:
        pids = nodes.kill_worker_node()
        note(f"killed the worker node at {records_at_kill} records ({len(pids)} processes)")
        time.sleep(rejoin_after_s)
        nodes.rejoin()
        note("a new worker node joined")
    thread.join(timeout)
    first = {"finished": not thread.is_alive(), **result}
    note("the first run " + ("ended" if first["finished"] else f"had not ended after {timeout} s"))
    resumed = None
    if first["finished"] and "error" in first:
        before = _lines(out)
        rc = main(argv)  # a crashed or stuck run: the rerun keeps the records written and scores the rest
        resumed = {"records_kept": before, "exit": rc}
        note("the resumed run ended")
    return {
        "killed": killed,
        "records_at_kill": records_at_kill,
        "first_run": first,
        "resumed_run": resumed,
        "events_s": events,
        "seconds": round(time.monotonic() - start, 1),
    }
