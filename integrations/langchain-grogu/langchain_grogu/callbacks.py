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
so interleaved and concurrent runs never mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal
from uuid import UUID

from grogu import PromptTemplate, batching
from grogu.checks import check_choice
from grogu.influence import InfluenceResult, InfluenceScorer
from grogu.serve import RemoteInfluenceScorer
from grogu.models import DEFAULT_MODEL
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, CallbackManager
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables.config import var_child_runnable_config

from ._target import model_label, remote_target, resolve_engine
from .sinks import Record, as_sinks

logger = logging.getLogger(__name__)

#: Name of the custom event that carries each record.
EVENT_NAME = "grogu_influence"

_ANSWER_KEYS = ("answer", "output", "result", "text", "response", "content")


@dataclass
class _RunTree:
    """What one top-level run has produced so far."""

    root: UUID
    name: str | None
    tags: list[str]
    metadata: dict[str, Any]
    started: float
    runs: set[UUID] = field(default_factory=set)
    retrievers: set[UUID] = field(default_factory=set)
    outer_queries: dict[UUID, str] = field(default_factory=dict)  # outermost retriever run -> its query
    documents: list[Document] = field(default_factory=list)
    query: str | None = None
    llm_answer: str | None = None
    manager: BaseCallbackManager | None = None  # a callback manager inside this run, for the custom event


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

    Args:
        model: the target LLM (the one that answered): a model name/path/hub id, a ``grogu.Engine``,
            a ``(model, tokenizer)`` pair, a ``HuggingFacePipeline`` (its model and tokenizer are
            reused), a ``ChatHuggingFace`` over one, a transformers text-generation pipeline, or the
            shared scoring service: its URL (``grogu serve``; its ``--embedder`` is used) or a
            ``grogu.RemoteInfluenceScorer``.
        embedder: sentence-transformers model F (default: the packaged all-MiniLM-L6-v2; a
            ``SentenceTransformer``, a local path or a hub id also work).
        sinks: where records go: a list of sink specs, each a ``logging.Logger``, a JSONL file path,
            a list (records appended: the in-memory sink), or a callable taking the record. None (the
            default) logs each record on the ``langchain_grogu.influence`` logger; ``[]`` uses none.
        event_name: name of the custom event dispatched with each record (None: no event).
        on_error: 'raise' (default): a failure to score propagates to the chain (``raise_error``);
            'passthrough': the record is still delivered, with ``influence`` None and ``error`` set.
        background: compute and deliver in a worker thread so the chain returns without waiting;
            :meth:`flush` waits for pending records (and re-raises a failure under 'raise'). The
            custom event then arrives after the run has ended.
        title_key: metadata key shown to the LLM as each document's title (default: none).
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

    A record is a JSON-ready dict: ``run_id``, ``run_name``, ``tags``, ``metadata`` (of the root run),
    ``query``, ``answer``, ``answer_source`` ('output': the run's final output, 'llm': the last LLM
    output, 'grogu': none was given, so the target LLM's full-context answer was used), ``model``,
    ``embedder`` (None for a forward-only method), ``method`` (the method that made the scores),
    ``influence`` (IS per document, retrieval order), ``logprobs`` (forward-only methods: log P(answer |
    each scored context) in nats, else None),
    ``documents`` (each with ``index``, ``id``, ``page_content``, ``metadata``, ``influence``, ``single_answer``,
    ``leave_one_out_answer``), ``created_at`` (UTC ISO time), ``elapsed_s`` and ``error``.
    Runs that retrieved nothing through a retriever are not recorded.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        embedder: Any = "all-minilm-l6-v2",
        sinks: Any = None,
        event_name: str | None = EVENT_NAME,
        on_error: Literal["raise", "passthrough"] = "raise",
        background: bool = False,
        title_key: str | None = None,
        max_new_tokens: int = 64,
        template: PromptTemplate | None = None,
        device: str | None = None,
        dtype: str | None = None,
        method: str = "exact",
        n_ablations: int | None = None,
        seed: int | None = 0,
    ) -> None:
        on_error = check_choice("on_error", on_error, ("raise", "passthrough"))
        if event_name is not None and (not isinstance(event_name, str) or not event_name):
            raise ValueError("event_name must be a non-empty str or None")
        remote = remote_target(model)
        if remote is not None:  # the shared scoring service (its own embedder)
            if isinstance(remote, RemoteInfluenceScorer):
                self.scorer = remote
            else:
                self.scorer = RemoteInfluenceScorer(remote if isinstance(remote, str) else remote.transport,
                                                    max_new_tokens=max_new_tokens, template=template, method=method,
                                                    n_ablations=n_ablations, seed=seed)
            self.model_name = self.scorer.model_name
        else:
            engine = resolve_engine(model, device, dtype)
            self.scorer = InfluenceScorer(engine, embedder=embedder, max_new_tokens=max_new_tokens,
                                          template=template, device=device, method=method, n_ablations=n_ablations,
                                          seed=seed)
            self.model_name = model_label(model, engine)
        self.sinks = as_sinks(sinks)
        self.event_name = event_name
        self.on_error = on_error
        self.raise_error = on_error == "raise"
        self.background = background
        self.title_key = title_key
        self._lock = threading.Lock()
        self._trees: dict[UUID, _RunTree] = {}  # root run id -> tree
        self._root_of: dict[UUID, UUID] = {}  # any run id -> its root run id
        self._parent: dict[UUID, UUID | None] = {}
        self._pending: list[Future] = []

    def __repr__(self) -> str:
        return f"InfluenceCallbackHandler(model={self.model_name!r}, sinks={self.sinks!r})"

    # ------------------------------------------------------------------ run-tree bookkeeping
    def _start(self, run_id: UUID, parent_run_id: UUID | None, name: str | None,
               tags: list[str] | None, metadata: dict[str, Any] | None) -> _RunTree:
        with self._lock:
            root = self._root_of.get(parent_run_id) if parent_run_id is not None else None
            if root is None:  # a run whose parent we did not see is the top of a tree
                root = run_id
                self._trees[root] = _RunTree(root=root, name=name, tags=list(tags or []),
                                             metadata=dict(metadata or {}), started=time.perf_counter())
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
        tree: its inheritable handlers are every handler of the run (e.g. astream_events' stream)."""
        config = var_child_runnable_config.get()
        manager = config.get("callbacks") if config else None
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
        if self.background:
            with self._lock:  # on grogu's worker thread (grogu.batching), which is shut down cleanly at exit
                self._pending = [f for f in self._pending if not f.done() or f.exception() is not None]
                self._pending.append(batching.submit(self._process, tree, answer, source))
            return
        self._process(tree, answer, source)

    def _abort(self, run_id: UUID, error: BaseException) -> None:
        if self._pop_if_root(run_id) is not None:
            logger.debug("grogu influence: run %s failed (%r); no answer to record", run_id, error)

    # ------------------------------------------------------------------ scoring and delivery
    def _grogu_docs(self, docs: Sequence[Document]) -> list[dict[str, Any]]:
        out = []
        for d in docs:
            title = d.metadata.get(self.title_key) if self.title_key else None
            out.append({"text": d.page_content, "title": title if isinstance(title, str) and title else None})
        return out

    def _process(self, tree: _RunTree, answer: str | None, source: str) -> Record:
        started = time.perf_counter()
        query = tree.query if tree.query is not None else next(iter(tree.outer_queries.values()))
        result: InfluenceResult | None = None
        error = None
        try:
            result = self.scorer.score(query, self._grogu_docs(tree.documents), answer=answer)
        except Exception as exc:  # noqa: BLE001 - on_error decides
            if self.on_error == "raise":
                raise
            error = f"{type(exc).__name__}: {exc}"
            logger.warning("grogu influence failed for run %s; recording it without scores: %s", tree.root, error)
        record = self._record(tree, query, answer, source, result, error, time.perf_counter() - started)
        self._deliver(tree, record)
        return record

    def _record(self, tree: _RunTree, query: str, answer: str | None, source: str,
                result: InfluenceResult | None, error: str | None, elapsed: float) -> Record:
        docs = []
        for i, d in enumerate(tree.documents):
            docs.append({
                "index": i, "id": d.id, "page_content": d.page_content, "metadata": dict(d.metadata),
                "influence": result.scores[i] if result else None,
                "single_answer": result.single_answers[i] if result and result.single_answers else None,
                "leave_one_out_answer": (result.leave_one_out_answers[i]
                                         if result and result.leave_one_out_answers else None),
            })
        return {
            "run_id": str(tree.root), "run_name": tree.name, "tags": tree.tags, "metadata": tree.metadata,
            "query": query, "answer": result.answer if result else answer, "answer_source": source,
            "model": self.model_name, "embedder": result.embedder if result else None,
            "method": result.method if result else self.scorer.method,
            "influence": list(result.scores) if result else None, "documents": docs,
            "logprobs": result.forward.logprobs if result and result.forward else None,
            "created_at": datetime.now(timezone.utc).isoformat(), "elapsed_s": round(elapsed, 4), "error": error,
        }

    def _deliver(self, tree: _RunTree, record: Record) -> None:
        for sink in self.sinks:
            try:
                sink.write(record)
            except Exception as exc:  # noqa: BLE001 - on_error decides
                if self.on_error == "raise":
                    raise
                logger.warning("grogu influence: sink %r failed: %r", sink, exc)
        manager = tree.manager
        if self.event_name and manager is not None:
            handlers = [h for h in manager.inheritable_handlers if h is not self]
            if handlers:
                # A sync manager also reaches async handlers (LangChain runs their coroutines), as
                # dispatch_custom_event does from sync code; the event belongs to the root run.
                CallbackManager(
                    handlers=handlers, inheritable_handlers=handlers, parent_run_id=tree.root,
                    tags=list(manager.inheritable_tags), metadata=dict(manager.inheritable_metadata),
                ).on_custom_event(self.event_name, record, run_id=tree.root)

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record computed in the background has been delivered (no-op otherwise).
        Under on_error='raise' the first background failure is raised here."""
        with self._lock:
            pending, self._pending = self._pending, []
        errors = []
        for future in pending:
            exc = future.exception(timeout=timeout)
            if exc is not None:
                errors.append(exc)
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ LangChain hooks
    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._end(run_id, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                       **kwargs: Any) -> None:
        self._abort(run_id, error)

    def on_retriever_start(self, serialized: dict[str, Any] | None, query: str, *, run_id: UUID,
                           parent_run_id: UUID | None = None, tags: list[str] | None = None,
                           metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        tree = self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags,
                           metadata)
        with self._lock:
            if not self._has_retriever_ancestor(parent_run_id, tree):
                tree.outer_queries[run_id] = query
            tree.retrievers.add(run_id)

    def on_retriever_end(self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None,
                         **kwargs: Any) -> None:
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and run_id in tree.outer_queries:
                tree.documents.extend(documents)
                if tree.query is None:
                    tree.query = tree.outer_queries[run_id]
        self._end(run_id, None)

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                           **kwargs: Any) -> None:
        self._abort(run_id, error)

    def on_llm_start(self, serialized: dict[str, Any] | None, prompts: list[str], *, run_id: UUID,
                     parent_run_id: UUID | None = None, tags: list[str] | None = None,
                     metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]], *,
                            run_id: UUID, parent_run_id: UUID | None = None, tags: list[str] | None = None,
                            metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None,
                   **kwargs: Any) -> None:
        text = _llm_text(response)
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and text is not None:
                tree.llm_answer = text
        self._end(run_id, None)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._abort(run_id, error)

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID,
                      parent_run_id: UUID | None = None, tags: list[str] | None = None,
                      metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._end(run_id, output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None,
                      **kwargs: Any) -> None:
        self._abort(run_id, error)
