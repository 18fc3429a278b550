"""The influence record: the one schema every framework integration writes, and what a framework
hands the recorder (:class:`AnsweredQuery`). The recorder is :mod:`grogu.observe.influence_log`.

The record (a JSON-ready dict; every key is always present, :data:`RECORD_FIELDS`):

================  ===================  ============================================================
``event``         str                  always ``"grogu_influence"``
``framework``     str                  the integration that recorded it: ``"llama_index"``, ``"langchain"``
``created_at``    str                  when the record was made: UTC, ISO 8601
``elapsed_s``     float                seconds spent scoring (rounded to 0.1 ms)
``run_id``        str or None          the framework's id of the query: LangChain's root run id;
                                       LlamaIndex's query span id (instrumentation) or event id (callbacks)
``run_name``      str or None          LangChain's root run name; None in LlamaIndex
``tags``          list[str] or None    LangChain's root run tags; None in LlamaIndex
``metadata``      dict or None         LangChain's root run metadata; LlamaIndex's instrument tags of
                                       the query (instrumentation), None (callbacks)
``query``         str                  the query the documents were retrieved for
``answer``        str or None          the answer scored: the one the pipeline gave, else the target
                                       LLM's own full-context answer (``answer_source`` "grogu")
``answer_source`` str                  ``"output"`` (the pipeline's output / response), ``"llm"`` (the
                                       last LLM output of the run) or ``"grogu"`` (none was given)
``model``         str                  the target LLM whose answers are compared
``embedder``      str or None          the sentence embedder F (None: forward-only method, no documents,
                                       or a failure)
``method``        str                  the method that made the scores ("exact", "ablation",
                                       "leave_one_out_logprob", "contextcite"; see ``InfluenceScorer``)
``influence``     list[float] or None  Influence Score per document, in document order; None on failure
``logprobs``      list[float] or None  forward-only methods: log P(answer | each scored context), nats
``documents``     list[dict]           one per document, in the order the LLM read them (below)
``error``         str or None          ``"Type: message"`` of a scoring failure, else None
================  ===================  ============================================================

Each document (:data:`DOCUMENT_FIELDS`): ``index`` (int, position), ``id`` (str or None: LlamaIndex's
node id, LangChain's ``Document.id``), ``page_content`` (str: the text, without metadata),
``metadata`` (dict: the document's metadata when it was answered from), ``retrieval_score`` (float or
None: the retriever's score where known), ``utility`` (float or None: the GROGU utility a grogu
reranker wrote to ``metadata["grogu"]["score"]``), ``influence`` (float or None), ``single_answer``
and ``leave_one_out_answer`` (str or None: the target LLM's answer from that document alone / from
all but it; "exact" method only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.checks import check_choice
from .sinks import Record

EVENT = "grogu_influence"

RECORD_FIELDS = (
    "event",
    "framework",
    "created_at",
    "elapsed_s",
    "run_id",
    "run_name",
    "tags",
    "metadata",
    "query",
    "answer",
    "answer_source",
    "model",
    "embedder",
    "method",
    "influence",
    "logprobs",
    "documents",
    "error",
)
DOCUMENT_FIELDS = (
    "index",
    "id",
    "page_content",
    "metadata",
    "retrieval_score",
    "utility",
    "influence",
    "single_answer",
    "leave_one_out_answer",
)
#: the per-document fields a framework fills in (the others come from the scores)
DOCUMENT_INPUT_FIELDS = ("id", "page_content", "metadata", "retrieval_score", "utility")
CONTEXT_FIELDS = ("run_id", "run_name", "tags", "metadata")
ANSWER_SOURCES = ("output", "llm", "grogu")

#: on_error: "raise" (the failure reaches the caller) or "record" (logged and recorded only);
#: "passthrough" is accepted as "record".
ON_ERROR = ("raise", "record")


def check_on_error(value: Any) -> str:
    """``value`` as one of :data:`ON_ERROR` ("passthrough" means "record")."""
    value = check_choice("on_error", value, ON_ERROR + ("passthrough",))
    return "record" if value == "passthrough" else value


def grogu_utility(metadata: Any) -> float | None:
    """The GROGU utility a grogu reranker wrote to ``metadata["grogu"]["score"]``, else None."""
    info = metadata.get("grogu") if isinstance(metadata, dict) else None
    score = info.get("score") if isinstance(info, dict) else None
    return float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None


@dataclass
class AnsweredQuery:
    """What a framework hands the recorder for one answered query.

    ``documents``: what the target LLM read, as grogu documents (str or ``{"text", "title"}``);
    ``fields``: per document, the :data:`DOCUMENT_INPUT_FIELDS` the framework knows; ``context``: the
    :data:`CONTEXT_FIELDS` it knows. ``on_result(result)`` runs after a successful scoring, before the
    record is built (e.g. to write scores into the framework's documents); ``on_record(record)`` runs
    after the sinks (e.g. to dispatch a framework event). ``trace_context``: the OpenTelemetry context
    whose span parents the ``grogu.metrics.influence`` span (:mod:`grogu.observe.tracing`; None: the context current
    when :meth:`grogu.observe.influence_log.InfluenceRecorder.record` is called).
    """

    query: str
    answer: str | None
    documents: list[Any]
    fields: list[dict[str, Any]]
    answer_source: str = "output"
    context: dict[str, Any] = field(default_factory=dict)
    on_result: Callable[[Any], None] | None = None
    on_record: Callable[[Record], None] | None = None
    trace_context: Any = None

    def __post_init__(self) -> None:
        if len(self.fields) != len(self.documents):
            raise ValueError(f"{len(self.fields)} document fields for {len(self.documents)} documents")
        unknown = {k for row in self.fields for k in row} - set(DOCUMENT_INPUT_FIELDS)
        unknown |= set(self.context) - set(CONTEXT_FIELDS)
        if unknown:
            raise ValueError(f"not fields of an influence record: {sorted(unknown)}")
        check_choice("answer_source", self.answer_source, ANSWER_SOURCES)


__all__ = [
    "EVENT",
    "RECORD_FIELDS",
    "DOCUMENT_FIELDS",
    "DOCUMENT_INPUT_FIELDS",
    "CONTEXT_FIELDS",
    "ANSWER_SOURCES",
    "ON_ERROR",
    "check_on_error",
    "grogu_utility",
    "AnsweredQuery",
]
