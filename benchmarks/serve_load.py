"""Load on the scoring service: concurrent clients against one replica, then a replica killed mid-load.

  python benchmarks/serve_load.py                       # embedded SmolLM2, 16 clients x 50 requests
  python benchmarks/serve_load.py --model tiny          # the tiny random test model (fast)

Steps (one local Ray, one Serve application with ONE replica of 1 CPU; torch on 1 thread everywhere):
1. The work: ``--items`` distinct (query, documents) requests from real SQuAD dev paragraphs (each
   query with its own paragraph and ``--docs - 1`` others); client c sends item (c + j) mod items as
   its j-th request, so concurrent requests differ.
2. Reference: one in-process ``UtilityScorer`` scores every item; then the same scorer is timed on the
   clients' whole workload, one request after the other (what one application process does alone),
   and with the clients' concurrency through its async API (requests coalesced in-process).
3. Load: ``--clients`` threads, each with its own ``RemoteScorer``, send ``--requests`` requests each,
   back to back. Every response is checked against the reference of its item (same answers, scores
   within 1e-4): none lost, none mixed up. Throughput, p50/p95 latency, and the batch sizes the
   replica saw (its /stats before and after).
4. The same load again; when 30 % of the requests are done the replica's process is killed (SIGKILL).
   Ray Serve starts a new replica; the clients retry (connection errors, 502/503/504) with backoff.
   Every request must complete exactly once with the right result; reported: retries, requests that
   saw an error, and recovery time (kill -> the service answers /health again, and -> the first
   request sent after the kill is answered).
Prints one JSON object with every figure (and writes it to ``--json`` when given).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings

import httpx
import numpy as np

import grogu
from grogu import testing
from grogu.models import DEFAULT_MODEL
from grogu.serve import RemoteScorer

TOL = 1e-4


def work_items(n: int, docs: int) -> list[tuple[str, list[dict]]]:
    paras = testing.squad_paragraphs(n + docs, seed=11)
    items = []
    for i in range(n):
        own = paras[i]
        others = [paras[n + (i + j) % docs] for j in range(docs - 1)]
        items.append((own["question"], [{"text": " ".join(p["text"].split()[:60]), "title": p["title"]}
                                        for p in [own, *others]]))
    return items


def check(result, reference) -> None:
    assert [r.answer for r in result] == [r.answer for r in reference], "answers differ"
    assert all(abs(a.score - b.score) <= TOL for a, b in zip(result, reference)), "scores differ"


def stats(url: str) -> dict:
    return httpx.get(f"{url}/stats", timeout=30).json()


def load(url: str, items, reference, clients: int, requests: int, kill_at: float | None = None) -> dict:
    """Run the clients; with ``kill_at``, SIGKILL the replica when that fraction of requests is done."""
    done = [0]
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    answered: dict[tuple[int, int], int] = {}
    scorers = [RemoteScorer(url, max_new_tokens=reference.max_new_tokens, retries=8, backoff=0.25, timeout=120)
               for _ in range(clients)]
    kill_time: list[float] = []
    first_after_kill: list[float] = []

    def client(c: int) -> None:
        for j in range(requests):
            q, docs = items[(c + j) % len(items)]
            sent = time.perf_counter()
            try:
                result = scorers[c].score(q, docs)
                check(result, reference.results[(c + j) % len(items)])
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"client {c} request {j}: {type(exc).__name__}: {exc}")
                continue
            end = time.perf_counter()
            with lock:
                latencies.append(end - sent)
                answered[(c, j)] = answered.get((c, j), 0) + 1
                done[0] += 1
                if kill_time and sent > kill_time[0] and not first_after_kill:
                    first_after_kill.append(end)

    before = stats(url)
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    health_back = None
    if kill_at is not None:
        total = clients * requests
        while done[0] < kill_at * total:
            time.sleep(0.02)
        os.kill(before["pid"], signal.SIGKILL)
        kill_time.append(time.perf_counter())
        while health_back is None:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200 and stats(url)["pid"] != before["pid"]:
                    health_back = time.perf_counter()
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    after = stats(url)
    if kill_at is None:
        sizes = {k: v - before["batch_sizes"].get(k, 0) for k, v in after["batch_sizes"].items()}
    else:  # a new replica: its counters started at 0 (the killed one's batches are lost with it)
        sizes = dict(after["batch_sizes"])
    sizes = {int(k): v for k, v in sizes.items() if v}
    lat = np.array(latencies)
    out = {
        "requests": clients * requests, "completed": len(answered),
        "completed_exactly_once": all(v == 1 for v in answered.values()) and len(answered) == clients * requests,
        "errors": len(errors), "error_examples": errors[:3], "wall_s": round(wall, 2),
        "throughput_req_s": round(len(answered) / wall, 2),
        "latency_p50_s": round(float(np.percentile(lat, 50)), 3) if len(lat) else None,
        "latency_p95_s": round(float(np.percentile(lat, 95)), 3) if len(lat) else None,
        "retries": sum(s.transport.retried for s in scorers),
        "batch_sizes": dict(sorted(sizes.items())),
        "mean_batch_size": round(sum(k * v for k, v in sizes.items()) / max(sum(sizes.values()), 1), 2),
    }
    if kill_at is not None:
        out["recovery_health_s"] = round(health_back - kill_time[0], 2)
        out["recovery_first_answer_s"] = round(first_after_kill[0] - kill_time[0], 2) if first_after_kill else None
    return out


class Reference:
    def __init__(self, scorer: grogu.UtilityScorer, items) -> None:
        self.scorer, self.max_new_tokens = scorer, scorer.max_new_tokens
        self.results = [scorer.score(q, d) for q, d in items]


def in_process(ref: Reference, items, clients: int, requests: int) -> dict:
    """One in-process scorer fed the clients' workload: one request after the other, then concurrently
    through the async API (the in-process coalescer)."""
    work = [(c, j) for c in range(clients) for j in range(requests)]
    start = time.perf_counter()
    for c, j in work:
        check(ref.scorer.score(*items[(c + j) % len(items)]), ref.results[(c + j) % len(items)])
    sequential = time.perf_counter() - start

    async def run() -> None:
        async def one_client(c: int) -> None:
            for j in range(requests):
                q, d = items[(c + j) % len(items)]
                check(await ref.scorer.ascore(q, d), ref.results[(c + j) % len(items)])
        await asyncio.gather(*(one_client(c) for c in range(clients)))

    start = time.perf_counter()
    asyncio.run(run())
    concurrent = time.perf_counter() - start
    return {"sequential_req_s": round(len(work) / sequential, 2), "sequential_wall_s": round(sequential, 2),
            "async_concurrent_req_s": round(len(work) / concurrent, 2), "async_concurrent_wall_s": round(concurrent, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=DEFAULT_MODEL, help="a model spec, or 'tiny' (the test model)")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests", type=int, default=50, help="requests per client")
    p.add_argument("--items", type=int, default=40, help="distinct (query, documents) requests")
    p.add_argument("--docs", type=int, default=2, help="documents per request")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--batch-wait-ms", type=float, default=10.0)
    p.add_argument("--skip-in-process", action="store_true", help="skip the in-process throughput runs")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)

    import ray
    import torch
    from ray import serve

    from grogu.serve.service import ServeConfig, build_app

    torch.set_num_threads(1)
    model = args.model
    if model == "tiny":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = testing.save_tiny_model(tempfile.mkdtemp(prefix="grogu-tiny-"))
    items = work_items(args.items, args.docs)
    figures: dict = {"machine": "2-core CPU, 1 torch thread", "model": args.model, "clients": args.clients,
                     "requests_per_client": args.requests, "docs_per_request": args.docs,
                     "max_new_tokens": args.max_new_tokens, "max_batch_size": args.max_batch_size,
                     "batch_wait_ms": args.batch_wait_ms}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Reference(grogu.UtilityScorer(model, device="cpu", max_new_tokens=args.max_new_tokens), items)
    if not args.skip_in_process:
        figures["in_process"] = in_process(ref, items, args.clients, args.requests)
        print(json.dumps({"in_process": figures["in_process"]}), file=sys.stderr, flush=True)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(model=model, device="cpu", max_batch_size=args.max_batch_size,
                             batch_wait_s=args.batch_wait_ms / 1000, max_docs=64)
        serve.run(build_app(config, num_replicas=1, num_cpus=1), name="load", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        RemoteScorer(url, max_new_tokens=args.max_new_tokens).score(*items[0])  # warm the replica up
        figures["service"] = load(url, items, ref, args.clients, args.requests)
        print(json.dumps({"service": figures["service"]}), file=sys.stderr, flush=True)
        figures["service_replica_killed"] = load(url, items, ref, args.clients, args.requests, kill_at=0.3)
    finally:
        serve.shutdown()
        ray.shutdown()
    if "in_process" in figures:
        figures["speedup_vs_in_process_sequential"] = round(
            figures["service"]["throughput_req_s"] / figures["in_process"]["sequential_req_s"], 2)
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
