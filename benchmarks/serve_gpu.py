"""The scoring service on a GPU: the same documents as in process, and its throughput with concurrent clients.

``--questions`` held-out SQuAD questions, each with the 5 paragraphs an earlier run retrieved (``--retrieved``,
from ``pipeline_accuracy.py latency --save-retrieved``: no embedder runs here). The embedded SmolLM2 keeps 3
in the default mode, three ways on the same inputs:

- in process (``UtilityScorer.rerank``);
- through one local ``grogu serve`` replica holding one GPU (``--gpus-per-replica 1``): ``POST /rerank``
  (``RemoteScorer.rerank``) and ``POST /v2/rerank``, each question once, one serial caller;
- then the same requests again from ``--clients`` concurrent clients.

Reports how many questions keep the same documents, in the same order, on each route as in process; the
serial caller's and the concurrent clients' requests a second, and their ratio.

  python benchmarks/serve_gpu.py --retrieved retrieved_squad.json --device cuda --json serve_gpu.json
  python benchmarks/serve_gpu.py --retrieved retrieved_squad.json --device cpu --questions 2 --clients 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pipeline_accuracy import squad_questions  # noqa: E402
from record_meta import meta  # noqa: E402

TOP_N, TOP_K = 3, 5


def inputs(retrieved_path: str, n: int) -> list[tuple[str, list[dict]]]:
    """(question, its retrieved paragraphs as {"text", "title"}) for the first ``n`` saved questions."""
    saved = json.load(open(retrieved_path))
    pool, questions = squad_questions("held", max(n, len(saved)), 0)
    by_id = {p["id"]: p for p in pool}
    out = []
    for q in questions:
        if q["question"] in saved:
            hits = saved[q["question"]][:TOP_K]
            out.append((q["question"], [{"text": by_id[i]["text"], "title": by_id[i]["title"]} for i, _ in hits]))
    if len(out) < n:
        raise SystemExit(f"{retrieved_path} holds {len(out)} of the questions, {n} asked for")
    return out[:n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--retrieved", required=True)
    p.add_argument("--questions", type=int, default=30)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    warnings.filterwarnings("ignore")

    import httpx
    import ray
    from ray import serve

    import grogu
    from grogu.apps.serve.service import ServeConfig, build_app

    items = inputs(args.retrieved, args.questions)
    scorer = grogu.UtilityScorer(grogu.DEFAULT_MODEL, device=args.device, dtype=args.dtype)
    local = [[r.index for r in scorer.rerank(q, docs, top_n=TOP_N)] for q, docs in items]
    del scorer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gpus = 1 if args.device.startswith("cuda") else 0
    ray.init(num_cpus=max(2, min(os.cpu_count() or 2, 8)), num_gpus=gpus, include_dashboard=False, log_to_driver=False)
    figures: dict = {"questions": len(items), "clients": args.clients, "device": args.device}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(model=grogu.DEFAULT_MODEL, device=args.device, dtype=args.dtype)
        serve.run(build_app(config, num_replicas=1, num_cpus=1, num_gpus=gpus), name="gpu", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        remote = grogu.RemoteScorer(url, timeout=600)
        figures["info"] = remote.info()
        remote.rerank(*items[0], top_n=TOP_N)  # warm-up

        def v2(q: str, docs: list[dict]) -> list[int]:
            body = {"model": figures["info"]["model"], "query": q, "documents": docs}  # objects: text and title
            answer = httpx.post(url + "/v2/rerank", json={**body, "top_n": TOP_N}, timeout=600).json()
            return [r["index"] for r in answer["results"]]

        t0 = time.perf_counter()
        served = [[r.index for r in remote.rerank(q, docs, top_n=TOP_N)] for q, docs in items]
        serial_s = time.perf_counter() - t0
        compatible = [v2(q, docs) for q, docs in items]
        figures["same_documents_rerank"] = sum(a == b for a, b in zip(local, served))
        figures["same_documents_v2_rerank"] = sum(a == b for a, b in zip(local, compatible))
        figures["serial_req_s"] = len(items) / serial_s

        results: dict[int, list[int]] = {}
        work = list(enumerate(items))
        lock = threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    if not work:
                        return
                    i, (q, docs) = work.pop()
                results[i] = [r.index for r in remote.rerank(q, docs, top_n=TOP_N)]

        t0 = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        concurrent_s = time.perf_counter() - t0
        figures["concurrent_req_s"] = len(items) / concurrent_s
        figures["concurrent_same_as_serial"] = sum(results[i] == served[i] for i in range(len(items)))
        figures["throughput_ratio"] = figures["concurrent_req_s"] / figures["serial_req_s"]
    finally:
        serve.shutdown()
        ray.shutdown()
    figures["records"] = [
        {"question": q, "in_process": a, "rerank": b, "v2_rerank": c}
        for (q, _), a, b, c in zip(items, local, served, compatible)
    ]
    print(json.dumps({k: v for k, v in figures.items() if k != "records"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**figures, "meta": meta(settings=settings)}, f, indent=1)


if __name__ == "__main__":
    main()
