"""InfluenceCallbackHandler: after each run, how much each retrieved document influenced the answer.

>>> records = []
>>> handler = InfluenceCallbackHandler(model=llm, sinks=[records, "influence.jsonl"])
>>> chain.invoke("Who wrote Hamlet?", config={"callbacks": [handler]})
>>> records[-1]["documents"][0]["influence"]

For every run tree it sees (a top-level ``invoke``/``ainvoke``/``batch`` item), the handler keeps the
documents returned by the outermost retriever(s) (``on_retriever_end``; a retriever inside a
retriever, e.g. the base retriever of :class:`~langchain_grogu.GroguRetriever`, is not counted twice)
and the answer (the run's final output when it is text, else the last LLM output). When the run
ends it computes each document's Influence Score (DocImpact; see ``grogu.metrics.influence``) with the target LLM:

    IS_i = cos(F(G(i)), F(answer)) - cos(F(G(all but i)), F(answer))

(G: the target LLM's greedy answer from the given documents, F: a sentence embedder; higher means
document i pulled the answer towards itself more; IS_i lies in [-2, 2]) and delivers one record to
every sink and as a LangChain custom event named ``grogu_influence`` on the run (seen by other
handlers' ``on_custom_event`` and in ``astream_events``). Runs are kept apart by their root run id,
so interleaved and concurrent runs never mix. Scoring, timing, the record (its schema is documented
in :mod:`grogu.observe.influence_record`, shared with the LlamaIndex integration), the sinks and background work
are grogu's :class:`~grogu.observe.influence_log.InfluenceRecorder`; the run trees are
:mod:`langchain_grogu.run_tracking`'s; this module holds LangChain's hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, CallbackManager
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult

from grogu import PromptTemplate
from grogu.metrics.influence import DEFAULT_MAX_NEW_TOKENS as DEFAULT_INFLUENCE_TOKENS
from grogu.observe.influence_log import InfluenceRecorder
from grogu.observe.influence_record import EVENT, AnsweredQuery, check_on_error, grogu_utility
from grogu.observe.sinks import Record
from grogu.rerank.factory import build_influence_scorer
from grogu.runtime.models import DEFAULT_MODEL

from . import spans
from .document_scores import grogu_documents
from .run_tracking import RunTracker, RunTree, answer_text, llm_text
from .sinks import DEFAULT_LOGGER
from .target import model_label, resolve_engine

logger = logging.getLogger(__name__)

#: Name of the custom event that carries each record (the records' ``event`` field).
EVENT_NAME = EVENT


class InfluenceCallbackHandler(BaseCallbackHandler):
    """Callback handler that logs, for each run, the Influence Score of every retrieved document on
    the answer the run gave.

    Args (named as in LlamaIndex's ``GroguInfluenceHandler``; the package README tells more):
        model: the target LLM that answered (as for GroguCompressor), or a ready ``InfluenceScorer``.
        embedder: the sentence embedder F: the packaged all-MiniLM-L6-v2, a ``SentenceTransformer`` or a path.
        sinks: sink specs (``grogu.observe.sinks.as_sink``); None logs on ``langchain_grogu.influence``; ``[]``: none.
        event_name: the custom event dispatched with each record; None dispatches none.
        on_error: 'raise' fails the run once the failure's record is out; 'record' ('passthrough') goes on.
        background: score on grogu's worker thread so the chain returns at once; :meth:`flush` waits.
        title_key: metadata key shown to the LLM as each document's title.
        relevance_key: metadata key of the retriever's score, recorded as each document's ``retrieval_score``.
        max_new_tokens: longest answer generated per context.
        template: override of grogu's prompt text.
        device: device for a model given by name.
        dtype: dtype for a model given by name.
        method: 'exact', 'ablation', 'auto', 'leave_one_out_logprob' or 'contextcite' (``InfluenceScorer``).
        n_ablations: random ablations: default 32 for 'ablation' and 'auto', 64 for 'contextcite'.
        seed: seed of the ablation masks.

    A record follows :mod:`grogu.observe.influence_record`'s schema (``framework`` "langchain"; ``run_id``,
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
        on_error: Literal["raise", "record", "passthrough"] = "record",
        background: bool = False,
        title_key: str | None = None,
        relevance_key: str | None = None,
        max_new_tokens: int = DEFAULT_INFLUENCE_TOKENS,
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
        self.runs = RunTracker()

    def __repr__(self) -> str:
        return f"InfluenceCallbackHandler(model={self.model_name!r}, sinks={self.sinks!r})"

    # ------------------------------------------------------------------ the record
    def _end(self, run_id: UUID, output: Any) -> None:
        tree = self.runs.pop_if_root(run_id)
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
        if self.runs.pop_if_root(run_id) is not None:
            logger.debug("grogu influence: run %s failed (%r); no answer to record", run_id, error)

    def _answered(self, tree: RunTree, answer: str | None, source: str) -> AnsweredQuery:
        context = {"run_id": str(tree.root), "run_name": tree.name, "tags": tree.tags, "metadata": tree.metadata}
        return AnsweredQuery(
            query=tree.first_query,
            answer=answer,
            documents=grogu_documents(tree.documents, self.title_key),
            fields=[self._fields(d) for d in tree.documents],
            answer_source=source,
            context=context,
            on_record=lambda record: self._dispatch(tree, record),
            trace_context=tree.trace_context or spans.run_span_context(tree.manager, tree.root),
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

    def _dispatch(self, tree: RunTree, record: Record) -> None:
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
        """Wait for every pending record, event-loop tasks included (see ``grogu.observe.influence_log``)."""
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
        self.runs.start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

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
        name = kwargs.get("name") or (serialized or {}).get("name")
        self.runs.start_retriever(run_id, parent_run_id, query, name, tags, metadata)

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self.runs.retrieved(run_id, documents)
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
        self.runs.start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

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
        self.runs.start(run_id, parent_run_id, kwargs.get("name"), tags, metadata)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self.runs.llm_answered(run_id, llm_text(response))
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
        self.runs.start(run_id, parent_run_id, kwargs.get("name") or (serialized or {}).get("name"), tags, metadata)

    def on_tool_end(self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._end(run_id, output)

    def on_tool_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        self._abort(run_id, error)
