"""grogu's own objects to and from the wire schema's bodies (:mod:`.schema`), on both sides.

The server encodes its results (:func:`encode_score`, :func:`encode_ranked`, :func:`encode_layout`); the
client decodes the validated answers onto the caller's own documents (:func:`decode_document_scores`,
:func:`decode_ranked`, ...). Documents travel as ``{"text", "title"}``: anything else a document carries
(metadata, ids, the framework's node object) stays with the caller, who gets its own objects back in the
results. The prompt checks both sides run (:func:`check_template`, :func:`check_format`) are here too.
No pydantic and no httpx here.
"""

from __future__ import annotations

import dataclasses
import string
from typing import Any, Sequence

from ...core.prompts import Document, PromptTemplate, as_document
from ...core.results import ContextScore, DocumentScore, LayoutChoice, ScoreResult, TokenDetail

#: fields of ScoreResult sent as they are (details are encoded apart)
SCORE_FIELDS = tuple(f.name for f in dataclasses.fields(ScoreResult) if f.name != "details")
#: the per-token details' tensors and their dtypes (torch's names: torch is imported only to decode them)
DETAIL_DTYPES = {
    "grounded_entropy": "float32",
    "grounded_logprob": "float32",
    "ungrounded_entropy": "float32",
    "ungrounded_logprob": "float32",
    "key_mask": "bool",
    "copied": "bool",
}


# ------------------------------------------------------------------ inputs
def encode_document(doc: Any, position: int | None = None) -> dict[str, Any]:
    """What the server needs of a document: its text and title (metadata stays with the caller)."""
    d = doc if isinstance(doc, Document) else as_document(doc, position)
    return {"text": d.text} if d.title is None else {"text": d.text, "title": d.title}


def encode_documents(docs: Sequence[Any]) -> list[dict[str, Any]]:
    return [encode_document(d, i) for i, d in enumerate(docs)]


#: the placeholders each template field may hold (str.format names); the others are plain text
TEMPLATE_PLACEHOLDERS = {
    "grounded": ("query", "context"),
    "ungrounded": ("query",),
    "document": ("text", "title"),
    "titled_document": ("text", "title"),
}
TEMPLATE_TEXT_FIELDS = ("separator", "system", "plain_suffix")


def check_format(name: str, text: Any, allowed: Sequence[str]) -> None:
    """A ``str.format`` prompt that holds only the placeholders ``allowed``, written plainly
    (``{query}``: no index, attribute, conversion or format spec, which could fail or blow up when
    rendered); braces meant as text are doubled. ValueError naming ``name`` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be a str, got {type(text).__name__}")
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(
            f"{name} is not a valid format string ({exc}); write a literal brace as {{{{ or }}}}"
        ) from None
    for _, field, spec, conversion in parts:
        if field is None:
            continue
        if field not in allowed:
            raise ValueError(
                f"{name} has the placeholder {{{field}}}; it may hold only "
                + ", ".join(f"{{{a}}}" for a in allowed)
                + " (write a literal brace as {{ or }})"
            )
        if spec or conversion:
            raise ValueError(
                f"{name}: the placeholder {{{field}}} takes no conversion or format spec (got "
                f"{{{field}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}})"
            )


def check_template(fields: dict[str, Any]) -> None:
    """A prompt template's fields as the service takes them: each formatted field holds only its own
    placeholders (:data:`TEMPLATE_PLACEHOLDERS`, :func:`check_format`); ValueError naming the field."""
    for name, allowed in TEMPLATE_PLACEHOLDERS.items():
        if fields.get(name) is not None:
            check_format(f"template.{name}", fields[name], allowed)
    for name in TEMPLATE_TEXT_FIELDS:
        text = fields.get(name)
        if text is not None and not isinstance(text, str):
            raise ValueError(f"template.{name} must be a str or None, got {type(text).__name__}")


def template_chars(fields: dict[str, Any] | None) -> int:
    """Characters of a template's text fields (what the template limit counts)."""
    if not fields:
        return 0
    return sum(len(v) for k, v in fields.items() if isinstance(v, str))


