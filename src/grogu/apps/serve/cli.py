"""``grogu serve``: the scoring service on Ray Serve, one deployment per target model.

  grogu serve                                        # embedded SmolLM2 on http://127.0.0.1:8000
  grogu serve --model Qwen/Qwen2.5-7B-Instruct --gpus-per-replica 1 --replicas 2 --address auto
  GROGU_SERVE_TOKEN=secret grogu serve --host 0.0.0.0  # reachable from other machines: use a token
  grogu serve --no-auth                              # explicitly without a token (warns)
  grogu serve --settings tuned/settings.json         # the clients' rerank API uses grogu tune's settings

Without ``--address`` a local Ray starts (and stops with the command); with it the deployments join
that cluster (``auto``: the one this machine belongs to). Ctrl-C (or SIGTERM) deletes the applications.
With several ``--model``, each is served under its own route prefix (``/<name>``, shown at start).

Safe by default: every request size and the work one request may ask for has a limit (413 naming
the option), request bodies are bounded while they are read, slow clients time out, and a service
reachable beyond this machine needs a token (or ``--no-auth``, explicitly). The HTTP settings
(``--request-timeout-s``, ``--keep-alive-timeout-s``, ``--header-timeout-s``, the proxy's body check)
apply to Ray Serve's HTTP proxy, which a local Ray starts; joining a cluster whose Serve already
runs keeps that cluster's HTTP settings.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from ...runtime.engine.config import LINEAR_BACKENDS
from ...runtime.models import DEFAULT_MODEL
from .config import app_name, model_names


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..cli.arguments import POSITIVE_INT
    from .config import ServeConfig

    p.add_argument(
        "--model",
        action="append",
        default=None,
        help=f"target LLM (alias, path, .gguf or hub id); repeat to serve several (default {DEFAULT_MODEL})",
    )
    p.add_argument("--device", default=None, help="cpu, cuda ... (default: CUDA when the replica has a GPU)")
    p.add_argument(
        "--dtype", default=None, help="float32, bfloat16, float16 (default: bf16 on CUDA, float32 on CPU and for GGUF)"
    )
    p.add_argument("--replicas", type=POSITIVE_INT, default=1, help="replicas per model (default 1)")
    p.add_argument("--min-replicas", type=int, default=None, help="autoscaling: fewest replicas (turns it on)")
    p.add_argument("--max-replicas", type=POSITIVE_INT, default=None, help="autoscaling: most replicas (turns it on)")
    p.add_argument("--gpus-per-replica", type=float, default=0.0, help="GPUs per replica (fractions share a GPU)")
    p.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs per replica (default 1)")
    p.add_argument(
        "--max-replicas-per-node",
        type=POSITIVE_INT,
        default=None,
        help="spread replicas over a cluster's nodes (1: one per node, so a lost node loses one replica)",
    )
    p.add_argument(
        "--proxy-location",
        choices=("EveryNode", "HeadOnly"),
        default="EveryNode",
        help="where Ray Serve runs HTTP proxies (default EveryNode; HeadOnly: one proxy, on the head node)",
    )
    p.add_argument(
        "--max-batch-size",
        type=POSITIVE_INT,
        default=ServeConfig.default("max_batch_size"),
        help="requests gathered into one engine call (default %(default)s)",
    )
    p.add_argument(
        "--max-batch-tokens",
        type=POSITIVE_INT,
        default=ServeConfig.default("max_batch_tokens"),
        help="generation budget of one engine call, contexts x answer tokens; a larger request is "
        "scored in several calls, taking turns with the others (default %(default)s)",
    )
    p.add_argument(
        "--cpu-linear",
        choices=LINEAR_BACKENDS,
        default=ServeConfig.default("cpu_linear"),
        help="the CPU kernels of the model's linear layers: oneDNN's or PyTorch's 'default'; 'auto' picks "
        "oneDNN where it measures faster (default %(default)s)",
    )
    p.add_argument(
        "--batch-wait-ms",
        type=float,
        default=1000 * ServeConfig.default("batch_wait_s"),
        help="how long an idle replica waits for a call to fill (ms, default %(default)s)",
    )
    limits = p.add_argument_group("limits (413 above each, naming the option)")
    for name, default, text in ServeConfig.size_limits():
        limits.add_argument(
            "--" + name.replace("_", "-"), type=POSITIVE_INT, default=default, help=f"{text} (default {default})"
        )
    http = p.add_argument_group("slow clients (seconds)")
    http.add_argument(
        "--header-timeout-s",
        type=float,
        default=10.0,
        help="a connection's request headers must be complete within this (default 10)",
    )
    http.add_argument(
        "--body-timeout-s",
        type=float,
        default=ServeConfig.default("body_timeout_s"),
        help="a request body must arrive within this after its headers (408; default %(default)s)",
    )
    http.add_argument(
        "--keep-alive-timeout-s",
        type=POSITIVE_INT,
        default=5,
        help="an idle keep-alive connection is closed after this (default 5)",
    )
    http.add_argument(
        "--request-timeout-s",
        type=float,
        default=600.0,
        help="end-to-end limit of one request, body to answer (408; default 600)",
    )
    p.add_argument(
        "--token",
        default=None,
        help="bearer token every request must send (default: GROGU_SERVE_TOKEN); an empty token is an error",
    )
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without a token (warns; needed to listen beyond this machine without one)",
    )
    p.add_argument("--stats-pids", action="store_true", help="/stats shows each replica's process id")
    p.add_argument(
        "--health-stall-s",
        type=float,
        default=ServeConfig.default("health_stall_s"),
        help="/health is 503 (and Ray replaces the replica) while one engine slice has run this many "
        "seconds: the worker is stuck (default %(default)s)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster to join (e.g. auto or ray://head:10001); default: start a local Ray",
    )
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    p.add_argument("--embedder", default="all-minilm-l6-v2", help="sentence-transformers model of /influence")
    p.add_argument("--nli", default=None, help="NLI model of /seper (hub id or path; none: /seper answers 422)")
    p.add_argument(
        "--settings",
        default=None,
        help="a grogu tune settings file: its rerank settings and answer budget for /v1/rerank and /v2/rerank "
        "(a request's own 'grogu' settings replace the ones it names)",
    )


def model_routes(models: list[str]) -> dict[str, str]:
    """Each name a client may pass as ``model`` (the spec, its last path part, its route name) -> the
    route prefix of that model, for the clients' rerank API at the root when several models are served."""
    routes = {}
    for model in models:
        prefix = f"/{app_name(model)}"
        for name in model_names(model):
            routes.setdefault(name, prefix)
    return routes


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def resolve_token(args: argparse.Namespace) -> str | None:
    """The token the service checks, or None with ``--no-auth``. An empty token (``--token ""`` or an
    empty GROGU_SERVE_TOKEN) is an error, never a silent off; a host beyond loopback without a token
    refuses to start unless ``--no-auth`` says so."""
    env = os.environ.get("GROGU_SERVE_TOKEN")
    token, source = (args.token, "--token") if args.token is not None else (env, "GROGU_SERVE_TOKEN")
    if getattr(args, "no_auth", False):
        if token:
            raise SystemExit(f"grogu serve: --no-auth and a token ({source}) contradict each other: drop one")
        print(
            f"grogu serve: warning: --no-auth: no bearer token is checked; anyone who can reach "
            f"{args.host}:{args.port} can use the service",
            file=sys.stderr,
        )
        return None
    if token is not None and not token.strip():
        raise SystemExit(
            f"grogu serve: the token given by {source} is empty; give a real token, or --no-auth to serve without one"
        )
    if token is None and args.host not in LOOPBACK:
        raise SystemExit(
            f"grogu serve: refusing to listen on {args.host} without a token: anyone who can reach "
            f"it could use it. Set --token or GROGU_SERVE_TOKEN, or pass --no-auth to do so anyway"
        )
    return token


