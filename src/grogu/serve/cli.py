"""``grogu serve``: the scoring service on Ray Serve, one deployment per target model.

  grogu serve                                        # embedded SmolLM2 on http://127.0.0.1:8000
  grogu serve --model Qwen/Qwen2.5-7B-Instruct --gpus-per-replica 1 --replicas 2 --address auto
  GROGU_SERVE_TOKEN=secret grogu serve --host 0.0.0.0  # reachable from other machines: use a token

Without ``--address`` a local Ray starts (and stops with the command); with it the deployments join
that cluster (``auto``: the one this machine belongs to). Ctrl-C (or SIGTERM) deletes the applications.
With several ``--model``, each is served under its own route prefix (``/<name>``, shown at start).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading

from ..models import DEFAULT_MODEL


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli import POSITIVE_INT

    p.add_argument("--model", action="append", default=None,
                   help=f"target LLM (alias, path, .gguf or hub id); repeat to serve several (default {DEFAULT_MODEL})")
    p.add_argument("--device", default=None, help="cpu, cuda ... (default: CUDA when the replica has a GPU)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16, float16 (default: bf16 on CUDA, float32 on CPU)")
    p.add_argument("--replicas", type=POSITIVE_INT, default=1, help="replicas per model (default 1)")
    p.add_argument("--min-replicas", type=int, default=None, help="autoscaling: fewest replicas (turns it on)")
    p.add_argument("--max-replicas", type=POSITIVE_INT, default=None, help="autoscaling: most replicas (turns it on)")
    p.add_argument("--gpus-per-replica", type=float, default=0.0, help="GPUs per replica (fractions share a GPU)")
    p.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs per replica (default 1)")
    p.add_argument("--max-batch-size", type=POSITIVE_INT, default=16, help="requests gathered into one engine batch")
    p.add_argument("--batch-wait-ms", type=float, default=10.0, help="how long a batch waits to fill (ms)")
    p.add_argument("--max-docs", type=POSITIVE_INT, default=256, help="documents per request (413 above)")
    p.add_argument("--max-doc-chars", type=POSITIVE_INT, default=20_000, help="characters per document (413 above)")
    p.add_argument("--token", default=None,
                   help="bearer token every request must send (default: GROGU_SERVE_TOKEN; none: no check)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--address", default=None, help="Ray cluster to join (e.g. auto or ray://head:10001); "
                                                    "default: start a local Ray")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    p.add_argument("--embedder", default="all-minilm-l6-v2", help="sentence-transformers model of /influence")
    p.add_argument("--nli", default=None, help="NLI model of /seper (hub id or path; none: /seper answers 422)")


def app_name(model: str) -> str:
    """A route-safe name for a model spec: its last path part, lower case, [a-z0-9._-]."""
    base = os.path.basename(model.rstrip("/")) or model
    return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-") or "model"


def start(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Start Ray (or join ``args.address``), Serve on host:port, and one application per model.
    Returns (model, URL) pairs."""
    import ray
    from ray import serve

    from .service import ServeConfig, build_app

    models = args.model or [DEFAULT_MODEL]
    names = [app_name(m) for m in models]
    if len(set(names)) != len(names):
        raise SystemExit(f"two models would share a route name: {names}")
    token = args.token if args.token is not None else os.environ.get("GROGU_SERVE_TOKEN") or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(f"grogu serve: warning: listening on {args.host} without a token: anyone who can reach it can "
              f"use it (set --token or GROGU_SERVE_TOKEN)", file=sys.stderr)
    if not ray.is_initialized():
        if args.address:
            ray.init(address=args.address)
        else:
            ray.init(num_cpus=args.num_cpus, include_dashboard=False)
    serve.start(http_options={"host": args.host, "port": args.port})
    urls = []
    for model, name in zip(models, names):
        config = ServeConfig(model=model, device=args.device, dtype=args.dtype, token=token, max_docs=args.max_docs,
                             max_doc_chars=args.max_doc_chars, max_batch_size=args.max_batch_size,
                             batch_wait_s=args.batch_wait_ms / 1000.0, embedder=args.embedder, nli=args.nli)
        app = build_app(config, num_replicas=args.replicas, min_replicas=args.min_replicas,
                        max_replicas=args.max_replicas, num_cpus=args.cpus_per_replica,
                        num_gpus=args.gpus_per_replica)
        prefix = "/" if len(models) == 1 else f"/{name}"
        serve.run(app, name=name, route_prefix=prefix)
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        urls.append((model, f"http://{host}:{args.port}{prefix.rstrip('/')}"))
    return urls


def run(args: argparse.Namespace) -> int:
    from ray import serve

    urls = start(args)
    for model, url in urls:
        print(f"grogu serve: {model} at {url} (API docs: {url}/docs)", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    if args.address:  # a shared cluster: remove only what this command deployed
        for model, _ in urls:
            serve.delete(app_name(model))
    else:
        serve.shutdown()
    print("grogu serve: stopped", flush=True)
    return 0
