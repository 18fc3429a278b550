"""Load on the scoring service: concurrent clients against one replica, then a replica killed mid-load.

  python benchmarks/serve_load.py                       # embedded SmolLM2, 16 clients x 50 requests
  python benchmarks/serve_load.py --model tiny          # the tiny random test model (fast)
  python benchmarks/serve_load.py --model tiny --scenario fairness,memory --skip-in-process

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
5. ``--scenario fairness``: 15 light clients (the requests of step 3) with one heavy client among them
   (``--heavy-docs`` documents, ``--heavy-tokens`` answer tokens per request, back to back): the light
   clients' p50/p95/max latency, next to the same 15 light clients alone.
6. ``--scenario memory``: four authorised requests of ``--oversized-mb`` MB at once (one document that
   large, a valid JSON body): their status codes, and the replica's resident memory before and at its
   peak while they are in flight (sampled every 20 ms).
7. ``--scenario sustained``: ``--sustained-clients`` clients (default 4) for ``--minutes`` (default 10),
   each cycling through /score, /rerank and /v2/rerank, small (``--docs`` documents) and large (four
   times as many) in turn. Every /score answer is checked against the reference; a rerank must keep
   documents it was given. Reported: requests per second, p50 / p99 latency, errors by kind, and the
   replica's resident memory at the start (after a minute of this load), the middle and the end,
   sampled every 5 s. Growth over 5 % from the start to the end counts as a leak.
``--scenario`` takes a comma-separated list of load, fairness, memory, sustained (default: load).
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
from grogu_research import testing

import grogu
from grogu.apps.serve import RemoteScorer
from grogu.runtime.models import DEFAULT_MODEL

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

TOL = 1e-4


def work_items(n: int, docs: int) -> list[tuple[str, list[dict]]]:
    paras = testing.squad_paragraphs(n + docs, seed=11)
    items = []
    for i in range(n):
        own = paras[i]
        others = [paras[n + (i + j) % docs] for j in range(docs - 1)]
        items.append(
            (own["question"], [{"text": " ".join(p["text"].split()[:60]), "title": p["title"]} for p in [own, *others]])
        )
    return items


def check(result, reference) -> None:
    assert [r.answer for r in result] == [r.answer for r in reference], "answers differ"
    assert all(abs(a.score - b.score) <= TOL for a, b in zip(result, reference)), "scores differ"


def replica_pid(url: str) -> int:
    """The replica's process id (/stats shows it when the service runs with stats_pids=True)."""
    return int(stats(url)["pid"])


def stats(url: str) -> dict:
    return httpx.get(f"{url}/stats", timeout=30).json()


def load(url: str, items, reference, clients: int, requests: int, kill_at: float | None = None) -> dict:
    """Run the clients; with ``kill_at``, SIGKILL the replica when that fraction of requests is done."""
    done = [0]
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []
    answered: dict[tuple[int, int], int] = {}
    scorers = [
        RemoteScorer(url, max_new_tokens=reference.max_new_tokens, retries=8, backoff=0.25, timeout=120)
        for _ in range(clients)
    ]
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
        os.kill(replica_pid(url), signal.SIGKILL)
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
        "requests": clients * requests,
        "completed": len(answered),
        "completed_exactly_once": all(v == 1 for v in answered.values()) and len(answered) == clients * requests,
        "errors": len(errors),
        "error_examples": errors[:3],
        "wall_s": round(wall, 2),
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


def fairness(
    url: str, items, reference, clients: int, requests: int, heavy_docs: int, heavy_tokens: int, heavy: bool
) -> dict:
    """``clients - 1`` light clients (``requests`` each, back to back), with or without one heavy client
    sending ``heavy_docs`` documents x ``heavy_tokens`` answer tokens until the light ones are done."""
    light = clients - 1
    scorers = [RemoteScorer(url, max_new_tokens=reference.max_new_tokens, timeout=600) for _ in range(light)]
    heavy_docs_list = [d for _, docs in items for d in docs][:heavy_docs]
    heavy_scorer = RemoteScorer(url, max_new_tokens=heavy_tokens, timeout=600)
    latencies: list[float] = []
    heavy_lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    finished = threading.Event()

    def client(c: int) -> None:
        for j in range(requests):
            q, docs = items[(c + j) % len(items)]
            sent = time.perf_counter()
            try:
                check(scorers[c].score(q, docs), reference.results[(c + j) % len(items)])
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"light {c}: {type(exc).__name__}: {exc}")
                continue
            with lock:
                latencies.append(time.perf_counter() - sent)

    def heavy_client() -> None:
        j = 0
        while not finished.is_set():
            sent = time.perf_counter()
            try:
                heavy_scorer.score(f"Heavy question {j}: what do these passages say?", heavy_docs_list)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"heavy: {type(exc).__name__}: {exc}")
                return
            heavy_lat.append(time.perf_counter() - sent)
            j += 1

    threads = [threading.Thread(target=client, args=(c,)) for c in range(light)]
    hthread = threading.Thread(target=heavy_client) if heavy else None
    start = time.perf_counter()
    if hthread:
        hthread.start()
        time.sleep(0.5)  # the heavy request is in the engine when the light ones arrive
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    finished.set()
    if hthread:
        hthread.join()
    lat = np.array(latencies)
    out = {
        "light_clients": light,
        "light_requests": light * requests,
        "light_completed": len(latencies),
        "errors": len(errors),
        "error_examples": errors[:3],
        "wall_s": round(wall, 2),
        "light_p50_s": round(float(np.percentile(lat, 50)), 3) if len(lat) else None,
        "light_p95_s": round(float(np.percentile(lat, 95)), 3) if len(lat) else None,
        "light_max_s": round(float(lat.max()), 3) if len(lat) else None,
    }
    if heavy:
        out.update(
            {
                "heavy_docs": heavy_docs,
                "heavy_tokens": heavy_tokens,
                "heavy_completed": len(heavy_lat),
                "heavy_mean_s": round(float(np.mean(heavy_lat)), 2) if heavy_lat else None,
            }
        )
    return out


