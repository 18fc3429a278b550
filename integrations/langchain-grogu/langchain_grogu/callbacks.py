"""InfluenceCallbackHandler: after each run, how much each retrieved document influenced the answer.

>>> records = []
>>> handler = InfluenceCallbackHandler(model=llm, sinks=[records, "influence.jsonl"])
>>> chain.invoke("Who wrote Hamlet?", config={"callbacks": [handler]})
>>> records[-1]["documents"][0]["influence"]

For every run tree it sees (a top-level ``invoke``/``ainvoke``/``batch`` item), the handler keeps the
documents returned by the outermost retriever(s) (``on_retriever_end``; a retriever inside a
retriever, e.g. the base retriever of :class:`~langchain_grogu.GroguRetriever`, is not counted twice)
and the answer (the run's final output when it is text, else the last LLM output). When the run
ends it computes each document's Influence Score (DocImpact; see ``grogu.influence``) with the target LLM:

    IS_i = cos(F(G(i)), F(answer)) - cos(F(G(all but i)), F(answer))

(G: the target LLM's greedy answer from the given documents, F: a sentence embedder; higher means
document i pulled the answer towards itself more; IS_i lies in [-2, 2]) and delivers one record to
every sink and as a LangChain custom event named ``grogu_influence`` on the run (seen by other
handlers' ``on_custom_event`` and in ``astream_events``). Runs are kept apart by their root run id,
so interleaved and concurrent runs never mix. Scoring, timing, the record (its schema is documented
in :mod:`grogu.influence_log`, shared with the LlamaIndex integration), the sinks and background work
are grogu's :class:`~grogu.influence_log.InfluenceRecorder`; this module holds LangChain's hooks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, CallbackManager
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables.config import ensure_config

from grogu import PromptTemplate
from grogu.influence_log import EVENT, AnsweredQuery, InfluenceRecorder, check_on_error, grogu_utility
from grogu.models import DEFAULT_MODEL
from grogu.scorer_factory import build_influence_scorer

from . import _tracing
from ._target import model_label, resolve_engine
from .rerank import grogu_documents
from .sinks import DEFAULT_LOGGER, Record

logger = logging.getLogger(__name__)

#: Name of the custom event that carries each record (the records' ``event`` field).
EVENT_NAME = EVENT

_ANSWER_KEYS = ("answer", "output", "result", "text", "response", "content")


@dataclass
class _RunTree:
    """What one top-level run has produced so far."""

    root: UUID
    name: str | None
    tags: list[str]
    metadata: dict[str, Any]
    runs: set[UUID] = field(default_factory=set)
    retrievers: set[UUID] = field(default_factory=set)
    outer_queries: dict[UUID, str] = field(default_factory=dict)  # outermost retriever run -> its query
    documents: list[Document] = field(default_factory=list)
    query: str | None = None
    llm_answer: str | None = None
    manager: BaseCallbackManager | None = None  # a callback manager inside this run, for the custom event
    trace_context: Any = None  # OpenTelemetry context of the root run's traced span (grogu.tracing)


def _message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    parts = [p if isinstance(p, str) else p.get("text", "") for p in content if isinstance(p, (str, dict))]
    return "".join(parts)


def answer_text(output: Any) -> str | None:
    """The answer in a run's output: a str, a message, or a mapping with an answer-like key."""
    if isinstance(output, str):
        return output
    if isinstance(output, BaseMessage):
        return _message_text(output)
    if isinstance(output, Mapping):
        for key in _ANSWER_KEYS:
            value = output.get(key)
            if isinstance(value, (str, BaseMessage)):
                return answer_text(value)
    return None


def _llm_text(response: LLMResult) -> str | None:
    generations = response.generations
    if generations and generations[0]:
        return generations[0][0].text
    return None


