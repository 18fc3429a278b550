"""GroguRerank: rerank retrieved nodes by how useful each one is to the LLM that will read it."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grogu
from grogu.checks import check_choice, check_positive_int, check_query, check_threshold, check_top_n
from grogu.metrics import metric_name
from grogu.scorer import DocumentScore, LayoutChoice, long_context_order
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from .utils import check_nodes, hide_from_llm, model_label, node_text, resolve_engine

dispatcher = get_dispatcher(__name__)
logger = logging.getLogger(__name__)

LAYOUT_MODES = ("after", "only")
ON_ERROR = ("raise", "passthrough")

# (name, input indices in order) for each candidate layout
Layouts = List[Tuple[str, List[int]]]


class GroguRerank(BaseNodePostprocessor):
    """Rerank nodes by their GROGU utility for a specific target LLM (Hua et al.).

    Each node is scored alone: the target LLM answers the query grounded on the node, and the
    utility is minus its confidence on the answer's key tokens (KeyEntropy by default; nats, higher is
    more useful). Nodes come back sorted by utility; ``threshold`` keeps those at or above it and
    ``top_n`` the first n. ``NodeWithScore.score`` becomes the utility, the retriever's score is kept
    in ``metadata["retrieval_score"]`` and the details in ``metadata["grogu"]`` (both hidden from the
    LLM prompt).

    Args:
        top_n: nodes to keep (None: all, reordered).
        model: the target LLM: a model name/path/hub id, a shared ``grogu.Engine``, a loaded
            ``(model, tokenizer)`` pair, or a LlamaIndex ``HuggingFaceLLM`` (its model is reused).
        threshold: keep only nodes with utility >= threshold (applied before ``top_n``).
        metric: a name from ``grogu.METRICS``: 'key_entropy' (default, the paper's), 'entropy', 'ppl',
            'key_ppl', or a small-model variant (see ``grogu.metrics``).
        layout: None (default) for per-node reranking only; 'after' to then pick, among orders of the
            kept nodes (utility, retrieval, reversed, LongContextReorder), the one whose context-level
            GROGU is best; 'only' to skip per-node scoring and pick the best order of the first
            ``top_n`` retrieved nodes (retrieval, reversed, LongContextReorder).
        on_error: 'raise' (default) or 'passthrough': when scoring fails, return every node in its
            original order with the error logged and recorded in ``metadata["grogu"]["error"]``.
        keep_retrieval_score: write the retriever's score into ``metadata["retrieval_score"]``.
        metadata_mode: which node text the LLM reads (default ``MetadataMode.LLM``, as synthesizers do).
        max_new_tokens: longest grounded answer generated per node.
        template: a ``grogu.PromptTemplate`` overriding the scoring prompt.
        answer_style: 'long' (default) or 'short' (short-answer scoring pass for small models; see
            ``grogu.UtilityScorer``).
        device, dtype: for a model given by name.
    """

    model: str = Field(description="Target LLM whose utility is measured.")
    top_n: Optional[int] = Field(default=None, description="Number of nodes to return (None: all).")
    threshold: Optional[float] = Field(default=None, description="Minimum utility of a kept node.")
    metric: str = Field(default=grogu.DEFAULT_METRIC, description="GROGU variant: key_entropy, entropy, ppl, key_ppl.")
    layout: Optional[str] = Field(default=None, description="None, 'after' or 'only' (see the class docstring).")
    on_error: str = Field(default="raise", description="'raise' or 'passthrough' on a scoring failure.")
    keep_retrieval_score: bool = Field(default=True, description="Keep the retrieval score in metadata.")
    metadata_mode: MetadataMode = Field(default=MetadataMode.LLM, description="Node text the LLM reads.")
    max_new_tokens: int = Field(default=64, description="Longest grounded answer generated per node.")
    answer_style: str = Field(default="long", description="'long' or 'short' (short-answer scoring pass).")

    _scorer: grogu.UtilityScorer = PrivateAttr()

    def __init__(
        self,
        top_n: Optional[int] = None,
        model: Any = grogu.DEFAULT_MODEL,
        *,
        threshold: Optional[float] = None,
        metric: str = grogu.DEFAULT_METRIC,
        layout: Optional[str] = None,
        on_error: str = "raise",
        keep_retrieval_score: bool = True,
        metadata_mode: MetadataMode = MetadataMode.LLM,
        max_new_tokens: int = 64,
        template: Optional[grogu.PromptTemplate] = None,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        answer_style: str = "long",
        callback_manager: Optional[CallbackManager] = None,
    ) -> None:
        top_n, threshold = check_top_n(top_n), check_threshold(threshold)
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        layout = check_choice("layout", layout, (None, *LAYOUT_MODES))
        if layout == "only" and threshold is not None:
            raise ValueError("threshold needs per-node utilities, which layout='only' does not compute; "
                             "use layout='after' or drop the threshold")
        on_error = check_choice("on_error", on_error, ON_ERROR)
        metric = metric_name(metric)
        engine = resolve_engine(model, device=device, dtype=dtype)
        scorer = grogu.UtilityScorer(engine, metric=metric, max_new_tokens=max_new_tokens, template=template,
                                      answer_style=answer_style)
        super().__init__(
            model=model_label(model, engine),
            top_n=top_n,
            threshold=threshold,
            metric=metric,
            layout=layout,
            on_error=on_error,
            keep_retrieval_score=keep_retrieval_score,
            metadata_mode=metadata_mode,
            max_new_tokens=max_new_tokens,
            answer_style=answer_style,
            callback_manager=callback_manager or CallbackManager([]),
        )
        self._scorer = scorer

    @classmethod
    def class_name(cls) -> str:
        return "GroguRerank"

    @property
    def scorer(self) -> grogu.UtilityScorer:
        """The grogu scorer (and through ``.engine`` the shared engine) this reranker uses."""
        return self._scorer

    # ------------------------------------------------------------------ LlamaIndex entry points
    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        self._start(nodes, query_bundle)
        with self.callback_manager.event(CBEventType.RERANKING, payload=self._payload(nodes, query)) as event:
            try:
                new_nodes = self._rank_sync(query, nodes)
            except Exception as exc:
                new_nodes = self._failed(nodes, exc)
            event.on_end(payload={EventPayload.NODES: new_nodes})
        dispatcher.event(ReRankEndEvent(nodes=new_nodes))
        return new_nodes

    async def _apostprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        self._start(nodes, query_bundle)
        with self.callback_manager.event(CBEventType.RERANKING, payload=self._payload(nodes, query)) as event:
            try:
                new_nodes = await self._rank_async(query, nodes)
            except Exception as exc:
                new_nodes = self._failed(nodes, exc)
            event.on_end(payload={EventPayload.NODES: new_nodes})
        dispatcher.event(ReRankEndEvent(nodes=new_nodes))
        return new_nodes

    # ------------------------------------------------------------------ scoring (sync / async twins)
    def _rank_sync(self, query: str, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        docs = [node_text(n.node, self.metadata_mode) for n in nodes]
        ranked, kept = None, self._first_n(len(docs))
        if self.layout != "only":
            ranked = self._scorer.rerank(query, docs, top_n=self.top_n, threshold=self.threshold)
            kept = [r.index for r in ranked]
        layouts = self._layouts(kept)
        choice = self._scorer.best_layout(query, [[docs[i] for i in o] for _, o in layouts]) if layouts else None
        return self._build(nodes, ranked, kept, layouts, choice)

    async def _rank_async(self, query: str, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        docs = [node_text(n.node, self.metadata_mode) for n in nodes]
        ranked, kept = None, self._first_n(len(docs))
        if self.layout != "only":
            ranked = await self._scorer.arerank(query, docs, top_n=self.top_n, threshold=self.threshold)
            kept = [r.index for r in ranked]
        layouts = self._layouts(kept)
        choice = await self._scorer.abest_layout(query, [[docs[i] for i in o] for _, o in layouts]) if layouts else None
        return self._build(nodes, ranked, kept, layouts, choice)

    def _first_n(self, n: int) -> List[int]:
        return list(range(n if self.top_n is None else min(n, self.top_n)))

    def _layouts(self, kept: List[int]) -> Layouts:
        """Candidate orders of the kept nodes (input indices), duplicates dropped; none when layout is off."""
        if self.layout is None or not kept:
            return []
        if self.layout == "after":  # kept is in utility order
            candidates = [("utility", kept), ("retrieval", sorted(kept)), ("reversed", kept[::-1]),
                          ("long_context", long_context_order(kept))]
        else:  # kept is in retrieval order
            candidates = [("retrieval", kept), ("reversed", kept[::-1]), ("long_context", long_context_order(kept))]
        out: Layouts = []
        for name, order in candidates:
            if all(order != o for _, o in out):
                out.append((name, list(order)))
        return out

    def _build(
        self,
        nodes: List[NodeWithScore],
        ranked: Optional[List[DocumentScore]],
        kept: List[int],
        layouts: Layouts,
        choice: Optional[LayoutChoice],
    ) -> List[NodeWithScore]:
        """New NodeWithScore objects in the chosen order, with scores and metadata written."""
        by_index: Dict[int, DocumentScore] = {r.index: r for r in ranked} if ranked is not None else {}
        order = layouts[choice.best][1] if choice is not None else kept
        layout_info = None
        if choice is not None:
            layout_info = {
                "name": layouts[choice.best][0],
                "context_score": float(choice.scores[choice.best].score),
                "candidates": {name: float(s.score) for (name, _), s in zip(layouts, choice.scores)},
                "answer": choice.scores[choice.best].answer,
            }
        out = []
        for rank, i in enumerate(order):
            original, r = nodes[i], by_index.get(i)
            details: Dict[str, Any] = {"model": self.model, "metric": self.metric, "rank": rank, "retrieval_rank": i}
            if r is not None:
                details.update(
                    score=float(r.score), confidence=float(r.confidence), answer=r.answer,
                    n_tokens=int(r.n_tokens), n_key_tokens=int(r.n_key_tokens),
                    variants={k: float(v) for k, v in r.variants.items()},
                )
            if layout_info is not None:
                details["layout"] = layout_info
            self._write_metadata(original, details)
            out.append(NodeWithScore(node=original.node, score=float(r.score) if r is not None else original.score))
        if ranked is not None and not out:
            logger.info("GroguRerank: no node reached threshold %s (of %d)", self.threshold, len(nodes))
        return out

    def _write_metadata(self, original: NodeWithScore, details: Dict[str, Any]) -> None:
        meta = original.node.metadata
        if self.keep_retrieval_score:
            meta["retrieval_score"] = original.score
            hide_from_llm(original.node, "retrieval_score")
        meta["grogu"] = details
        hide_from_llm(original.node, "grogu")

    # ------------------------------------------------------------------ checks, events, failures
    def _check(self, nodes: Any, query_bundle: Optional[QueryBundle]) -> Tuple[str, List[NodeWithScore]]:
        if query_bundle is None:
            raise ValueError("GroguRerank needs the query: pass query_bundle= or query_str= to postprocess_nodes")
        if not isinstance(query_bundle, QueryBundle):
            raise TypeError(f"query_bundle must be a QueryBundle, got {type(query_bundle).__name__}")
        return check_query(query_bundle.query_str), check_nodes(nodes)

    def _start(self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle]) -> None:
        dispatcher.event(ReRankStartEvent(
            query=query_bundle, nodes=nodes, top_n=self.top_n if self.top_n is not None else len(nodes),
            model_name=self.model,
        ))

    def _payload(self, nodes: List[NodeWithScore], query: str) -> Dict[str, Any]:
        return {
            EventPayload.NODES: nodes,
            EventPayload.MODEL_NAME: self.model,
            EventPayload.QUERY_STR: query,
            EventPayload.TOP_K: self.top_n if self.top_n is not None else len(nodes),
        }

    def _failed(self, nodes: List[NodeWithScore], exc: Exception) -> List[NodeWithScore]:
        """on_error='raise': re-raise. 'passthrough': every node back, original order and scores."""
        if self.on_error == "raise":
            raise exc
        error = f"{type(exc).__name__}: {exc}"
        logger.warning("GroguRerank scoring failed; passing %d nodes through unchanged: %s", len(nodes), error,
                       exc_info=exc)
        for n in nodes:
            n.node.metadata["grogu"] = {"model": self.model, "metric": self.metric, "error": error}
            hide_from_llm(n.node, "grogu")
        return list(nodes)


__all__ = ["GroguRerank"]
