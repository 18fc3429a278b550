"""The rerank API that existing clients speak: Cohere's ``/v1/rerank`` and ``/v2/rerank``, and Jina's
``/v1/rerank`` (the same shape as Cohere's v1).

A request is ``{model, query, documents, top_n, return_documents, ...}``. It is turned into grogu's own
:class:`~grogu.rerank.remote.schema.RerankRequest` and runs the same rerank pipeline as ``/rerank``: the
default mode, its gate, the same choice. The answer is what the clients read:

- ``results``: the kept documents, best first, each with ``index`` (its input position) and
  ``relevance_score`` in [0, 1], and ``document`` where asked (``return_documents``; default true on
  ``/v1/rerank`` as Jina does, false on ``/v2/rerank`` as Cohere v2 does);
- ``id``, ``model``, ``usage`` (tokens encoded and answer tokens decoded) and Cohere's ``meta``;
- ``grogu``: the gate's verdict, the chosen context's answer, each result's utility, and the request
  fields that were ignored. Clients ignore this key.

``relevance_score`` is :func:`grogu.metrics.scales.probability` of the utility: ``exp(-KeyEntropy)`` for
the default metric, strictly increasing in the utility. In the context mode (the default) the kept
documents share their context's score; their order is the order the LLM reads them in. It is a
confidence, not a calibrated probability that a document is relevant.

Fields grogu does not use (``max_tokens_per_doc``, ``max_chunks_per_doc``, ``priority``, ``truncation``,
any vendor's own) are accepted and ignored, and named in the ``X-Grogu-Ignored-Fields`` response
header and in ``grogu.ignored``. grogu's own rerank settings go in an optional ``grogu`` object (the
fields of ``/rerank``: ``mode``, ``threshold``, ``metric``, ``max_new_tokens``, ...).

A service started with a ``grogu tune`` file (``grogu serve --settings FILE``) reranks these requests
with the file's settings and answer budget. A setting the request's ``grogu`` object names replaces the
file's (as ``settings=FILE`` with settings by name does in Python). The ``tuned`` field of the answer's
``grogu`` object then holds the file's decision and what differs from the set-up it was fitted to
(:meth:`grogu.rerank.tuned.TunedSettings.mismatches`).
"""

from __future__ import annotations

import uuid
from typing import Any, Optional, Union
from urllib.parse import quote

from ...metrics.scales import probability
from ...rerank.remote import schema
from ...rerank.remote.schema import CompatRerankRequest
from ...rerank.tuned import TunedSettings, model_fingerprint

#: the fields of a compatible request that grogu reads; any other is accepted and ignored
READ_FIELDS = ("model", "query", "documents", "top_n", "return_documents", "rank_fields", "grogu")
#: the header naming the fields a request sent that grogu ignored
IGNORED_HEADER = "X-Grogu-Ignored-Fields"
#: most characters of that header (the body's ``grogu.ignored`` names them all)
IGNORED_HEADER_CHARS = 1024


def ignored_header(names: list[str]) -> str:
    """The value of :data:`IGNORED_HEADER`: the names percent-encoded (RFC 3986), so that a name with a
    control character or a non-ASCII letter is still a valid header, joined by ", ", at most
    :data:`IGNORED_HEADER_CHARS` characters (then cut after a whole name and ended by ", ...")."""
    out = ""
    for name in names:
        part = quote(name, safe="")
        if len(out) + len(part) + 2 > IGNORED_HEADER_CHARS - 5:
            return out + ", ..."
        out = f"{out}, {part}" if out else part
    return out


def document_text(doc: Union[str, dict[str, Any]], i: int, rank_fields: Optional[list[str]]) -> Any:
    """A compatible document as grogu takes it: a string as is; an object's ``text`` (and ``title``),
    or, with ``rank_fields``, those fields as ``name: value`` lines (as Cohere ranks object documents)."""
    if isinstance(doc, str):
        return doc
    if rank_fields:
        missing = [f for f in rank_fields if f not in doc]
        if missing:
            raise ValueError(f"documents[{i}] has no field {missing[0]!r} named in rank_fields")
        return "\n".join(f"{f}: {doc[f]}" for f in rank_fields)
    text = doc.get("text")
    if not isinstance(text, str):
        raise ValueError(
            f"documents[{i}] must be a string or an object with a string 'text' field (or name its fields in "
            f"rank_fields), got the fields {sorted(doc)[:8]}"
        )
    title = doc.get("title")
    return {"text": text, "title": title} if isinstance(title, str) and title else text


