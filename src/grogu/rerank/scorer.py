"""The public per-document API: GROGU utility of documents for one target LLM.

>>> scorer = UtilityScorer("smollm2-135m-instruct")          # or a hub id, a path, an Engine
>>> ranked = scorer.rerank("Who wrote Hamlet?", docs, top_n=3)
>>> ranked[0].score, ranked[0].answer, ranked[0].document

For each context (one document alone, or an ordered list of documents) the engine generates the
grounded answer greedily, keeps its per-token entropies and log-probabilities from the generation
steps, teacher-forces the same answer under the ungrounded prompt (query only), and a metric from
:mod:`grogu.metrics` turns those statistics into a confidence gamma. The score is the utility -gamma:
higher means the document makes this LLM surer of its grounded answer.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..core.checks import (
    check_alpha,
    check_choice,
    check_document_list,
    check_documents,
    check_fraction,
    check_pairs,
    check_positive_int,
    check_query,
)
from ..core.prompts import SHORT_ANSWER_TEMPLATE, PromptBuilder, PromptTemplate
from ..core.results import (
    ContextScore,
    DocumentScore,
    LayoutChoice,
    ScoreResult,
    TokenDetail,
    UngroundedScore,
    choose_layout,
    long_context_order,
    standard_layouts,
)
from ..metrics import grogu as metrics
from ..runtime.coalescer import Coalescer
from ..runtime.engine import get_engine
from ..runtime.models import DEFAULT_MODEL
from . import pipeline as rerank_pipeline
from .arguments import RerankCall, takes_rerank_arguments
from .context_scoring import ContextScoring, QueryContext
from .settings import ANSWER_STYLES, DEFAULT_MAX_NEW_TOKENS, DEFAULT_TOP_N  # noqa: F401 - re-exported
from .tuned import call_settings


class UtilityScorer(ContextScoring):
    """GROGU utility scores of documents for one target LLM.

    Args:
        model: the target LLM: a :class:`~grogu.core.target.Target` (an :class:`~grogu.runtime.engine.Engine` or a
            :class:`~grogu.ServerTarget`), a model name/path/hub id (loaded once per process and shared,
            see :func:`grogu.runtime.engine.get_engine`), or a loaded (model, tokenizer) pair. Held as ``target``.
        metric: a name from :data:`grogu.metrics.METRICS`: the paper's 'key_entropy' (default),
            'entropy', 'ppl', 'key_ppl', or a small-model variant (see :mod:`grogu.metrics`).
        alpha: key-token threshold on |H_g - H_u| in nats (default 0.05).
        top_k_frac: fraction K of tokens kept (by H_g) when no token passes alpha (default 0.1).
        max_new_tokens: longest grounded answer generated (default 64; 16 with ``answer_style="short"``).
        template: a :class:`~grogu.core.prompts.PromptTemplate` to override the prompt text.
        answer_style: 'long' (default: the paper's prompt, the whole greedy answer is scored) or 'short'
            (:data:`~grogu.core.prompts.SHORT_ANSWER_TEMPLATE` asks for the answer only, and the answer is
            cut at its first line break or sentence end; a given ``template`` still wins).
        copy_ngram: n of the n-grams that mark answer tokens copied from the document (default 5).
        device, dtype: for a model given by name (default CUDA+bf16, else CPU+float32; float32 for GGUF).

    A grounded-only target (``target.grounded_only``: ``ServerTarget(api="chat")``, which cannot
    teacher-force) is scored with the metrics of the grounded answer alone
    (:data:`grogu.metrics.GROUNDED_METRICS`: ``entropy``, ``ppl``; ``metric=None``, the default, is
    ``ppl`` there and ``key_entropy`` elsewhere); another metric is a
    :class:`~grogu.runtime.inference_server.ServerCapabilityError` here, and ``variants`` holds those metrics only.
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        metric: str | None = None,
        alpha: float = metrics.ALPHA,
        top_k_frac: float = metrics.TOP_K_FRAC,
        max_new_tokens: int | None = None,
        template: PromptTemplate | None = None,
        device: str | None = None,
        dtype: str | None = None,
        answer_style: str = "long",
        copy_ngram: int = metrics.COPY_NGRAM,
    ) -> None:
        metric = None if metric is None else metrics.metric_name(metric)
        alpha, top_k_frac = check_alpha(alpha), check_fraction("top_k_frac", top_k_frac)
        self.answer_style = check_choice("answer_style", answer_style, ANSWER_STYLES)
        self.copy_ngram = check_positive_int("copy_ngram", copy_ngram)
        if max_new_tokens is None:
            max_new_tokens = DEFAULT_MAX_NEW_TOKENS[answer_style]
        if template is None and answer_style == "short":
            template = SHORT_ANSWER_TEMPLATE
        if template is not None and not isinstance(template, PromptTemplate):
            raise TypeError(f"template must be a grogu.PromptTemplate or None, got {type(template).__name__}")
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        self.alpha, self.top_k_frac, self.max_new_tokens = alpha, top_k_frac, max_new_tokens
        self.target = get_engine(model, device=device, dtype=dtype)
        self.grounded_only = self.target.grounded_only
        self.metric = metrics.default_metric(self.grounded_only) if metric is None else metric
        if self.metric not in metrics.GROUNDED_METRICS:
            self.target.require_teacher_forcing(
                f"metric={self.metric!r} (it compares the answer's token statistics with and without the documents)"
            )
        self.prompts = PromptBuilder.for_target(self.target, max_new_tokens, template)
        self._coalescer = Coalescer(lambda contexts: self._score_contexts(contexts, details=True))
        # concurrent areranks: their plans scored together (the context mode's choice needs a plan whole)
        self._plan_coalescer = Coalescer(lambda plans: rerank_pipeline.run(self, plans, details=True))

    @property
    def model_name(self) -> str:
        return str(self.target.model_name)

    @property
    def template(self) -> PromptTemplate:
        """The prompt text this scorer renders (grogu's own, the short-answer one, or the one given)."""
        return self.prompts.template

    @property
    def async_batches_run(self) -> int:
        """How many coalesced engine batches the async API has run (concurrent calls share one)."""
        return self._coalescer.batches_run + self._plan_coalescer.batches_run

    # ------------------------------------------------------------------ public API
    def score(self, query: str, documents: Sequence[Any], *, return_details: bool = False) -> list[DocumentScore]:
        """Score each document alone as the grounding context; results in input order."""
        return self.score_batch([(query, documents)], return_details=return_details)[0]

    def score_batch(
        self, items: Sequence[tuple[str, Sequence[Any]]], *, return_details: bool = False
    ) -> list[list[DocumentScore]]:
        """Per-document scores for many (query, documents) pairs in one batched engine pass."""
        checked = []
        for query, documents in check_pairs("items", items, "(query, documents)"):
            originals, docs = check_document_list(documents)
            checked.append((check_query(query), docs, originals))
        contexts = [(q, [d]) for q, docs, _ in checked for d in docs]
        flat = iter(self._score_contexts(contexts, return_details))
        return [
            [DocumentScore(index=i, document=orig, **vars(next(flat))) for i, orig in enumerate(originals)]
            for _, _, originals in checked
        ]

    def score_context(self, query: str, documents: Sequence[Any], *, return_details: bool = False) -> ContextScore:
        """Score an ordered list of documents used together as one context."""
        return self.score_contexts(query, [documents], return_details=return_details)[0]

    def score_contexts(
        self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False
    ) -> list[ContextScore]:
        """Score several contexts (ordered document lists) for one query, batched."""
        query = check_query(query)
        if isinstance(contexts, (str, bytes)):
            raise TypeError("contexts must be a list of document lists")
        return self.score_contexts_batch([(query, contexts)], return_details=return_details)[0]

    def score_contexts_batch(
        self, items: Sequence[tuple[str, Sequence[Sequence[Any]]]], *, return_details: bool = False
    ) -> list[list[ContextScore]]:
        """Several contexts (ordered document lists) for each of many queries, all in one batched
        engine pass: ``items`` = [(query, [context, ...]), ...]; results per item, in context order."""
        checked = []
        for query, contexts in check_pairs("items", items, "(query, contexts)"):
            query = check_query(query)
            if isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
                raise TypeError("contexts must be a list of document lists")
            pairs = [check_document_list(c) for c in contexts]
            checked.append((query, [orig for orig, _ in pairs], [docs for _, docs in pairs]))
        flat = iter(self._score_contexts([(q, c) for q, _, docs in checked for c in docs], return_details))
        return [[ContextScore(documents=orig, **vars(next(flat))) for orig in contexts] for _, contexts, _ in checked]

    def best_layout(self, query: str, layouts: Sequence[Sequence[Any]]) -> LayoutChoice:
        """Score each candidate order (layout) of the documents as one context; pick the most useful.
        Ties go to the earlier layout."""
        if len(layouts) == 0:
            raise ValueError("best_layout needs at least one layout")
        return choose_layout(self.score_contexts(query, layouts))

    @takes_rerank_arguments
    def rerank(self, call: RerankCall) -> list[DocumentScore]:
        """The documents to give the LLM, in order, chosen by a rerank mode (``grogu.rerank.selection``):

        - ``"context"`` (default): the retriever's top-n is answered first and kept unless its answer is in
          doubt (``gate="doubt"``: ``gate_support``, ``gate_confidence``); then candidate contexts of
          ``top_n`` documents from the retrieval order (by default, ``family="swap_orders"``: the top-n, the
          top-n with its last document swapped for each of the next ``swaps``, and each of those reversed),
          each scored as one context; the best under the selection ``rule`` if it beats the top-n by more
          than ``margin``, in its own order (``gate="always"``: the candidates on every query);
        - ``"document"``: each document alone, sorted by utility (ties keep input order), those with
          score >= threshold, at most top_n (the paper's per-document GROGU);
        - ``"fusion"``: utility rank fused with the relevance rank (``weight`` on utility), sorted;
        - ``"prune"``: documents at least as useful as no document, in retrieval order.
        ``relevance``: the retriever's scores of the documents, which set the retrieval order (and the
        fusion's relevance rank); without them the documents are taken in the order given, best first,
        as a retriever returns them (``grogu.runtime.embedders.relevance_scores`` gives the packaged MiniLM's).
        Each result of the context mode carries ``gate``: the verdict on the retriever's own context.
        The mode's settings (:class:`grogu.ModeSettings`): ``settings`` (default: the defaults; or the path
        of a ``grogu tune`` settings file, which warns when fitted to another model or prompt), with
        each setting given by name (``**overrides``, e.g. ``mode=``, ``gate=``) replacing its value.
        ``top_n``: most documents kept (default 3, as measured and as the integrations keep; None: all).
        Each result carries ``index`` (input position) and the original ``document``.
        """
        return rerank_pipeline.run(self, [self._rerank_plan(call)], call.return_details)[0]

    def _rerank_plan(self, call: RerankCall) -> Any:
        settings = call_settings(call.settings, call.overrides, self, call.top_n)
        return rerank_pipeline.plan(
            call.query, call.documents, call.top_n, call.threshold, settings, call.relevance, self.grounded_only
        )

    # ------------------------------------------------------------------ async API
    # Each coroutine runs its engine work in a worker thread (the event loop is not blocked) and is
    # batched together with every other request waiting at the same time (see grogu.runtime.coalescer).
    # Answers equal the sync calls; scores agree to float32 rounding (~1e-6), as padding may differ.
    async def _acontexts(self, contexts: list[QueryContext], details: bool) -> list[ScoreResult]:
        results = await self._coalescer.run(contexts)
        if not details:
            results = [ScoreResult(**{**vars(r), "details": None}) for r in results]
        return results

    async def ascore(
        self, query: str, documents: Sequence[Any], *, return_details: bool = False
    ) -> list[DocumentScore]:
        """Async :meth:`score`."""
        query = check_query(query)
        originals, docs = check_document_list(documents)
        results = await self._acontexts([(query, [d]) for d in docs], return_details)
        return [
            DocumentScore(index=i, document=o, **vars(r))
            for i, (o, r) in enumerate(zip(originals, results, strict=True))
        ]

    @takes_rerank_arguments
    async def arerank(self, call: RerankCall) -> list[DocumentScore]:
        """Async :meth:`rerank`."""
        [ranked] = await self._plan_coalescer.run([self._rerank_plan(call)])
        return ranked if call.return_details else rerank_pipeline.without_details(ranked)

    async def ascore_contexts(
        self, query: str, contexts: Sequence[Sequence[Any]], *, return_details: bool = False
    ) -> list[ContextScore]:
        """Async :meth:`score_contexts`."""
        query = check_query(query)
        if isinstance(contexts, (str, bytes)):
            raise TypeError("contexts must be a list of document lists")
        pairs = [check_document_list(c) for c in contexts]
        results = await self._acontexts([(query, docs) for _, docs in pairs], return_details)
        return [ContextScore(documents=orig, **vars(r)) for (orig, _), r in zip(pairs, results, strict=True)]

    async def ascore_context(
        self, query: str, documents: Sequence[Any], *, return_details: bool = False
    ) -> ContextScore:
        """Async :meth:`score_context`."""
        return (await self.ascore_contexts(query, [documents], return_details=return_details))[0]

    async def abest_layout(self, query: str, layouts: Sequence[Sequence[Any]]) -> LayoutChoice:
        """Async :meth:`best_layout`."""
        if len(layouts) == 0:
            raise ValueError("best_layout needs at least one layout")
        return choose_layout(await self.ascore_contexts(query, layouts))

    def ungrounded(self, query: str) -> UngroundedScore:
        """The ungrounded answer y_u and its KeyEntropy (paper App. C), for the absolute GROGU
        difference gamma(y_g | q, D) - gamma(y_u | q); comparisons between documents do not need it."""
        query = check_query(query)
        gen = self.target.generate([self.prompts.ungrounded_ids(query)], self.max_new_tokens)[0]
        if self.answer_style == "short":
            gen = self._first_line(gen)
        h = self._answer_stats(gen)[2]
        mask = metrics.ungrounded_key_mask(h, self.alpha, self.top_k_frac)
        return UngroundedScore(
            answer=gen.text,
            confidence=metrics.key_entropy(h, mask),
            n_tokens=len(gen.token_ids),
            n_key_tokens=int(mask.sum()),
        )


__all__ = [
    "UtilityScorer",
    "DocumentScore",
    "ContextScore",
    "LayoutChoice",
    "ScoreResult",
    "TokenDetail",
    "UngroundedScore",
    "standard_layouts",
    "long_context_order",
    "check_query",
    "check_documents",
]
