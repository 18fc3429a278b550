"""The labelled questions ``grogu tune`` fits on.

Each example is one line of a JSONL file (or one dict in Python) with:

- ``question``: the question, as the pipeline receives it;
- ``answers``: the accepted answers, a non-empty list of strings;
- ``documents``: what the retriever returns for it, best first: strings, or objects with ``text`` (and an
  optional ``title``), as the pipeline's prompt shows them;
- ``id`` (optional): a name for the record; by default a hash of the question and documents.

A record also holds its example's :attr:`Example.content_hash` (question, answers and documents), so a
rerun collects an example again where any of them changed, whatever its id.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ...core.checks import check_documents, check_query

#: the fewest labelled questions tune accepts (two folds of two)
MIN_EXAMPLES = 4


@dataclass(frozen=True)
class Example:
    """One labelled question: its id, question, accepted answers and documents (as given)."""

    id: str
    question: str
    answers: tuple[str, ...]
    documents: tuple[Any, ...]

    @property
    def content_hash(self) -> str:
        """A hash of the question, the answers and the documents (``sha256:`` and 16 hex digits)."""
        blob = json.dumps(
            [self.question, list(self.answers), list(self.documents)], sort_keys=True, ensure_ascii=False, default=str
        )
        return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "documents": list(self.documents),
        }


def _example(item: Any, where: str) -> Example:
    if not isinstance(item, Mapping):
        raise TypeError(f"{where}: an example must be an object with question, answers and documents")
    unknown = sorted(set(item) - {"id", "question", "answers", "documents"})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; an example holds question, answers, documents, id")
    for key in ("question", "answers", "documents"):
        if key not in item:
            raise ValueError(f"{where}: no {key!r}")
    try:
        question = check_query(item["question"])
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None
    answers = item["answers"]
    if isinstance(answers, str) or not isinstance(answers, (list, tuple)) or not answers:
        raise ValueError(f"{where}: answers must be a non-empty list of strings")
    if not all(isinstance(a, str) and a.strip() for a in answers):
        raise ValueError(f"{where}: every answer must be a non-empty string")
    documents = item["documents"]
    if isinstance(documents, (str, bytes)) or not isinstance(documents, (list, tuple)) or not documents:
        raise ValueError(f"{where}: documents must be a non-empty list (the retriever's order, best first)")
    try:
        check_documents(documents)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{where}: {e}") from None
    documents = tuple(dict(d) if isinstance(d, Mapping) else d for d in documents)
    ident = item.get("id")
    if ident is None:
        blob = json.dumps([question, list(documents)], sort_keys=True, ensure_ascii=False)
        ident = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    elif isinstance(ident, bool) or not isinstance(ident, (str, int)):
        raise ValueError(f"{where}: id must be a string or an integer")
    return Example(str(ident), question, tuple(a.strip() for a in answers), documents)


def _items(examples: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(examples, (str, os.PathLike)):
        path = os.fspath(examples)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no examples file at {path!r}")
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield f"{path}:{n}", json.loads(line)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{n} is not JSON: {e}") from None
        return
    if isinstance(examples, (bytes, Mapping)) or not isinstance(examples, Iterable):
        raise TypeError(f"examples must be a JSONL path or a list of dicts, got {type(examples).__name__}")
    for i, item in enumerate(examples):
        yield f"example {i}", item


def load_examples(examples: Any) -> list[Example]:
    """The labelled questions from a JSONL path or a list of dicts, checked (a clear error naming the line
    or position of a bad one, or a repeated id)."""
    out, seen = [], {}
    for where, item in _items(examples):
        ex = _example(item, where)
        if ex.id in seen:
            raise ValueError(f"{where} repeats the id {ex.id!r} of {seen[ex.id]} (the same question and documents?)")
        seen[ex.id] = where
        out.append(ex)
    if len(out) < MIN_EXAMPLES:
        raise ValueError(f"grogu tune needs at least {MIN_EXAMPLES} labelled questions, got {len(out)}")
    return out


__all__ = ["Example", "load_examples", "MIN_EXAMPLES"]