def rerank_request(body: CompatRerankRequest, tuned: Optional[TunedSettings] = None) -> schema.RerankRequest:
    """grogu's own request for a compatible one: the same query and documents, ``top_n`` (0 or absent:
    all documents), and the settings of the ``grogu`` object. With ``tuned`` (the service's ``grogu tune``
    file), its rerank settings and answer budget, each replaced where the ``grogu`` object names it (an
    ``answer_style`` named keeps that style's own budget). A bad value is a ValueError (422)."""
    if not body.documents:
        raise ValueError("documents must not be empty: give at least one document to rerank")
    if body.top_n is not None and body.top_n < 0:
        raise ValueError(f"top_n must be 0 (all documents) or positive, got {body.top_n}")
    own = dict(body.grogu or {})
    clash = sorted(set(own) & {"query", "documents", "top_n"})
    if clash:
        raise ValueError(f"give {clash[0]} at the top level of the request, not inside 'grogu'")
    if "return_details" in own:
        raise ValueError("grogu.return_details: the per-token details come from /rerank only")
    docs = [document_text(d, i, body.rank_fields) for i, d in enumerate(body.documents)]
    base: dict[str, Any] = {}
    if tuned is not None:
        base = tuned.settings.as_dict()
        if tuned.max_new_tokens is not None and not {"max_new_tokens", "answer_style"} & set(own):
            base["max_new_tokens"] = tuned.max_new_tokens
    return schema.RerankRequest.model_validate(
        {"query": body.query, "documents": docs, "top_n": body.top_n or None, **base, **own}
    )


def tuned_note(tuned: Optional[TunedSettings], scorer: Any, request: schema.RerankRequest) -> Optional[dict[str, Any]]:
    """The ``tuned`` field of the answer's ``grogu`` object: the service's tuned file's decision, and what
    differs from the set-up it was fitted to (the model, the prompt, the request's ``top_n``, the answer
    budget). None without a file."""
    if tuned is None:
        return None
    fingerprint = model_fingerprint(scorer.target)
    found = tuned.mismatches(scorer.model_name, scorer.template, request.top_n, fingerprint, scorer.max_new_tokens)
    return {"decision": tuned.decision, "mismatches": found}


def relevance(row: Any) -> float:
    """A kept document's ``relevance_score``: the fused score in the fusion mode (already in [0, 1]), else
    :func:`~grogu.metrics.scales.probability` of its utility (its context's in the context mode)."""
    return float(row.rank_score) if row.rank_score is not None else probability(row.metric, row.score)


def response(
    body: CompatRerankRequest,
    version: int,
    ranked: list[Any],
    model: str,
    usage: dict[str, int],
    mode: str,
    tuned: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    """The compatible answer for ``ranked`` (the pipeline's kept documents, best first). ``tuned``: the
    ``tuned`` field of its ``grogu`` object (:func:`tuned_note`), where the service has a tuned file."""
    return_documents = body.return_documents if body.return_documents is not None else version == 1
    results = []
    for r in ranked:
        row: dict[str, Any] = {"index": r.index, "relevance_score": relevance(r)}
        if return_documents:
            doc = body.documents[r.index]
            row["document"] = doc if isinstance(doc, dict) else {"text": doc}
        results.append(row)
    context = next((r.context for r in ranked if r.context is not None), None)
    gate = next((r.gate for r in ranked if r.gate is not None), None)
    tokens = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    out = {
        "id": str(uuid.uuid4()),
        "model": model,
        "results": results,
        "usage": {**usage, "total_tokens": tokens},
        "meta": {"api_version": {"version": str(version)}, "billed_units": {"search_units": 1}},
        "grogu": {
            "mode": mode,
            "metric": ranked[0].metric if ranked else None,
            "utility": [r.score for r in ranked],
            "gate": None if gate is None else gate.as_dict(),
            "answer": None if context is None else context.answer,
            "ignored": body.ignored(),
        },
    }
    if tuned is not None:
        out["grogu"]["tuned"] = tuned
    return out
