"""GroguRerank: rerank retrieved nodes by how useful each one is to the LLM that will read it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import warnings
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional, Tuple

from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

import grogu
from grogu.checks import check_choice, check_positive_int, check_query, check_threshold, check_top_n
from grogu.metrics import metric_name
from grogu.rerank import ModeSettings
from grogu.scales import check_score_scale, probability, utility_threshold
from grogu.scorer import DocumentScore, LayoutChoice, long_context_order
from grogu.scorer_factory import Scorer, build_scorer

from . import _tracing
from .options import layout_and_mode, scoring_prompt
from .synthesizer import prompt_fingerprint
from .utils import check_nodes, hide_from_llm, model_label, node_text, resolve_engine

dispatcher = get_dispatcher(__name__)
logger = logging.getLogger(__name__)

ON_ERROR = ("raise", "passthrough")

# (name, input indices in order) for each candidate layout
Layouts = List[Tuple[str, List[int]]]

_UNSET: Any = object()
#: per-call settings of the rerankers inside ``GroguRerank.using(...)``: {id(reranker): {"top_n": n}}
_CALL_SETTINGS: contextvars.ContextVar[Dict[int, Dict[str, Any]]] = contextvars.ContextVar(
    "grogu_rerank_call_settings", default={}
)


class GroguRerank(BaseNodePostprocessor):
    """Choose and order nodes by their GROGU utility for a specific target LLM (Hua et al.).

    Utility is minus the target LLM's confidence on the key tokens of its grounded answer (KeyEntropy
    by default; higher is more useful). ``mode`` says how it becomes the nodes the LLM reads:

    - ``"context"`` (default): a few candidate contexts of ``top_n`` nodes from the retrieval order
      (the retriever's own top-n, and the top-n with its last node swapped for the next ones), each
      scored as one whole context; the most useful is kept if it beats the retriever's own by
      ``margin``. Nodes keep the retrieval order and score.
    - ``"document"``: each node scored alone and sorted by utility (the paper's per-document GROGU);
      ``NodeWithScore.score`` becomes the utility and ``threshold`` keeps those at or above it.
    - ``"fusion"``: each node's utility rank fused with its retrieval rank (``weight`` on utility);
      the score becomes the fused score.
    - ``"prune"``: nodes that leave the LLM less sure than no node at all are dropped.
    The retriever's score is kept in ``metadata["retrieval_score"]`` and the details in
    ``metadata["grogu"]`` (both hidden from the LLM prompt). Which mode to pick: the package README.

    Args:
        top_n: nodes to keep (None: all).
        model: the target LLM: a model name/path/hub id, a shared ``grogu.Engine``, a loaded
            ``(model, tokenizer)`` pair, a LlamaIndex ``HuggingFaceLLM`` (its model is reused), or the
            shared scoring service: its URL (``"http://host:8000"``, see ``grogu serve``) or a
            ``grogu.RemoteScorer`` (only text and title of each node are sent).
        threshold: keep only nodes with utility >= threshold (applied before ``top_n``).
        metric: a name from ``grogu.METRICS``: 'key_entropy' (default, the paper's), 'entropy', 'ppl',
            'key_ppl', or a small-model variant (see ``grogu.metrics``).
        layout: deprecated (goes in the next release; use ``mode='context', family='orders'``). None
            (default) for per-node reranking only; 'after' to then pick, among orders of the
            kept nodes (utility, retrieval, reversed, LongContextReorder), the one whose context-level
            GROGU is best; 'only' to skip per-node scoring and pick the best order of the first
            ``top_n`` retrieved nodes (retrieval, reversed, LongContextReorder).
        on_error: 'raise' (default) or 'passthrough': when scoring fails, return every node in its
            original order with the error logged and recorded in ``metadata["grogu"]["error"]``.
        keep_retrieval_score: write the retriever's score into ``metadata["retrieval_score"]``.
        metadata_mode: which node text the LLM reads (default ``MetadataMode.LLM``, as synthesizers do).
        max_new_tokens: longest grounded answer generated per context (default: the LLM's own
            ``max_new_tokens`` when scoring with the pipeline's prompt, else 64).
        template: a ``grogu.PromptTemplate`` overriding the scoring prompt.
        qa_template: score with the prompt the LLM will read: a query engine, a response synthesizer or
            its ``text_qa_template`` (see ``template_from_llama_index``); 'auto' (default): in the context
            mode with a LlamaIndex LLM, the default synthesizer's QA prompt for that LLM, else grogu's
            own scoring prompt; None: grogu's own prompt. With the pipeline's own prompt
            the context mode's answer (``metadata["grogu"]["context"]["answer"]``) is the answer the
            synthesizer gives for the chosen nodes.
        mode: 'context' (default), 'document', 'fusion' or 'prune' (see above).
        weight: fusion: weight of the utility rank in [0, 1].
        family, swaps, margin: context: the candidate contexts ('swap_orders' by default, 'swap',
            'swap_reversed', 'orders', 'drop', 'all'; see ``grogu.selection.context_candidates``), how
            many next nodes try the last slot, and how much (on the selection rule's score) a candidate
            must beat the retriever's own context.
        settings: a ``grogu.ModeSettings`` holding the mode's settings (the keyword arguments above,
            and any other setting of ``grogu.ModeSettings`` given by name, replace its values); the
            reranker keeps them as ``self.settings``.
        answer_style: 'long' (default) or 'short' (short-answer scoring pass for small models; see
            ``grogu.UtilityScorer``).
        device, dtype: for a model given by name.
        score_scale: 'utility' (default: grogu's utility, minus key-token entropy in nats, unbounded) or
            'probability': the utility mapped to [0, 1] in the same order (``grogu.scales``: exp(-entropy)
            for the entropy metrics, 1/perplexity for the PPL ones), so rankings are unchanged and
            ``threshold`` is a number in [0, 1]. It is the scale of ``NodeWithScore.score`` in the
            document mode (the fusion mode's fused score is in [0, 1] already); ``metadata["grogu"]``
            keeps the utility and adds ``probability``.
        batch_size: most prompts the engine runs in one forward pass (``grogu.EngineConfig``'s
            ``max_batch_size``; default 32 on CPU, 64 on GPU): lower it to bound memory. It sets the
            process-wide engine of the model, shared by every component that scores with it.
        engine_config: the engine's whole ``grogu.EngineConfig`` (``max_batch_tokens`` and
            ``logits_budget_mb`` bound a forward pass's memory), in place of ``batch_size``.

    Per call: ``postprocess_nodes(nodes, query_str=..., top_n=2)`` (and ``apostprocess_nodes``), or
    ``with reranker.using(top_n=2): query_engine.query(...)`` for a query engine's own call (LlamaIndex's
    postprocessor interface takes no per-call arguments).
    """

    model: str = Field(description="Target LLM whose utility is measured.")
    top_n: Optional[int] = Field(default=None, description="Number of nodes to return (None: all).")
    threshold: Optional[float] = Field(default=None, description="Minimum utility of a kept node.")
    metric: str = Field(
        default=grogu.DEFAULT_METRIC,
        description="GROGU variant: key_entropy, entropy, ppl, key_ppl "
        "(given None: key_entropy, or ppl for an LLM behind a chat API).",
    )
    layout: Optional[str] = Field(default=None, description="None, 'after' or 'only' (see the class docstring).")
    on_error: str = Field(default="raise", description="'raise' or 'passthrough' on a scoring failure.")
    keep_retrieval_score: bool = Field(default=True, description="Keep the retrieval score in metadata.")
    metadata_mode: MetadataMode = Field(default=MetadataMode.LLM, description="Node text the LLM reads.")
    max_new_tokens: int = Field(default=64, description="Longest grounded answer generated per context.")
    answer_style: str = Field(default="long", description="'long' or 'short' (short-answer scoring pass).")
    settings: ModeSettings = Field(
        default_factory=ModeSettings, description="The rerank mode and its settings (grogu.ModeSettings)."
    )
    score_scale: str = Field(default="utility", description="'utility' (nats) or 'probability' ([0, 1]).")
    batch_size: Optional[int] = Field(default=None, description="Most prompts in one forward pass of the engine.")

    _scorer: Scorer = PrivateAttr()
    _fingerprint: str = PrivateAttr()

    def __init__(
        self,
        top_n: Optional[int] = None,
        model: Any = grogu.DEFAULT_MODEL,
        *,
        threshold: Optional[float] = None,
        metric: Optional[str] = None,
        layout: Optional[str] = None,
        on_error: str = "raise",
        keep_retrieval_score: bool = True,
        metadata_mode: MetadataMode = MetadataMode.LLM,
        max_new_tokens: Optional[int] = None,
        template: Optional[grogu.PromptTemplate] = None,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        answer_style: str = "long",
        qa_template: Any = "auto",
        mode: Optional[str] = None,
        weight: Optional[float] = None,
        family: Optional[str] = None,
        swaps: Optional[int] = None,
        margin: Optional[float] = None,
        settings: Optional[ModeSettings] = None,
        callback_manager: Optional[CallbackManager] = None,
        score_scale: str = "utility",
        batch_size: Optional[int] = None,
        engine_config: Optional[grogu.EngineConfig] = None,
        **more_settings: Any,
    ) -> None:
        top_n, threshold = check_top_n(top_n), check_threshold(threshold)
        score_scale = check_score_scale(score_scale)
        if batch_size is not None:
            batch_size = check_positive_int("batch_size", batch_size)
        if max_new_tokens is not None:
            max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        on_error = check_choice("on_error", on_error, ON_ERROR)
        if layout is not None:
            warnings.warn(
                "GroguRerank(layout=...) is deprecated and goes in the next release: the context mode "
                "chooses among orders of the top-n itself (mode='context', family='orders', or "
                "family='swap_orders' with swapped documents)",
                DeprecationWarning,
                stacklevel=2,
            )
        given = settings.mode if isinstance(settings, ModeSettings) and mode is None else mode
        layout, mode = layout_and_mode(layout, given, threshold)
        settings = ModeSettings.build(
            settings, mode=mode, weight=weight, family=family, swaps=swaps, margin=margin, **more_settings
        )
        settings.check_threshold(threshold)
        metric = None if metric is None else metric_name(metric)
        llm = model if isinstance(model, LLM) else None
        template, max_new_tokens = scoring_prompt(qa_template, template, settings.mode, llm, max_new_tokens)
        options = dict(metric=metric, max_new_tokens=max_new_tokens, template=template, answer_style=answer_style)
        # a service (node metadata stay here), or the model / server run for this process
        scorer, label = build_scorer(
            model,
            resolve_engine=resolve_engine,
            model_label=model_label,
            device=device,
            dtype=dtype,
            batch_size=batch_size,
            engine_config=engine_config,
            **options,
        )
        metric = scorer.metric  # None: the target's default
        if score_scale == "probability":
            utility_threshold(metric, threshold)  # a ValueError unless in [0, 1]
        super().__init__(
            model=label,
            top_n=top_n,
            threshold=threshold,
            metric=metric,
            layout=layout,
            on_error=on_error,
            keep_retrieval_score=keep_retrieval_score,
            metadata_mode=metadata_mode,
            max_new_tokens=max_new_tokens,
            answer_style=answer_style,
            settings=settings,
            score_scale=score_scale,
            batch_size=batch_size,
            callback_manager=callback_manager or CallbackManager([]),
        )
        self._scorer = scorer
        self._fingerprint = prompt_fingerprint(scorer.template, max_new_tokens)

    @classmethod
    def class_name(cls) -> str:
        return "GroguRerank"

    @property
    def mode(self) -> str:
        """The rerank mode (``self.settings.mode``)."""
        return self.settings.mode

    @property
    def scorer(self) -> Scorer:
        """The grogu scorer (and through ``.engine`` the shared engine) this reranker uses; a
        ``grogu.RemoteScorer`` when it scores with a grogu service."""
        return self._scorer

    # ------------------------------------------------------------------ per-call settings
    @contextmanager
    def using(self, *, top_n: Any = _UNSET) -> Iterator["GroguRerank"]:
        """Settings for the calls made inside the block, in this thread or task only (a query engine's
        ``query``/``aquery`` included): ``with reranker.using(top_n=2): engine.query(q)``. ``top_n``: a
        positive int or None (every node)."""
        settings = dict(_CALL_SETTINGS.get().get(id(self), {}))
        if top_n is not _UNSET:
            settings["top_n"] = check_top_n(top_n)
        token = _CALL_SETTINGS.set({**_CALL_SETTINGS.get(), id(self): settings})
        try:
            yield self
        finally:
            _CALL_SETTINGS.reset(token)

    def _per_call(self, top_n: Any):
        return contextlib.nullcontext() if top_n is _UNSET else self.using(top_n=top_n)

    def postprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
        query_str: Optional[str] = None,
        *,
        top_n: Any = _UNSET,
    ) -> List[NodeWithScore]:
        """LlamaIndex's ``postprocess_nodes``, with an optional per-call ``top_n`` (None: every node)."""
        with self._per_call(top_n):
            return super().postprocess_nodes(nodes, query_bundle, query_str)

    async def apostprocess_nodes(
        self,
        nodes: List[NodeWithScore],
        query_bundle: Optional[QueryBundle] = None,
        query_str: Optional[str] = None,
        *,
        top_n: Any = _UNSET,
    ) -> List[NodeWithScore]:
        """Async :meth:`postprocess_nodes`."""
        with self._per_call(top_n):
            return await super().apostprocess_nodes(nodes, query_bundle, query_str)

    def _top_n(self) -> Optional[int]:
        """The ``top_n`` of this call: ``using``'s, else the reranker's."""
        return _CALL_SETTINGS.get().get(id(self), {}).get("top_n", self.top_n)

    def _utility_threshold(self) -> Optional[float]:
        """``threshold`` as a utility (converted from [0, 1] with ``score_scale='probability'``)."""
        if self.score_scale == "probability":
            return utility_threshold(self.metric, self.threshold)
        return self.threshold

    # ------------------------------------------------------------------ LlamaIndex entry points
    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        with self._reranking(nodes, query_bundle, query) as run:
            run.nodes = self._rank_sync(query, nodes)
        return run.nodes

    async def _apostprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        with self._reranking(nodes, query_bundle, query) as run:
            run.nodes = await self._rank_async(query, nodes)
        return run.nodes

    @contextmanager
    def _reranking(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle], query: str
    ) -> Iterator[SimpleNamespace]:
        """One rerank's events around its scoring (LlamaIndex's start/end events, the callback event, the
        OpenTelemetry span): the body sets ``run.nodes``; a failure goes to the ``on_error`` policy."""
        self._start(nodes, query_bundle)
        run = SimpleNamespace(nodes=None)
        with (
            _tracing.rerank_span(self, nodes, query) as span,
            self.callback_manager.event(CBEventType.RERANKING, payload=self._payload(nodes, query)) as event,
        ):
            try:
                yield run
            except Exception as exc:
                span.fail(exc)
                run.nodes = self._failed(nodes, exc)
            _tracing.finish(span, nodes, run.nodes)
            event.on_end(payload={EventPayload.NODES: run.nodes})
        dispatcher.event(ReRankEndEvent(nodes=run.nodes))

    # ------------------------------------------------------------------ scoring (sync / async twins)
    def _rank_sync(self, query: str, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        docs = [node_text(n.node, self.metadata_mode) for n in nodes]
        if self.layout is not None:
            return self._rank_layouts(query, nodes, docs)
        ranked = self._scorer.rerank(
            query,
            docs,
            top_n=self._top_n(),
            threshold=self._utility_threshold(),
            relevance=self._relevance(nodes),
            settings=self.settings,
        )
        return self._build(nodes, ranked, [r.index for r in ranked], [], None)

    async def _rank_async(self, query: str, nodes: List[NodeWithScore]) -> List[NodeWithScore]:
        docs = [node_text(n.node, self.metadata_mode) for n in nodes]
        if self.layout is not None:  # deprecated: scored off the event loop, not coalesced with other calls
            return await asyncio.to_thread(self._rank_layouts, query, nodes, docs)
        ranked = await self._scorer.arerank(
            query,
            docs,
            top_n=self._top_n(),
            threshold=self._utility_threshold(),
            relevance=self._relevance(nodes),
            settings=self.settings,
        )
        return self._build(nodes, ranked, [r.index for r in ranked], [], None)

    def _rank_layouts(self, query: str, nodes: List[NodeWithScore], docs: List[str]) -> List[NodeWithScore]:
        """The deprecated ``layout=``: per-node ranking ('after'; none for 'only'), then the best order."""
        ranked, kept = None, self._first_n(len(docs))
        if self.layout != "only":
            ranked = self._scorer.rerank(
                query, docs, top_n=self._top_n(), threshold=self._utility_threshold(), mode="document"
            )
            kept = [r.index for r in ranked]
        layouts = self._layouts(kept)
        choice = self._scorer.best_layout(query, [[docs[i] for i in o] for _, o in layouts]) if layouts else None
        return self._build(nodes, ranked, kept, layouts, choice)

    @staticmethod
    def _relevance(nodes: List[NodeWithScore]) -> List[float]:
        """The retriever's scores; when a node has none, the order the nodes came in, as ranks."""
        scores = [n.score for n in nodes]
        if any(s is None or not math.isfinite(s) for s in scores):
            return [float(len(nodes) - i) for i in range(len(nodes))]
        return [float(s) for s in scores]

    def _first_n(self, n: int) -> List[int]:
        top_n = self._top_n()
        return list(range(n if top_n is None else min(n, top_n)))

    def _layouts(self, kept: List[int]) -> Layouts:
        """Candidate orders of the kept nodes (input indices), duplicates dropped; none when layout is off."""
        if self.layout is None or not kept:
            return []
        if self.layout == "after":  # kept is in utility order
            candidates = [
                ("utility", kept),
                ("retrieval", sorted(kept)),
                ("reversed", kept[::-1]),
                ("long_context", long_context_order(kept)),
            ]
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
            details: Dict[str, Any] = {
                "model": self.model,
                "metric": self.metric,
                "mode": self.mode,
                "rank": rank,
                "retrieval_rank": i,
            }
            score = original.score
            if r is not None and r.context is not None:  # context mode: the chosen context's GROGU
                details["context"] = {
                    "score": float(r.score),
                    "confidence": float(r.confidence),
                    "answer": r.answer,
                    "nodes": [int(j) for j in order],
                    "node_ids": [nodes[j].node.node_id for j in order],
                    "prompt": self._fingerprint,
                }
                if self.score_scale == "probability":
                    details["context"]["probability"] = probability(r.metric, float(r.score))
            elif r is not None:
                details.update(
                    score=float(r.score),
                    confidence=float(r.confidence),
                    answer=r.answer,
                    n_tokens=int(r.n_tokens),
                    n_key_tokens=int(r.n_key_tokens),
                    variants={k: float(v) for k, v in r.variants.items()},
                )
                scaled = float(r.score)
                if self.score_scale == "probability":
                    scaled = details["probability"] = probability(r.metric, float(r.score))
                score = (
                    float(r.rank_score)
                    if r.rank_score is not None
                    else (scaled if self.mode == "document" else original.score)
                )
                if r.rank_score is not None:
                    details["fused_score"] = float(r.rank_score)
            if layout_info is not None:
                details["layout"] = layout_info
            self._write_metadata(original, details)
            out.append(NodeWithScore(node=original.node, score=score))
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
        dispatcher.event(
            ReRankStartEvent(
                query=query_bundle,
                nodes=nodes,
                top_n=self._top_n() if self._top_n() is not None else len(nodes),
                model_name=self.model,
            )
        )

    def _payload(self, nodes: List[NodeWithScore], query: str) -> Dict[str, Any]:
        return {
            EventPayload.NODES: nodes,
            EventPayload.MODEL_NAME: self.model,
            EventPayload.QUERY_STR: query,
            EventPayload.TOP_K: self._top_n() if self._top_n() is not None else len(nodes),
        }

    def _failed(self, nodes: List[NodeWithScore], exc: Exception) -> List[NodeWithScore]:
        """on_error='raise': re-raise. 'passthrough': every node back, original order and scores."""
        if self.on_error == "raise":
            raise exc
        error = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "GroguRerank scoring failed; passing %d nodes through unchanged: %s", len(nodes), error, exc_info=exc
        )
        for n in nodes:
            n.node.metadata["grogu"] = {"model": self.model, "metric": self.metric, "error": error}
            hide_from_llm(n.node, "grogu")
        return list(nodes)


__all__ = ["GroguRerank"]