def oversized(url: str, n: int, megabytes: int) -> dict:
    """``n`` requests of ``megabytes`` MB at once; the replica's RSS before and at its peak meanwhile."""
    import psutil

    proc = psutil.Process(replica_pid(url))
    body = json.dumps({"query": "q", "documents": ["x" * (megabytes * 1_000_000)]}).encode()
    outcomes: list[str] = []
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            try:
                peak[0] = max(peak[0], proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(0.02)

    def send() -> None:
        t0 = time.perf_counter()
        try:
            r = httpx.post(f"{url}/score", content=body, headers={"content-type": "application/json"}, timeout=120)
            outcomes.append(f"{r.status_code} in {time.perf_counter() - t0:.2f}s: {r.text[:120]}")
        except httpx.HTTPError as exc:
            outcomes.append(f"{type(exc).__name__} in {time.perf_counter() - t0:.2f}s")

    sampler = threading.Thread(target=sample)
    sampler.start()
    senders = [threading.Thread(target=send) for _ in range(n)]
    start = time.perf_counter()
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    wall = time.perf_counter() - start
    time.sleep(0.3)
    done.set()
    sampler.join()
    return {
        "requests": n,
        "body_mb": round(len(body) / 1e6, 1),
        "outcomes": outcomes,
        "wall_s": round(wall, 2),
        "replica_rss_before_mb": round(base / 2**20),
        "replica_rss_peak_mb": round(peak[0] / 2**20),
        "replica_rss_after_mb": round(proc.memory_info().rss / 2**20),
    }


def sustained(url: str, items, ref, clients: int, minutes: float, max_new_tokens: int) -> dict:
    """Mixed load for ``minutes``: see step 7 of the module docstring."""
    import psutil

    proc = psutil.Process(replica_pid(url))
    large = [(q, d + [x for _, other in items[i + 1 : i + 4] for x in other]) for i, (q, d) in enumerate(items)]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    counts: dict[str, int] = {}
    lock = threading.Lock()
    warm_up, total = 60.0, 60.0 + minutes * 60
    start = time.perf_counter()
    memory: list[tuple[float, int]] = []

    def client(c: int) -> None:
        remote = RemoteScorer(url, max_new_tokens=max_new_tokens, retries=0)
        j = 0
        while time.perf_counter() - start < total:
            i = (c + j) % len(items)
            route, big = ("score", "rerank", "v2")[j % 3], (j // 3) % 2 == 1
            q, docs = large[i] if big else items[i]
            t0 = time.perf_counter()
            try:
                if route == "score":
                    got = remote.score(q, docs)
                    if not big:
                        check(got, ref.results[i])
                elif route == "rerank":
                    kept = remote.rerank(q, docs, top_n=2)
                    assert kept and all(0 <= r.index < len(docs) for r in kept)
                else:
                    texts = [d["text"] for d in docs]
                    r = httpx.post(f"{url}/v2/rerank", json={"query": q, "documents": texts, "top_n": 2}, timeout=300)
                    r.raise_for_status()
                    assert all(0 <= x["index"] < len(texts) for x in r.json()["results"])
                ok = True
            except Exception as exc:  # noqa: BLE001 - every failure is counted by kind
                ok = False
                with lock:
                    errors[f"{route}: {type(exc).__name__}"] = errors.get(f"{route}: {type(exc).__name__}", 0) + 1
            elapsed = time.perf_counter() - t0
            with lock:
                if ok and t0 - start >= warm_up:
                    latencies.append(elapsed)
                    counts[route] = counts.get(route, 0) + 1
            j += 1

    def sample() -> None:
        while time.perf_counter() - start < total:
            memory.append((time.perf_counter() - start, proc.memory_info().rss))
            time.sleep(5)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    threads.append(threading.Thread(target=sample))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window = [(t, rss) for t, rss in memory if t >= warm_up]
    first, middle, last = window[0][1], window[len(window) // 2][1], window[-1][1]
    lat = np.array(latencies)
    return {
        "clients": clients,
        "minutes_measured": minutes,
        "requests": int(len(lat)),
        "by_route": counts,
        "req_per_s": round(len(lat) / (minutes * 60), 3),
        "p50_s": round(float(np.percentile(lat, 50)), 3),
        "p99_s": round(float(np.percentile(lat, 99)), 3),
        "mean_s": round(float(lat.mean()), 3),
        "errors": errors,
        "replica_rss_mb_start_middle_end": [round(first / 2**20, 1), round(middle / 2**20, 1), round(last / 2**20, 1)],
        "replica_rss_growth_pct": round(100 * (last - first) / first, 2),
        "leak_over_5pct": (last - first) / first > 0.05,
    }


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
    return {
        "sequential_req_s": round(len(work) / sequential, 2),
        "sequential_wall_s": round(sequential, 2),
        "async_concurrent_req_s": round(len(work) / concurrent, 2),
        "async_concurrent_wall_s": round(concurrent, 2),
    }


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
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="generation budget of one engine call (default: the service's, 2048)",
    )
    p.add_argument("--skip-in-process", action="store_true", help="skip the in-process throughput runs")
    p.add_argument("--scenario", default="load", help="comma-separated: load, fairness, memory")
    p.add_argument("--heavy-docs", type=int, default=16, help="fairness: documents per heavy request")
    p.add_argument("--heavy-tokens", type=int, default=500, help="fairness: answer tokens of the heavy requests")
    p.add_argument("--oversized-mb", type=int, default=50, help="memory: size of each oversized request (MB)")
    p.add_argument("--minutes", type=float, default=10.0, help="sustained: minutes measured (after one of warm-up)")
    p.add_argument("--sustained-clients", type=int, default=4, help="sustained: concurrent clients")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    args = p.parse_args(argv)

    import ray
    import torch
    from ray import serve

    from grogu.apps.serve.service import ServeConfig, build_app

    torch.set_num_threads(1)
    model = args.model
    if model == "tiny":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = testing.save_tiny_model(tempfile.mkdtemp(prefix="grogu-tiny-"))
    items = work_items(args.items, args.docs)
    scenarios = set(args.scenario.split(","))
    figures: dict = {
        "machine": "2-core CPU, 1 torch thread",
        "model": args.model,
        "clients": args.clients,
        "requests_per_client": args.requests,
        "docs_per_request": args.docs,
        "max_new_tokens": args.max_new_tokens,
        "max_batch_size": args.max_batch_size,
        "batch_wait_ms": args.batch_wait_ms,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = Reference(grogu.UtilityScorer(model, device="cpu", max_new_tokens=args.max_new_tokens), items)
    if not args.skip_in_process and "load" in scenarios:
        figures["in_process"] = in_process(ref, items, args.clients, args.requests)
        print(json.dumps({"in_process": figures["in_process"]}), file=sys.stderr, flush=True)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # PYTHONPATH (e.g. another checkout's src/ to measure it) reaches the replicas too
    env = {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"]}} if os.environ.get("PYTHONPATH") else None
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=env)
    try:
        from grogu.apps.serve import service as service_module

        figures["grogu_source"] = os.path.dirname(os.path.dirname(service_module.__file__))
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        extra = {"stats_pids": True} if "stats_pids" in ServeConfig.__dataclass_fields__ else {}
        if args.max_batch_tokens:
            extra["max_batch_tokens"] = args.max_batch_tokens
            figures["max_batch_tokens"] = args.max_batch_tokens
        config = ServeConfig(
            model=model,
            device="cpu",
            max_batch_size=args.max_batch_size,
            batch_wait_s=args.batch_wait_ms / 1000,
            max_docs=64,
            **extra,
        )
        serve.run(build_app(config, num_replicas=1, num_cpus=1), name="load", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        RemoteScorer(url, max_new_tokens=args.max_new_tokens).score(*items[0])  # warm the replica up
        if "memory" in scenarios:
            figures["oversized_bodies"] = oversized(url, 4, args.oversized_mb)
            print(json.dumps({"oversized_bodies": figures["oversized_bodies"]}), file=sys.stderr, flush=True)
        if "fairness" in scenarios:
            for heavy in (False, True):
                name = "fairness_with_heavy" if heavy else "fairness_light_only"
                figures[name] = fairness(
                    url, items, ref, args.clients, args.requests, args.heavy_docs, args.heavy_tokens, heavy
                )
                print(json.dumps({name: figures[name]}), file=sys.stderr, flush=True)
        if "sustained" in scenarios:
            figures["sustained"] = sustained(url, items, ref, args.sustained_clients, args.minutes, args.max_new_tokens)
            print(json.dumps({"sustained": figures["sustained"]}), file=sys.stderr, flush=True)
        if "load" in scenarios:
            figures["service"] = load(url, items, ref, args.clients, args.requests)
            print(json.dumps({"service": figures["service"]}), file=sys.stderr, flush=True)
            figures["service_replica_killed"] = load(url, items, ref, args.clients, args.requests, kill_at=0.3)
    finally:
        serve.shutdown()
        ray.shutdown()
    if "in_process" in figures and "service" in figures:
        figures["speedup_vs_in_process_sequential"] = round(
            figures["service"]["throughput_req_s"] / figures["in_process"]["sequential_req_s"], 2
        )
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**figures, "meta": meta(settings=settings)}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
