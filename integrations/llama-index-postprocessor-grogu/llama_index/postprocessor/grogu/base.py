"""GroguRerank: rerank retrieved nodes by how useful each one is to the LLM that will read it."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.llms import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

import grogu
from grogu.apps.integration_settings import SharedSettings
from grogu.core.checks import check_query, check_top_n
from grogu.metrics.scales import utility_threshold
from grogu.rerank import ModeSettings, split_settings
from grogu.rerank.factory import Scorer, build_scorer
from grogu.rerank.tuned import TunedSettings, build_settings

from . import spans
from .nodes import failed_nodes, ranked_nodes, retrieval_relevance
from .options import FIELD_CHECKS, scoring_prompt
from .synthesizer import prompt_fingerprint
from .utils import check_nodes, model_label, node_text, resolve_engine

dispatcher = get_dispatcher(__name__)
logger = logging.getLogger(__name__)

_UNSET: Any = object()
#: per-call settings of the rerankers inside ``GroguRerank.using(...)``: {id(reranker): {"top_n": n}}
_CALL_SETTINGS: contextvars.ContextVar[Dict[int, Dict[str, Any]]] = contextvars.ContextVar(
    "grogu_rerank_call_settings", default={}
)


class GroguRerank(SharedSettings, BaseNodePostprocessor):
    """Choose and order nodes by their GROGU utility for a specific target LLM (Hua et al.).

    Utility is minus the target LLM's confidence on the key tokens of its grounded answer (KeyEntropy
    by default; higher is more useful). ``mode`` says how it becomes the nodes the LLM reads:

    - ``"context"`` (default): a few candidate contexts of ``top_n`` nodes from the retrieval order,
      each scored as one whole context. The most useful is kept if it beats the retriever's own by
      ``margin``. Nodes keep the retrieval score.
    - ``"document"``: each node scored alone and sorted by utility (the paper's per-document GROGU).
      ``NodeWithScore.score`` becomes the utility; ``threshold`` keeps those at or above it.
    - ``"fusion"``: each node's utility rank fused with its retrieval rank (``weight`` on utility).
      The score becomes the fused score.
    - ``"prune"``: nodes that leave the LLM less sure than no node at all are dropped.

    The retriever's score is kept in ``metadata["retrieval_score"]`` and the details in
    ``metadata["grogu"]``, both hidden from the LLM prompt. Which mode to pick: the package README.

    Every setting is a field (``GroguRerank.model_fields`` lists them with their descriptions). Those
    LangChain's GroguRetriever has too are declared once, in ``grogu.apps.integration_settings``.
    The mode's settings are one ``grogu.ModeSettings`` (``settings``). Each of its settings may also
    be given by name (``mode="fusion", weight=0.4``); a name given replaces the value in ``settings``.
    An unknown argument is a ``pydantic.ValidationError``. A bad value is a ``ValueError`` (a
    ``TypeError`` for an object of the wrong kind, such as a model grogu cannot score with).

    Per call: ``postprocess_nodes(nodes, query_str=..., top_n=2)`` (and ``apostprocess_nodes``), or
    ``with reranker.using(top_n=2): query_engine.query(...)`` for a query engine's own call.

    ``reranker.tune(examples, out="tuned")`` fits the mode's settings to this LLM, prompt and ``top_n``
    on labelled questions (:meth:`tune`). Pass the result back with ``settings=``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: Any = Field(
        default=grogu.DEFAULT_MODEL,
        description="The target LLM: a model name, path or hub id; a grogu.Engine; a (model, tokenizer) pair; "
        "a LlamaIndex HuggingFaceLLM (its model is reused); an OpenAILike / OpenAI LLM on an OpenAI-compatible "
        "server, or a grogu.ServerTarget; or the grogu service: its URL ('http://host:8000', see grogu serve) "
        "or a grogu.RemoteScorer. Once built: the LLM's readable name.",
    )
    settings: ModeSettings = Field(
        default_factory=ModeSettings,
        description="The rerank mode and its settings (grogu.ModeSettings). Its settings may also be given by "
        "name (mode=, weight=, family=, swaps=, margin=, ...); a name given replaces the value here.",
    )
    qa_template: Any = Field(
        default="auto",
        exclude=True,
        description="Score with the prompt the LLM reads: a query engine, a response synthesizer or its "
        "text_qa_template. 'auto': in the context mode, the default synthesizer's QA prompt for the LLM given "
        "(its chat version for a model name, a server or the service); else grogu's own prompt. None: grogu's own.",
    )
    keep_retrieval_score: bool = Field(
        default=True, description="Keep the retriever's score in metadata['retrieval_score']."
    )
    metadata_mode: MetadataMode = Field(
        default=MetadataMode.LLM, description="Which node text the LLM reads (MetadataMode.LLM, as synthesizers do)."
    )
    _scorer: Scorer = PrivateAttr()
    _fingerprint: str = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _gather_settings(cls, data: Any) -> Any:
        """The mode's settings given by name folded into ``settings``, checked by ``grogu.ModeSettings``."""
        if not isinstance(data, dict):
            return data
        named, rest = split_settings(data)
        if named or "settings" in rest:
            rest["settings"] = build_settings(rest.get("settings"), **named)
        return rest

    @field_validator(*FIELD_CHECKS, mode="before")
    @classmethod
    def _check_field(cls, value: Any, info: ValidationInfo) -> Any:
        """grogu's own check of the field (grogu.core.checks): the same error as in grogu."""
        return FIELD_CHECKS[info.field_name](value)

    def model_post_init(self, context: Any, /) -> None:
        """Build the scorer: a model given by name is loaded here, once per process."""
        self.settings.check_threshold(self.threshold)
        llm = self.model if isinstance(self.model, LLM) else None
        template, budget = scoring_prompt(
            self.qa_template, self.template, self.mode, llm, self.max_new_tokens, self.answer_style
        )
        # a service (node metadata stay here), or the model / server run for this process
        scorer, label = build_scorer(
            self.model,
            self,
            resolve_engine=resolve_engine,
            model_label=model_label,
            template=template,
            max_new_tokens=budget,
        )
        if self.score_scale == "probability":
            utility_threshold(scorer.metric, self.threshold)  # a ValueError unless in [0, 1]
        self._scorer, self._fingerprint = scorer, prompt_fingerprint(scorer.template, budget)
        self.model, self.metric, self.max_new_tokens = label, scorer.metric, budget

    @classmethod
    def class_name(cls) -> str:
        return "GroguRerank"

    @property
    def mode(self) -> str:
        """The rerank mode (``self.settings.mode``)."""
        return self.settings.mode

    @property
    def scorer(self) -> Scorer:
        """The grogu scorer (and through ``.target`` the target LLM) this reranker uses; a
        ``grogu.RemoteScorer`` when it scores with a grogu service."""
        return self._scorer

    def tune(self, examples: Any, out: Optional[Union[str, os.PathLike]] = None, **kwargs: Any) -> TunedSettings:
        """Fit the rerank settings to this reranker's LLM, QA prompt and ``top_n`` (``grogu.tune``).

        ``examples``: labelled questions, a JSONL path or a list of dicts with ``question``, ``answers`` and
        ``documents`` (the retriever's order). The LLM answers them with the prompt the nodes are scored
        with (``self.scorer.template``) and with ``max_new_tokens``. So the result fits this reranker exactly.
        ``out``: a folder for ``settings.json``, the report and the records (None: nothing is written).
        ``kwargs`` go to ``grogu.tune`` (``folds``, ``judge``, ``max_cost``, ``progress``...).
        Returns the ``TunedSettings``. Use them with ``settings=`` (or the file: ``settings="OUT/settings.json"``).
        A grogu service cannot be tuned from here (ValueError): tune where the model runs.
        """
        from grogu.apps.tune import tune

        target = getattr(self._scorer, "target", None)
        if target is None:
            raise ValueError("GroguRerank scores through a grogu service: run grogu.tune where the model runs")
        return tune(
            examples,
            model=target,
            qa_prompt=self._scorer.template,
            top_n=self.top_n,
            out=out,
            max_new_tokens=self.max_new_tokens,
            **kwargs,
        )

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

    def _rerank_options(self, nodes: List[NodeWithScore]) -> Dict[str, Any]:
        """The scorer's rerank arguments of this call (``threshold`` as a utility)."""
        threshold = self.threshold
        if self.score_scale == "probability":
            threshold = utility_threshold(self.metric, threshold)
        return dict(
            top_n=self._top_n(), threshold=threshold, relevance=retrieval_relevance(nodes), settings=self.settings
        )

    # ------------------------------------------------------------------ LlamaIndex entry points
    def _postprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        with self._reranking(nodes, query_bundle, query) as run:
            docs = [node_text(n.node, self.metadata_mode) for n in nodes]
            ranked = self._scorer.rerank(query, docs, **self._rerank_options(nodes))
            run.nodes = ranked_nodes(self, nodes, ranked, self._fingerprint)
        return run.nodes

    async def _apostprocess_nodes(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle] = None
    ) -> List[NodeWithScore]:
        query, nodes = self._check(nodes, query_bundle)
        if not nodes:
            return []
        with self._reranking(nodes, query_bundle, query) as run:
            docs = [node_text(n.node, self.metadata_mode) for n in nodes]
            ranked = await self._scorer.arerank(query, docs, **self._rerank_options(nodes))
            run.nodes = ranked_nodes(self, nodes, ranked, self._fingerprint)
        return run.nodes

    @contextmanager
    def _reranking(
        self, nodes: List[NodeWithScore], query_bundle: Optional[QueryBundle], query: str
    ) -> Iterator[SimpleNamespace]:
        """One rerank's events around its scoring (LlamaIndex's start/end events, the callback event, the
        OpenTelemetry span): the body sets ``run.nodes``; a failure goes to the ``on_error`` policy."""
        top_n = self._top_n() if self._top_n() is not None else len(nodes)
        dispatcher.event(ReRankStartEvent(query=query_bundle, nodes=nodes, top_n=top_n, model_name=self.model))
        payload = {
            EventPayload.NODES: nodes,
            EventPayload.MODEL_NAME: self.model,
            EventPayload.QUERY_STR: query,
            EventPayload.TOP_K: top_n,
        }
        run = SimpleNamespace(nodes=None)
        with (
            spans.rerank_span(self, nodes, query) as span,
            self.callback_manager.event(CBEventType.RERANKING, payload=payload) as event,
        ):
            try:
                yield run
            except Exception as exc:
                span.fail(exc)
                run.nodes = self._failed(nodes, exc)
            spans.finish(span, nodes, run.nodes)
            event.on_end(payload={EventPayload.NODES: run.nodes})
        dispatcher.event(ReRankEndEvent(nodes=run.nodes))

    # ------------------------------------------------------------------ checks and failures
    def _check(self, nodes: Any, query_bundle: Optional[QueryBundle]) -> Tuple[str, List[NodeWithScore]]:
        if query_bundle is None:
            raise ValueError("GroguRerank needs the query: pass query_bundle= or query_str= to postprocess_nodes")
        if not isinstance(query_bundle, QueryBundle):
            raise TypeError(f"query_bundle must be a QueryBundle, got {type(query_bundle).__name__}")
        return check_query(query_bundle.query_str), check_nodes(nodes)

    def _failed(self, nodes: List[NodeWithScore], exc: Exception) -> List[NodeWithScore]:
        """on_error='raise': re-raise. 'passthrough': every node back, original order and scores."""
        if self.on_error == "raise":
            raise exc
        error = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "GroguRerank scoring failed; passing %d nodes through unchanged: %s", len(nodes), error, exc_info=exc
        )
        return failed_nodes(self, nodes, error)


__all__ = ["GroguRerank"]
