"""The JSON form of grogu's inputs, settings and results, shared by the service and its client.

Plain dicts, lists, strings and numbers only (no pydantic, no httpx), so the client and the server
agree on one encoding. Documents travel as ``{"text", "title"}``: anything else a document carries
(metadata, ids, the framework's node object) stays with the caller, who gets its own objects back in
the results. Floats travel as Python's ``repr`` (``json`` round-trips them exactly); a NaN or an
infinity (a perplexity can overflow) is written as JSON's non-standard ``NaN`` / ``Infinity``, which
Python's ``json`` reads back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ..acu import ACUResult
from ..attribution import ForwardData
from ..influence import Ablations, InfluenceResult
from ..prompts import Document, PromptTemplate, as_document
from ..scorer import ContextScore, DocumentScore, LayoutChoice, ScoreResult, TokenDetail, UngroundedScore
from ..seper import SePerResult

#: fields of ScoreResult sent as they are (details are encoded apart)
SCORE_FIELDS = ("score", "metric", "confidence", "answer", "n_tokens", "n_key_tokens", "variants", "answer_finished")
_DETAIL_DTYPES = {"grounded_entropy": torch.float32, "grounded_logprob": torch.float32,
                  "ungrounded_entropy": torch.float32, "ungrounded_logprob": torch.float32,
                  "key_mask": torch.bool, "copied": torch.bool}


# ------------------------------------------------------------------ inputs
def encode_document(doc: Any, position: int | None = None) -> dict[str, Any]:
    """What the server needs of a document: its text and title (metadata stays with the caller)."""
    d = doc if isinstance(doc, Document) else as_document(doc, position)
    return {"text": d.text} if d.title is None else {"text": d.text, "title": d.title}


def encode_documents(docs: Sequence[Any]) -> list[dict[str, Any]]:
    return [encode_document(d, i) for i, d in enumerate(docs)]


def encode_template(template: PromptTemplate | None) -> dict[str, Any] | None:
    return None if template is None else dataclasses.asdict(template)


def decode_template(data: dict[str, Any] | None) -> PromptTemplate | None:
    return None if data is None else PromptTemplate(**data)


# ------------------------------------------------------------------ GROGU results
def encode_details(details: TokenDetail | None) -> dict[str, Any] | None:
    if details is None:
        return None
    out: dict[str, Any] = {"tokens": list(details.tokens), "token_ids": [int(t) for t in details.token_ids]}
    for name in _DETAIL_DTYPES:
        value = getattr(details, name)
        out[name] = None if value is None else value.tolist()
    return out


def decode_details(data: dict[str, Any] | None) -> TokenDetail | None:
    if data is None:
        return None
    tensors = {name: None if data.get(name) is None else torch.tensor(data[name], dtype=dtype)
               for name, dtype in _DETAIL_DTYPES.items()}
    return TokenDetail(tokens=list(data["tokens"]), token_ids=list(data["token_ids"]), **tensors)


def encode_score(result: ScoreResult) -> dict[str, Any]:
    """One scored context's GROGU fields (``documents`` / ``document`` are left to the caller)."""
    out = {name: getattr(result, name) for name in SCORE_FIELDS}
    out["details"] = encode_details(result.details)
    return out


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    fields = {name: data[name] for name in SCORE_FIELDS}
    fields["details"] = decode_details(data.get("details"))
    return fields


def decode_context(data: dict[str, Any], documents: list[Any]) -> ContextScore:
    return ContextScore(documents=documents, **_fields(data))


def decode_document_scores(rows: list[dict[str, Any]], originals: list[Any]) -> list[DocumentScore]:
    """Per-document results back onto the caller's own documents (``index`` = input position)."""
    return [DocumentScore(index=i, document=originals[i], **_fields(r)) for i, r in enumerate(rows)]


def encode_ranked(results: list[DocumentScore]) -> dict[str, Any]:
    """A rerank result: per kept document its index, fields and rank score; the context mode's chosen
    context once (its documents are the kept ones, in order)."""
    context = next((r.context for r in results if r.context is not None), None)
    return {
        "results": [{"index": r.index, "rank_score": r.rank_score, **encode_score(r)} for r in results],
        "context": None if context is None else encode_score(context),
    }


def decode_ranked(data: dict[str, Any], originals: list[Any]) -> list[DocumentScore]:
    rows = data["results"]
    context = None
    if data.get("context") is not None:
        context = decode_context(data["context"], [originals[r["index"]] for r in rows])
    return [DocumentScore(index=r["index"], document=originals[r["index"]], rank_score=r.get("rank_score"),
                          context=context, **_fields(r)) for r in rows]


def encode_layout(choice: LayoutChoice) -> dict[str, Any]:
    return {"best": choice.best, "scores": [encode_score(s) for s in choice.scores]}


def decode_layout(data: dict[str, Any], layouts: list[list[Any]]) -> LayoutChoice:
    return LayoutChoice(best=data["best"], scores=[decode_context(s, docs) for s, docs in zip(data["scores"], layouts)])


def encode_ungrounded(result: UngroundedScore) -> dict[str, Any]:
    return dataclasses.asdict(result)


def decode_ungrounded(data: dict[str, Any]) -> UngroundedScore:
    return UngroundedScore(**data)


# ------------------------------------------------------------------ other metrics
def encode_influence(result: InfluenceResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def decode_influence(data: dict[str, Any]) -> InfluenceResult:
    data = dict(data)
    if data.get("ablations") is not None:
        data["ablations"] = Ablations(**data["ablations"])
    if data.get("forward") is not None:
        data["forward"] = ForwardData(**data["forward"])
    return InfluenceResult(**data)


def encode_seper(result: SePerResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def decode_seper(data: dict[str, Any]) -> SePerResult:
    return SePerResult(**data)


def encode_acu(result: ACUResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def decode_acu(data: dict[str, Any]) -> ACUResult:
    return ACUResult(**data)