def tuned_settings(path: str | None) -> dict | None:
    """The content of the ``--settings`` file, read and checked here (a clear error before Ray starts). The
    replicas get the content, not the path: a node of a cluster may not have the file."""
    if path is None:
        return None
    from ...rerank.tuned import load_tuned

    try:
        return load_tuned(path).as_dict()
    except ValueError as exc:
        raise SystemExit(f"grogu serve --settings: {exc}") from None


def config_kwargs(args: argparse.Namespace) -> dict:
    """The :class:`grogu.apps.serve.config.ServeConfig` fields the command line sets (all but the model)."""
    from .config import ServeConfig

    return dict(
        tuned_settings=tuned_settings(getattr(args, "settings", None)),
        device=args.device,
        dtype=args.dtype,
        body_timeout_s=args.body_timeout_s,
        max_batch_size=args.max_batch_size,
        max_batch_tokens=args.max_batch_tokens,
        batch_wait_s=args.batch_wait_ms / 1000.0,
        embedder=args.embedder,
        nli=args.nli,
        stats_pids=args.stats_pids,
        health_stall_s=args.health_stall_s,
        cpu_linear=args.cpu_linear,
        **{name: getattr(args, name) for name, _, _ in ServeConfig.size_limits()},
    )


def start(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Start Ray (or join ``args.address``), Serve on host:port, and one application per model.
    Returns (model, URL) pairs."""
    import ray
    from ray import serve

    from .proxy import http_options, proxy_environment
    from .service import ServeConfig, build_app

    models = args.model or [DEFAULT_MODEL]
    names = [app_name(m) for m in models]
    if len(set(names)) != len(names):
        raise SystemExit(f"two models would share a route name: {names}")
    token = resolve_token(args)
    kwargs = config_kwargs(args)  # a bad --settings file fails here, before Ray starts
    # the proxy's own checks (body size by Content-Length, header timeout, /health within a second,
    # JSON errors): Ray Serve reads them from the environment when it starts its proxy
    env = proxy_environment(
        max_body_bytes=args.max_body_bytes,
        header_timeout_s=args.header_timeout_s,
        model_routes=model_routes(models) if len(models) > 1 else None,
    )
    os.environ.update(env)
    if not ray.is_initialized():
        if args.address:
            ray.init(address=args.address, runtime_env={"env_vars": env})
        else:
            ray.init(num_cpus=args.num_cpus, include_dashboard=False)
    serve.start(
        proxy_location=args.proxy_location,
        http_options=http_options(
            args.host,
            args.port,
            request_timeout_s=args.request_timeout_s,
            keep_alive_timeout_s=args.keep_alive_timeout_s,
        ),
    )
    urls = []
    for model, name in zip(models, names):
        config = ServeConfig(model=model, token=token, **kwargs)
        app = build_app(
            config,
            num_replicas=args.replicas,
            min_replicas=args.min_replicas,
            max_replicas=args.max_replicas,
            max_replicas_per_node=args.max_replicas_per_node,
            num_cpus=args.cpus_per_replica,
            num_gpus=args.gpus_per_replica,
        )
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
