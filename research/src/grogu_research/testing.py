"""Helpers for tests, examples and benchmarks: tiny random models of real architectures, the
packaged tokenizer, and the real data in ../shared/data. Nothing here reaches a model hub."""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Callable, Iterator, TypeVar

import torch

from .child_server import ChildServer

T = TypeVar("T")
#: ../shared/data as seen from a checkout of this repository (override with GROGU_SHARED_DATA).
SHARED_DATA = os.environ.get(
    "GROGU_SHARED_DATA",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data")),
)


def shared_data_path(*parts: str) -> str:
    """Path under ../shared/data; FileNotFoundError saying where it looked when absent."""
    path = os.path.join(SHARED_DATA, *parts)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"real data not found at {path}: clone the project next to ../shared or set GROGU_SHARED_DATA"
        )
    return path


def embedded_tokenizer():
    """The SmolLM2-135M-Instruct tokenizer (with its chat template) from the packaged GGUF."""
    from transformers import AutoTokenizer

    from grogu.runtime.models import DEFAULT_MODEL, embedded_path

    path = embedded_path(DEFAULT_MODEL)
    return AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))


def tiny_model(arch: str = "llama", vocab_size: int = 49152, seed: int = 0, **overrides: Any):
    """A 2-layer model of a real architecture ('llama', 'qwen2', 'gpt2', 'gemma3') with random weights,
    peaked enough (initializer_range 0.4) that greedy decoding has no near-ties. 'gemma3' has a
    sliding-window layer (window 16) and a full-attention layer, as Gemma 3 interleaves them."""
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab_size, initializer_range=0.4, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    if arch == "llama":
        cfg = tf.LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            **common,
        )
        cls = tf.LlamaForCausalLM
    elif arch == "qwen2":
        cfg = tf.Qwen2Config(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
            **common,
        )
        cls = tf.Qwen2ForCausalLM
    elif arch == "gpt2":
        cfg = tf.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=1024, **common)
        cls = tf.GPT2LMHeadModel
    elif arch == "gemma3":
        cfg = tf.Gemma3TextConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            max_position_embeddings=4096,
            sliding_window=16,
            layer_types=["sliding_attention", "full_attention"],
            **common,
        )
        cls = tf.Gemma3ForCausalLM
    else:
        raise ValueError(f"unknown tiny architecture {arch!r}; use 'llama', 'qwen2', 'gpt2' or 'gemma3'")
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return cls(cfg).eval()


class IdTokenizer:
    """A tokenizer for models fed token ids directly (tiny models with a small vocabulary): no vocabulary
    of its own, pad 0, end of sequence 1, an answer's text its ids joined by spaces."""

    pad_token_id = 0
    eos_token_id = 1
    model_max_length = 4096

    def get_vocab(self):
        return {}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def save_tiny_model(path: str, arch: str = "llama", seed: int = 0) -> str:
    """:func:`tiny_model` and the packaged tokenizer saved to the folder ``path`` (created), so that a
    separate process (a grogu service replica, a Ray worker) loads exactly this model by its path."""
    os.makedirs(path, exist_ok=True)
    tiny_model(arch, seed=seed).save_pretrained(path)
    embedded_tokenizer().save_pretrained(path)
    return path


@lru_cache(maxsize=2)
def _squad(path: str) -> list[dict]:
    with open(path) as f:
        return json.load(f)["data"]


def squad_paragraphs(n: int | None = None, seed: int = 0) -> list[dict]:
    """SQuAD v1.1 dev paragraphs, each {'title', 'text', 'question', 'answers'} (first question);
    n random ones (seeded) or all of them in file order."""
    data = _squad(shared_data_path("squad-v1.1-dev", "dev-v1.1.json"))
    paras = [
        {
            "title": a["title"].replace("_", " "),
            "text": p["context"],
            "question": p["qas"][0]["question"],
            "answers": [x["text"] for x in p["qas"][0]["answers"]],
            "qas": p["qas"],
        }
        for a in data
        for p in a["paragraphs"]
    ]
    if n is None:
        return paras
    return random.Random(seed).sample(paras, n)


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Ray Serve's own settings for a slow or busy machine: its controller waits a minute (not 5 s) for a
#: starting proxy to say it is ready, and 30 s (not 10) for a health check, before it kills the proxy and
#: starts another. Under one other CPU-bound process a proxy's start took longer than 5 s, again and again.
PATIENT_SERVE_ENV = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "60", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S": "30"}