class InfluenceCallbackHandler(BaseCallbackHandler):
    """Callback handler that logs, for each run, the Influence Score of every retrieved document on
    the answer the run gave.

    Args (the same names as LlamaIndex's ``GroguInfluenceHandler``):
        model: the target LLM (the one that answered): a model name/path/hub id, a ``grogu.Engine``,
            a ``(model, tokenizer)`` pair, a ``HuggingFacePipeline`` (its model and tokenizer are
            reused), a ``ChatHuggingFace`` over one, a transformers text-generation pipeline, a ready
            ``grogu.influence.InfluenceScorer``, or the shared scoring service: its URL (``grogu
            serve``; its ``--embedder`` is used) or a ``grogu.RemoteInfluenceScorer``.
        embedder: sentence-transformers model F (default: the packaged all-MiniLM-L6-v2; a
            ``SentenceTransformer``, a local path or a hub id also work).
        sinks: where records go: a list of sink specs, each a ``logging.Logger``, a JSONL file path,
            a list (records appended: the in-memory sink), an object with ``write(record)``, or a
            callable taking the record. None (the default) logs each record on the
            ``langchain_grogu.influence`` logger; ``[]`` uses none.
        event_name: name of the custom event dispatched with each record (None: no event).
        on_error: 'raise' (default): a failure to score (or of a sink) propagates to the chain
            (``raise_error``), after its record (``error`` set) went to the sinks; 'record': the
            failure is logged and the record delivered with ``influence`` None and ``error`` set.
            'passthrough' means 'record'.
        background: compute and deliver on grogu's worker thread so the chain returns without waiting;
            :meth:`flush` waits for pending records (and re-raises a failure under 'raise'). The
            custom event then arrives after the run has ended.
        title_key: metadata key shown to the LLM as each document's title (default: none).
        relevance_key: metadata key holding the retriever's score, recorded as each document's
            ``retrieval_score`` (default: none, the field is None).
        max_new_tokens: longest answer generated per leave-one-out / single-document context.
        template: grogu prompt text override.
        device, dtype: for a model given by name.
        method: "exact" (2k + 1 generations; default), "ablation" (ContextCite-style estimate from
            ``n_ablations`` random ablations; the documents' ``single_answer`` and
            ``leave_one_out_answer`` are then None) or "auto" (ablation above 12 documents when it
            is cheaper); forward-only, generating nothing when the run gave its answer:
            "leave_one_out_logprob" (drop of the answer's log-probability without each document, nats;
            k + 1 forward passes) or "contextcite" (ContextCite's LASSO weights from ``n_ablations``
            masks, default 64). See ``grogu.influence.InfluenceScorer`` and the README's "which method when".
        n_ablations, seed: the number of random ablations (default: 32 for "ablation"/"auto", 64 for
            "contextcite") and the seed of their masks.

    A record follows :mod:`grogu.influence_log`'s schema (``framework`` "langchain"; ``run_id``,
    ``run_name``, ``tags`` and ``metadata`` of the root run; ``answer_source`` 'output': the run's
    final output, 'llm': the last LLM output, 'grogu': none was given, so the target LLM's
    full-context answer was used). Runs that retrieved nothing through a retriever are not recorded.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        embedder: Any = "all-minilm-l6-v2",
        sinks: Any = None,
        event_name: str | None = EVENT_NAME,
        on_error: Literal["raise", "record", "passthrough"] = "raise",
        background: bool = False,
        title_key: str | None = None,
        relevance_key: str | None = None,
        max_new_tokens: int = 64,
        template: PromptTemplate | None = None,
        device: str | None = None,
        dtype: str | None = None,
        method: str = "exact",
        n_ablations: int | None = None,
        seed: int | None = 0,
    ) -> None:
        on_error = check_on_error(on_error)
        if event_name is not None and (not isinstance(event_name, str) or not event_name):
            raise ValueError("event_name must be a non-empty str or None")
        scorer, label = build_influence_scorer(
            model,
            resolve_engine=resolve_engine,
            model_label=model_label,
            embedder=embedder,
            max_new_tokens=max_new_tokens,
            template=template,
            device=device,
            dtype=dtype,
            method=method,
            n_ablations=n_ablations,
            seed=seed,
        )
        self.recorder = InfluenceRecorder(
            scorer, label, sinks, framework="langchain", on_error=on_error, background=background, logger=DEFAULT_LOGGER
        )
        self.scorer, self.model_name, self.sinks = scorer, label, self.recorder.sinks
        self.on_error, self.background = self.recorder.on_error, self.recorder.background
        self.raise_error = self.recorder.raise_errors
        self.event_name = event_name
        self.title_key, self.relevance_key = title_key, relevance_key
        self._lock = threading.Lock()
        self._trees: dict[UUID, _RunTree] = {}  # root run id -> tree
        self._root_of: dict[UUID, UUID] = {}  # any run id -> its root run id
        self._parent: dict[UUID, UUID | None] = {}

    def __repr__(self) -> str:
        return f"InfluenceCallbackHandler(model={self.model_name!r}, sinks={self.sinks!r})"

    # ------------------------------------------------------------------ run-tree bookkeeping
    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> _RunTree:
        with self._lock:
            root = self._root_of.get(parent_run_id) if parent_run_id is not None else None
            if root is None:  # a run whose parent we did not see is the top of a tree
                root = run_id
                self._trees[root] = _RunTree(root=root, name=name, tags=list(tags or []), metadata=dict(metadata or {}))
            tree = self._trees[root]
            self._root_of[run_id] = root
            self._parent[run_id] = parent_run_id
            tree.runs.add(run_id)
            if tree.manager is None:
                tree.manager = self._current_manager(tree)
            return tree

    @staticmethod
    def _current_manager(tree: _RunTree) -> BaseCallbackManager | None:
        """The callback manager LangChain set for the runnable now executing, when it belongs to this
        tree: its inheritable handlers are every handler of the run (e.g. astream_events' stream).
        ``ensure_config()`` reads the config of the runnable now executing (a copy of its manager:
        same handlers and parent run)."""
        manager = ensure_config().get("callbacks")
        if isinstance(manager, BaseCallbackManager) and manager.parent_run_id in tree.runs:
            return manager
        return None

    def _tree_of(self, run_id: UUID) -> _RunTree | None:
        root = self._root_of.get(run_id)
        return self._trees.get(root) if root is not None else None

    def _has_retriever_ancestor(self, run_id: UUID | None, tree: _RunTree) -> bool:
        while run_id is not None and run_id in tree.runs:
            if run_id in tree.retrievers:
                return True
            run_id = self._parent.get(run_id)
        return False

    def _pop_if_root(self, run_id: UUID) -> _RunTree | None:
        with self._lock:
            tree = self._trees.pop(run_id, None)
            if tree is not None:
                for r in tree.runs:
                    self._root_of.pop(r, None)
                    self._parent.pop(r, None)
            return tree

    def _end(self, run_id: UUID, output: Any) -> None:
        tree = self._pop_if_root(run_id)
        if tree is None:
            return
        if not tree.outer_queries:
            logger.debug("grogu influence: run %s used no retriever; nothing to record", run_id)
            return
        answer, source = answer_text(output), "output"
        if answer is None:
            answer, source = tree.llm_answer, "llm"
        if answer is None:
            source = "grogu"
        self.recorder.record(self._answered(tree, answer, source))

    def _abort(self, run_id: UUID, error: BaseException) -> None:
        if self._pop_if_root(run_id) is not None:
            logger.debug("grogu influence: run %s failed (%r); no answer to record", run_id, error)

    # ------------------------------------------------------------------ the record
    def _answered(self, tree: _RunTree, answer: str | None, source: str) -> AnsweredQuery:
        query = tree.query if tree.query is not None else next(iter(tree.outer_queries.values()))
        context = {"run_id": str(tree.root), "run_name": tree.name, "tags": tree.tags, "metadata": tree.metadata}
        return AnsweredQuery(
            query=query,
            answer=answer,
            documents=grogu_documents(tree.documents, self.title_key),
            fields=[self._fields(d) for d in tree.documents],
            answer_source=source,
            context=context,
            on_record=lambda record: self._dispatch(tree, record),
            trace_context=tree.trace_context or _tracing.run_span_context(tree.manager, tree.root),
        )

    def _fields(self, doc: Document) -> dict[str, Any]:
        score = doc.metadata.get(self.relevance_key) if self.relevance_key else None
        numeric = isinstance(score, (int, float)) and not isinstance(score, bool)
        return {
            "id": doc.id,
            "page_content": doc.page_content,
            "metadata": dict(doc.metadata),
            "retrieval_score": float(score) if numeric else None,
            "utility": grogu_utility(doc.metadata),
        }

    def _dispatch(self, tree: _RunTree, record: Record) -> None:
        """The record as the custom event ``event_name`` on the root run, to the run's other handlers."""
        manager = tree.manager
        if self.event_name and manager is not None:
            handlers = [h for h in manager.inheritable_handlers if h is not self]
            if handlers:
                # A sync manager also reaches async handlers (LangChain runs their coroutines), as
                # dispatch_custom_event does from sync code; the event belongs to the root run.
                CallbackManager(
                    handlers=handlers,
                    inheritable_handlers=handlers,
                    parent_run_id=tree.root,
                    tags=list(manager.inheritable_tags),
                    metadata=dict(manager.inheritable_metadata),
                ).on_custom_event(self.event_name, record, run_id=tree.root)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record computed in the background has been delivered (no-op otherwise).
        Under on_error='raise' the first background failure is raised here."""
        self.recorder.flush(timeout)

    async def aflush(self) -> None:
        """Wait for every pending record, event-loop tasks included (see ``grogu.influence_log``)."""
        await self.recorder.aflush()

    # ------------------------------------------------------------------ LangChain hooks
    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._end(run_id, outputs)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._abort(run_id, error)

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        tree = self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)
        with self._lock:
            if not self._has_retriever_ancestor(parent_run_id, tree):
                tree.outer_queries[run_id] = query
            tree.retrievers.add(run_id)

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and run_id in tree.outer_queries:
                tree.documents.extend(documents)
                if tree.query is None:
                    tree.query = tree.outer_queries[run_id]
                if tree.trace_context is None:  # the root run's span is open here, not always at its end
                    tree.trace_context = _tracing.run_span_context(tree.manager, tree.root)
        self._end(run_id, None)

    def on_retriever_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._abort(run_id, error)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        text = _llm_text(response)
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and text is not None:
                tree.llm_answer = text
        self._end(run_id, None)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._abort(run_id, error)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._end(run_id, output)

    def on_tool_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._abort(run_id, error)
