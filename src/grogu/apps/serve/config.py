"""What one deployment of ``grogu serve`` serves and the limits it enforces: one place for each limit's
default and meaning, read by the service (its checks, ``/info``, the 413 messages) and by the command
line (its options are made from these fields)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional

from ...runtime.models import DEFAULT_MODEL


def _limit(default, help: str):
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class ServeConfig:
    """What one deployment serves and the limits it enforces (see ``grogu serve --help``)."""

    model: str = DEFAULT_MODEL
    device: Optional[str] = None
    dtype: Optional[str] = None
    token: Optional[str] = None
    max_docs: int = _limit(256, "documents per request, over all its lists")
    max_doc_chars: int = _limit(20_000, "characters per document (text + title)")
    max_query_chars: int = _limit(4_000, "characters per query")
    max_template_chars: int = _limit(8_000, "characters of a request's prompt template, all fields")
    max_request_chars: int = _limit(1_000_000, "characters of all of a request's text together")
    max_new_tokens: int = _limit(512, "answer tokens a request may ask for per context")
    max_rerank_contexts: int = _limit(
        1_024, "contexts a rerank may score, candidates x documents (counted before any candidate is built)"
    )
    max_samples: int = _limit(32, "ΔSePer samples per prompt (n_samples)")
    max_ablations: int = _limit(256, "influence ablations per item (n_ablations)")
    max_acu_items: int = _limit(256, "ACU (claim, evidence, stance) items per request")
    max_request_tokens: int = _limit(
        131_072, "generation budget of one request: answer tokens of every context, sample and ablation it asks for"
    )
    max_body_bytes: int = _limit(
        8 * 2**20, "request body bytes, checked by Content-Length and while the body streams in, before it is parsed"
    )
    body_timeout_s: float = 30.0  # seconds a request body may take to arrive (408 after)
    max_batch_size: int = 16  # requests gathered into one engine call
    max_batch_tokens: int = 2_048  # generation budget (contexts x answer tokens) of one engine call
    batch_wait_s: float = 0.01  # how long an idle replica waits for a call to fill
    embedder: str = "all-minilm-l6-v2"
    nli: Optional[str] = None  # NLI model for ΔSePer (none: /seper answers 422)
    stats_pids: bool = False  # /stats shows the replica's process id (benchmarks kill it)
    health_stall_s: float = 120.0  # /health is 503 while one engine slice has run this long (a stuck worker)
    #: the engine's CPU linear kernels (EngineConfig.cpu_linear): "auto", "onednn" or "default"
    cpu_linear: str = "auto"
    #: a grogu tune settings file's content (grogu serve --settings): the compatible rerank routes use it
    tuned_settings: Optional[dict] = None

    #: the limits, with the option of each (what /info lists and the 413 messages name)
    LIMITS = (
        "max_docs",
        "max_doc_chars",
        "max_query_chars",
        "max_template_chars",
        "max_request_chars",
        "max_new_tokens",
        "max_rerank_contexts",
        "max_samples",
        "max_ablations",
        "max_acu_items",
        "max_request_tokens",
        "max_body_bytes",
        "body_timeout_s",
    )

    @classmethod
    def default(cls, name: str):
        return cls.__dataclass_fields__[name].default

    @classmethod
    def size_limits(cls) -> list[tuple[str, int, str]]:
        """(name, default, help) of each size limit (the limits that are whole counts)."""
        return [(f.name, f.default, f.metadata["help"]) for f in dataclasses.fields(cls) if "help" in f.metadata]


def option(name: str) -> str:
    """The command-line option that sets a :class:`ServeConfig` field."""
    return "grogu serve --" + name.replace("_", "-")


def app_name(model: str) -> str:
    """A route-safe name for a model spec: its last path part, lower case, [a-z0-9._-]."""
    base = os.path.basename(model.rstrip("/")) or model
    return re.sub(r"[^a-z0-9._-]+", "-", base.lower()).strip("-") or "model"


def model_names(model: str) -> list[str]:
    """The names a client may give a served model as ``model`` (the clients' rerank API): the spec as
    given, its last path part and its route name (:func:`app_name`)."""
    return list(dict.fromkeys([model, os.path.basename(model.rstrip("/\\")) or model, app_name(model)]))