def start_serve(deadline_s: float = 300.0, **options: Any) -> None:
    """``serve.start(**options)``, waiting for the proxies until they are ready or ``deadline_s`` passes:
    ``serve.start`` gives up after 60 s (a constant), and a second call waits again on the same controller."""
    from ray import serve

    start = time.monotonic()
    while True:
        try:
            serve.start(**options)
            return
        except TimeoutError:
            if time.monotonic() - start > deadline_s:
                raise


@contextmanager
def patient_serve_env(extra: dict[str, str] | None = None) -> Iterator[None]:
    """:data:`PATIENT_SERVE_ENV` and ``extra`` set in this process's environment (which Ray's processes
    started inside inherit), restored after."""
    env = {**PATIENT_SERVE_ENV, **(extra or {})}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def local_service(config: Any, *, header_timeout_s: float = 2.0, request_timeout_s: float = 120, num_cpus: int = 2):
    """A local Ray (``num_cpus``) and ``grogu serve``'s applications behind Ray Serve's proxy configured as
    ``grogu serve`` configures it. ``config``: one :class:`grogu.apps.serve.config.ServeConfig`, served
    at the root; or ``{name: ServeConfig}``, each under ``/<name>``, with the clients' rerank API at the
    root routed by ``model`` (as ``grogu serve`` does with several models). Yields the base URL; shuts
    Serve and Ray down after."""
    import ray
    from ray import serve

    from grogu.apps.serve.config import model_names
    from grogu.apps.serve.proxy import http_options, proxy_environment
    from grogu.apps.serve.service import build_app

    apps = config if isinstance(config, dict) else {"grogu": config}
    routes = None
    if isinstance(config, dict):
        routes = {n: f"/{name}" for name, c in apps.items() for n in [*model_names(c.model), name]}
    port = free_port()
    env = proxy_environment(
        max_body_bytes=max(c.max_body_bytes for c in apps.values()),
        header_timeout_s=header_timeout_s,
        model_routes=routes,
    )
    # read by Ray Serve's proxy when it starts (as grogu serve does), with Serve's patient settings
    with patient_serve_env(env):
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
        try:
            start_serve(
                http_options=http_options(
                    "127.0.0.1", port, request_timeout_s=request_timeout_s, keep_alive_timeout_s=5
                )
            )
            for name, c in apps.items():
                serve.run(build_app(c), name=name, route_prefix="/" if routes is None else f"/{name}")
            yield f"http://127.0.0.1:{port}"
        finally:
            with contextlib.suppress(Exception):  # a Serve that never started has nothing to shut down
                serve.shutdown()
            ray.shutdown()