def encode_template(template: PromptTemplate | None) -> dict[str, Any] | None:
    if template is None:
        return None
    fields = dataclasses.asdict(template)
    check_template(fields)
    return fields


def decode_template(data: dict[str, Any] | None) -> PromptTemplate | None:
    return None if data is None else PromptTemplate(**data)


# ------------------------------------------------------------------ GROGU results
def encode_details(details: TokenDetail | None) -> dict[str, Any] | None:
    if details is None:
        return None
    out: dict[str, Any] = {"tokens": list(details.tokens), "token_ids": [int(t) for t in details.token_ids]}
    for name in DETAIL_DTYPES:
        value = getattr(details, name)
        out[name] = None if value is None else value.tolist()
    return out


def decode_details(data: Any) -> TokenDetail | None:
    """A validated answer's details (:class:`~grogu.rerank.remote.schema.TokenDetailsOut`) as tensors."""
    if data is None:
        return None
    import torch  # only here: details are tensors, asked for with details=True

    tensors = {
        name: None if getattr(data, name) is None else torch.tensor(getattr(data, name), dtype=getattr(torch, dtype))
        for name, dtype in DETAIL_DTYPES.items()
    }
    return TokenDetail(tokens=list(data.tokens), token_ids=list(data.token_ids), **tensors)


def encode_score(result: ScoreResult) -> dict[str, Any]:
    """One scored context's GROGU fields (``documents`` / ``document`` are left to the caller)."""
    out = {name: getattr(result, name) for name in SCORE_FIELDS}
    out["details"] = encode_details(result.details)
    return out


def _fields(row: Any) -> dict[str, Any]:
    """A validated row's (:class:`~grogu.rerank.remote.schema.ScoreOut`) ScoreResult fields."""
    fields = {name: getattr(row, name) for name in SCORE_FIELDS}
    fields["variants"] = dict(row.variants)
    fields["details"] = decode_details(row.details)
    return fields


def decode_context(row: Any, documents: list[Any]) -> ContextScore:
    return ContextScore(documents=documents, **_fields(row))


def decode_document_scores(rows: list[Any], originals: list[Any]) -> list[DocumentScore]:
    """Per-document results back onto the caller's own documents (``index`` = input position)."""
    return [DocumentScore(index=i, document=originals[i], **_fields(r)) for i, r in enumerate(rows)]


def encode_ranked(results: list[DocumentScore]) -> dict[str, Any]:
    """A rerank result: per kept document its index, fields and rank score; the context mode's chosen
    context once (its documents are the kept ones, in order)."""
    context = next((r.context for r in results if r.context is not None), None)
    gate = next((r.gate for r in results if r.gate is not None), None)
    return {
        "results": [{"index": r.index, "rank_score": r.rank_score, **encode_score(r)} for r in results],
        "context": None if context is None else encode_score(context),
        "gate": None if gate is None else gate.as_dict(),
    }


def decode_ranked(answer: Any, originals: list[Any]) -> list[DocumentScore]:
    """A validated ``/rerank`` answer (:class:`~grogu.rerank.remote.schema.RerankResponse`) on the caller's
    documents."""
    rows = answer.results
    context = None if answer.context is None else decode_context(answer.context, [originals[r.index] for r in rows])
    return [
        DocumentScore(
            index=r.index,
            document=originals[r.index],
            rank_score=r.rank_score,
            context=context,
            gate=answer.gate,
            **_fields(r),
        )
        for r in rows
    ]


def encode_layout(choice: LayoutChoice) -> dict[str, Any]:
    return {"best": choice.best, "scores": [encode_score(s) for s in choice.scores]}


def decode_layout(answer: Any, layouts: list[list[Any]]) -> LayoutChoice:
    return LayoutChoice(best=answer.best, scores=[decode_context(s, docs) for s, docs in zip(answer.scores, layouts)])
