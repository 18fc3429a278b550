"""What each top-level LangChain run has produced so far: its retrieved documents, its query and its answer.

A run tree is keyed by its root run id, so interleaved and concurrent runs (``batch``, ``abatch``,
concurrent ``ainvoke``) never mix. Only the outermost retrievers of a tree count: a retriever inside a
retriever (the base retriever of a GroguRetriever) is not counted twice.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables.config import ensure_config

from . import spans

#: the keys of a mapping output that may hold the answer, in the order they are tried
ANSWER_KEYS = ("answer", "output", "result", "text", "response", "content")


@dataclass
class RunTree:
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
    trace_context: Any = None  # OpenTelemetry context of the root run's traced span (grogu.observe.tracing)

    @property
    def first_query(self) -> str:
        """The query of the first outermost retriever that returned, else of the first one started."""
        return self.query if self.query is not None else next(iter(self.outer_queries.values()))


class RunTracker:
    """The open run trees of one callback handler, safe to update from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trees: dict[UUID, RunTree] = {}  # root run id -> tree
        self._root_of: dict[UUID, UUID] = {}  # any run id -> its root run id
        self._parent: dict[UUID, UUID | None] = {}

    def __len__(self) -> int:
        """The number of runs in open trees."""
        return len(self._root_of)

    def start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> RunTree:
        """Add a run to its parent's tree; a run whose parent was not seen starts a tree."""
        with self._lock:
            return self._start(run_id, parent_run_id, name, tags, metadata)

    def start_retriever(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        query: str,
        name: str | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        """Add a retriever run; its query counts when no retriever encloses it."""
        with self._lock:
            tree = self._start(run_id, parent_run_id, name, tags, metadata)
            if not self._has_retriever_ancestor(parent_run_id, tree):
                tree.outer_queries[run_id] = query
            tree.retrievers.add(run_id)

    def retrieved(self, run_id: UUID, documents: Sequence[Document]) -> None:
        """Keep the documents an outermost retriever returned."""
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and run_id in tree.outer_queries:
                tree.documents.extend(documents)
                if tree.query is None:
                    tree.query = tree.outer_queries[run_id]
                if tree.trace_context is None:  # the root run's span is open here, not always at its end
                    tree.trace_context = spans.run_span_context(tree.manager, tree.root)

    def llm_answered(self, run_id: UUID, text: str | None) -> None:
        """Keep an LLM run's output as the tree's latest LLM answer."""
        with self._lock:
            tree = self._tree_of(run_id)
            if tree is not None and text is not None:
                tree.llm_answer = text

    def pop_if_root(self, run_id: UUID) -> RunTree | None:
        """The tree whose root run this is, taken out of the tracker; None for any other run."""
        with self._lock:
            tree = self._trees.pop(run_id, None)
            if tree is not None:
                for r in tree.runs:
                    self._root_of.pop(r, None)
                    self._parent.pop(r, None)
            return tree

    def _start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        name: str | None,
        tags: list[str] | None,
        metadata: dict[str, Any] | None,
    ) -> RunTree:
        root = self._root_of.get(parent_run_id) if parent_run_id is not None else None
        if root is None:  # a run whose parent we did not see is the top of a tree
            root = run_id
            self._trees[root] = RunTree(root=root, name=name, tags=list(tags or []), metadata=dict(metadata or {}))
        tree = self._trees[root]
        self._root_of[run_id] = root
        self._parent[run_id] = parent_run_id
        tree.runs.add(run_id)
        if tree.manager is None:
            tree.manager = current_manager(tree)
        return tree

    def _tree_of(self, run_id: UUID) -> RunTree | None:
        root = self._root_of.get(run_id)
        return self._trees.get(root) if root is not None else None

    def _has_retriever_ancestor(self, run_id: UUID | None, tree: RunTree) -> bool:
        while run_id is not None and run_id in tree.runs:
            if run_id in tree.retrievers:
                return True
            run_id = self._parent.get(run_id)
        return False


def current_manager(tree: RunTree) -> BaseCallbackManager | None:
    """The callback manager LangChain set for the runnable now executing, when it belongs to ``tree``: its
    inheritable handlers are every handler of the run (e.g. astream_events' stream). ``ensure_config()``
    reads the config of the runnable now executing (a copy of its manager: same handlers and parent run)."""
    manager = ensure_config().get("callbacks")
    if isinstance(manager, BaseCallbackManager) and manager.parent_run_id in tree.runs:
        return manager
    return None


def message_text(message: BaseMessage) -> str:
    """The text of a message, its text parts joined."""
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
        return message_text(output)
    if isinstance(output, Mapping):
        for key in ANSWER_KEYS:
            value = output.get(key)
            if isinstance(value, (str, BaseMessage)):
                return answer_text(value)
    return None


def llm_text(response: LLMResult) -> str | None:
    """The first generation's text of an LLM run, else None."""
    generations = response.generations
    if generations and generations[0]:
        return generations[0][0].text
    return None