class LlamaCppServer(ChildServer):
    """llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) as a child process on
    loopback, serving a GGUF (default: the embedded SmolLM2) under ``alias``; a real inference server
    for tests and benchmarks of :class:`grogu.ServerTarget`. Use as a context manager; ``url`` is its
    base URL. ``api_key``: the key the server demands (none by default); ``logits_all=False`` starts it
    without the log-probabilities grogu needs; ``chat_format``: llama-cpp-python's chat handler (default:
    the GGUF's own chat template; ``"functionary"`` answers chat requests without log-probabilities)."""

    name = "the llama-cpp-python server"

    def __init__(
        self,
        gguf: str | None = None,
        alias: str | None = None,
        *,
        n_ctx: int = 2048,
        threads: int = 1,
        api_key: str | None = None,
        logits_all: bool = True,
        chat_format: str | None = None,
        startup_s: float = 180.0,
    ) -> None:
        from grogu.runtime.models import DEFAULT_MODEL, embedded_path

        self.gguf = gguf or embedded_path(DEFAULT_MODEL)
        self.alias = alias or DEFAULT_MODEL
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.args = [
            "--model",
            self.gguf,
            "--model_alias",
            self.alias,
            "--n_ctx",
            str(n_ctx),
            "--n_threads",
            str(threads),
            "--n_threads_batch",
            str(threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--logits_all",
            str(logits_all).lower(),
            "--verbose",
            "false",
        ]
        if api_key:
            self.args += ["--api_key", api_key]
        if chat_format:
            self.args += ["--chat_format", chat_format]
        self.api_key, self.startup_s, self.proc = api_key, startup_s, None

    def command(self) -> list[str]:
        import sys

        return [sys.executable, "-m", "llama_cpp.server", *self.args]

    def ready_request(self) -> Any:
        import urllib.request

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return urllib.request.Request(self.url + "/models", headers=headers)

    def forget(self) -> None:
        """Make the server's next request evaluate its whole prompt in one pass. llama-cpp-python keeps
        the KV cache of the longest prefix shared with its previous request and evaluates only the rest;
        the split rounds its quantised kernels otherwise (seen: 0.03 in a log-probability), so what a
        request returns depends on what was asked before. A one-token prompt that no chat prompt starts
        with leaves at most the BOS token to share."""
        import urllib.request

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = json.dumps({"prompt": "0", "max_tokens": 1, "temperature": 0.0}).encode()
        req = urllib.request.Request(self.url + "/completions", data=body, headers=headers)
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()

    def __enter__(self) -> "LlamaCppServer":
        if importlib_util_find("llama_cpp") is None:
            raise ImportError(
                "the llama-cpp-python server is not installed: pip install 'llama-cpp-python[server]' "
                "(compiled at install; the README's test set-up command does it)"
            )
        return super().__enter__()


def with_shared_data(load: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """In a test: ``load(*args, **kwargs)``, which reads ../shared/data. When the data is missing, a skip
    with the reason on a developer's machine, but a failure under CI (``CI`` set), where every test must
    run: a CI clone has ../shared beside it."""
    import pytest

    try:
        return load(*args, **kwargs)
    except FileNotFoundError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI runs with ../shared beside the clone)")
        pytest.skip(str(exc))


def gguf_with_flags(path: str, gguf: str | None = None, **flags: bool | int) -> str:
    """A copy of a GGUF (default: the embedded SmolLM2) written to ``path`` with tokenizer metadata set:
    ``gguf_with_flags(p, add_bos_token=True)`` sets ``tokenizer.ggml.add_bos_token``; an int value is
    written as a uint32 (a token id). Tensors and every other field are copied as they are (gguf-py's
    gguf_new_metadata.py does the same)."""
    import gguf as g

    from grogu.runtime.models import DEFAULT_MODEL, embedded_path

    reader = g.GGUFReader(gguf or embedded_path(DEFAULT_MODEL), "r")
    arch = reader.fields[g.Keys.General.ARCHITECTURE].contents()
    writer = g.GGUFWriter(path, arch=arch, endianess=reader.endianess)
    if g.Keys.General.ALIGNMENT in reader.fields:
        writer.data_alignment = reader.fields[g.Keys.General.ALIGNMENT].contents()
    new = {f"tokenizer.ggml.{name}": value for name, value in flags.items()}
    for field in reader.fields.values():
        if field.name == g.Keys.General.ARCHITECTURE or field.name.startswith("GGUF.") or field.name in new:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == g.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for key, value in new.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        else:
            writer.add_uint32(key, int(value))
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data, tensor_endianess=reader.endianess)
    writer.close()
    return path


