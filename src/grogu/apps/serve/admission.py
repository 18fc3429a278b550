"""What a request may ask of a replica, checked before any work: each count (documents, characters,
answer tokens, samples, ablations, rerank candidates, the whole generation budget) is read or computed
arithmetically from the request and compared with its limit in :class:`ServeConfig`. Over a limit is a
:class:`LimitError` (413) whose message names the limit's option."""

from __future__ import annotations

from typing import Any, Optional

from ...metrics.influence import AUTO_ABLATION_ABOVE_K, DEFAULT_ABLATIONS
from ...rerank import settings as rerank
from ...rerank.remote import schema
from . import api
from .config import ServeConfig, option
from .httpapi import LimitError

#: the generation budget of one prompt read without generating (an ACU prompt): 8 answer tokens
PREFILL_COST = 8


def _over(what: str, value: int, limit: int, name: str, unit: str = "") -> LimitError:
    return LimitError(f"{what} {value}; this service takes at most {limit}{unit} ({option(name)})")


def admit(c: ServeConfig, body: Any) -> None:
    """The size limits of any request (the token and the body size are checked by the guard, before
    the body is parsed)."""
    total = api.text_chars(body)
    if total > c.max_request_chars:
        raise LimitError(
            f"the request holds {total} characters in all; this service takes at most "
            f"{c.max_request_chars} per request ({option('max_request_chars')}): split it"
        )
    for i, query in enumerate(api.queries_of(body)):
        if len(query) > c.max_query_chars:
            raise LimitError(
                f"query {i} has {len(query)} characters; this service takes at most "
                f"{c.max_query_chars} per query ({option('max_query_chars')})"
            )
    for name, size in api.templates_of(body):
        if size > c.max_template_chars:
            raise LimitError(
                f"the {name} has {size} characters; this service takes at most "
                f"{c.max_template_chars} ({option('max_template_chars')})"
            )
    tokens = body.answer_tokens() if isinstance(body, schema.ScorerSettings) else getattr(body, "max_new_tokens", None)
    if tokens is not None and tokens > c.max_new_tokens:
        raise LimitError(
            f"max_new_tokens is {tokens}; this service generates at most {c.max_new_tokens} "
            f"answer tokens per context ({option('max_new_tokens')})"
        )
    n_samples = getattr(body, "n_samples", None)
    if n_samples is not None and n_samples > c.max_samples:
        raise _over("n_samples is", n_samples, c.max_samples, "max_samples", " samples per prompt")
    n_ablations = getattr(body, "n_ablations", None)
    if n_ablations is not None and n_ablations > c.max_ablations:
        raise _over("n_ablations is", n_ablations, c.max_ablations, "max_ablations", " ablations per item")
    if isinstance(body, schema.ACURequest):
        if len(body.items) > c.max_acu_items:
            raise _over(
                "the request holds ACU items:", len(body.items), c.max_acu_items, "max_acu_items", " per request"
            )
        for i, it in enumerate(body.items):
            size = len(it.claim) + len(it.evidence)
            if size > c.max_doc_chars:
                raise LimitError(
                    f"item {i}: claim and evidence have {size} characters; this service takes at most "
                    f"{c.max_doc_chars} ({option('max_doc_chars')})"
                )
    lists = api.docs_of(body)
    n = sum(len(docs) for docs in lists)
    if n > c.max_docs:
        raise LimitError(
            f"the request holds {n} documents; this service takes at most {c.max_docs} "
            f"per request ({option('max_docs')}): split it into several requests"
        )
    for docs in lists:
        for i, d in enumerate(docs):
            size = len(d) if isinstance(d, str) else len(d.text) + len(d.title or "")
            if size > c.max_doc_chars:
                raise LimitError(
                    f"document {i} has {size} characters; this service takes at most "
                    f"{c.max_doc_chars} per document ({option('max_doc_chars')})"
                )


def admit_rerank(c: ServeConfig, body: schema.RerankRequest) -> None:
    """The rerank's size (candidates x documents), computed from the mode, ``family``, the number of
    documents and ``top_n`` before any candidate is built."""
    count, slots = rerank.plan_size(body.mode_settings(), len(body.documents), body.top_n)
    if slots > c.max_rerank_contexts:
        raise LimitError(
            f"this rerank would score {count} candidate contexts holding {slots} documents "
            f"in all (candidates x documents); this service scores at most "
            f"{c.max_rerank_contexts} per rerank ({option('max_rerank_contexts')})"
        )


def admit_budget(c: ServeConfig, costs: list[int]) -> None:
    """The request's whole generation budget (answer tokens of everything it asks for)."""
    total = sum(costs)
    if total > c.max_request_tokens:
        raise LimitError(
            f"the request would generate up to {total} answer tokens in all (contexts, samples and "
            f"ablations x max_new_tokens); this service takes at most {c.max_request_tokens} per "
            f"request ({option('max_request_tokens')}): split it or ask for fewer"
        )


def influence_runs(method: str, k: int, n_ablations: Optional[int], answered: bool) -> int:
    """Engine passes of one influence item of ``k`` documents: its answer (when not given), then one per
    leave-one-out and single document (exact), per ablation, or per document plus the full context."""
    n = n_ablations if n_ablations is not None else DEFAULT_ABLATIONS.get(method, 32)
    if method == "auto":
        method = "ablation" if k > AUTO_ABLATION_ABOVE_K and n < 2 * k + 1 else "exact"
    if k == 0:
        runs = 0
    elif method == "exact":
        runs = 2 * k
    elif method == "leave_one_out_logprob":
        runs = k + 1
    else:  # ablation, contextcite
        runs = n + (1 if method == "contextcite" else 0)
    return runs + (0 if answered else 1)