def reference_llama(gguf: str | None = None, n_ctx: int = 2048):
    """llama.cpp in this process (``llama_cpp.Llama``, one thread as the server, all logits kept) on the GGUF a
    :class:`LlamaCppServer` serves (default: the embedded SmolLM2): the reference for the numbers the
    server returns."""
    import llama_cpp

    from grogu.runtime.models import DEFAULT_MODEL, embedded_path

    return llama_cpp.Llama(
        gguf or embedded_path(DEFAULT_MODEL),
        n_ctx=n_ctx,
        logits_all=True,
        verbose=False,
        n_threads=1,
        n_threads_batch=1,
    )


def _eval_prompt(llm, prompt: list[int], split: int) -> None:
    llm.reset()
    if split and len(prompt) > split:
        llm.eval(prompt[:-split])
        llm.eval(prompt[-split:])
    else:
        llm.eval(prompt)


def _log_softmax_last(llm) -> Any:
    import numpy as np

    x = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    return x - np.logaddexp.reduce(x)


def stepwise_rows(llm, prompt: list[int], cont: list[int], split: int = 0) -> list[Any]:
    """llama.cpp's log-softmax (float64) before each token of ``cont``, decoded as a server decodes: the
    prompt in one batch, then one token a step. ``split`` > 0 encodes the prompt's last ``split`` tokens
    in a batch of their own, as llama-server does for a sliding-window model (quantised kernels round a
    small batch otherwise)."""
    _eval_prompt(llm, prompt, split)
    rows = []
    for t in cont:
        rows.append(_log_softmax_last(llm))
        llm.eval([t])
    return rows


def greedy_stepwise(llm, prompt: list[int], stops: Any, budget: int, split: int = 0) -> tuple[list[int], list[Any]]:
    """llama.cpp's greedy answer over the raw logits (its stop token included when reached) and the
    log-softmax before each of its tokens, decoded as :func:`stepwise_rows` decodes."""
    import numpy as np

    _eval_prompt(llm, prompt, split)
    ids: list[int] = []
    rows = []
    while len(ids) < budget:
        rows.append(_log_softmax_last(llm))
        ids.append(int(np.argmax(rows[-1])))
        if ids[-1] in stops or len(ids) == budget:
            break
        llm.eval([ids[-1]])
    return ids, rows


@contextmanager
def traced(instrumentor: Any = None):
    """In a test: a real OpenTelemetry SDK ``TracerProvider`` with an in-memory exporter (yielded), set as
    grogu's tracer provider, and ``instrumentor``'s (an OpenInference instrumentor, e.g. LangChain's or
    LlamaIndex's), for the block only. Needs the test extra's ``opentelemetry-sdk``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from grogu.observe import tracing

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.set_tracer_provider(provider)
    if instrumentor is not None:
        instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        if instrumentor is not None:
            instrumentor.uninstrument()
        tracing.set_tracer_provider(None)


def one_span(spans: Any, name: str) -> Any:
    """The one finished span of that name (an assertion error when there are none or several)."""
    (span,) = [s for s in spans if s.name == name]
    return span


def parent_span(span: Any, spans: Any) -> Any:
    return next(s for s in spans if s.context.span_id == span.parent.span_id)


def span_documents(attributes: Any, prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened documents under ``prefix`` (``reranker.input_documents`` ...) as dicts of
    their id, content, score and metadata attributes."""
    from openinference.semconv.trace import DocumentAttributes as D

    fields = (D.DOCUMENT_ID, D.DOCUMENT_CONTENT, D.DOCUMENT_SCORE, D.DOCUMENT_METADATA)
    n = len({k.split(".")[2] for k in attributes if k.startswith(prefix + ".")})
    return [{field: attributes.get(f"{prefix}.{i}.{field}") for field in fields} for i in range(n)]


def require_llama_cpp() -> None:
    """In a test: skip when llama-cpp-python (the test server) is not installed, but fail under CI, where
    the README's test set-up command installs it."""
    import pytest

    if importlib_util_find("llama_cpp") is None:
        if os.environ.get("CI"):
            pytest.fail("llama-cpp-python is not installed; the README's test set-up command installs it")
        pytest.skip("llama-cpp-python is not installed")


def importlib_util_find(name: str):
    import importlib.util

    return importlib.util.find_spec(name)
