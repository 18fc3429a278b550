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

import re
from typing import Any, Sequence

import torch
from typing_extensions import Unpack

from . import metrics, rerank, selection
from .checks import (
    check_alpha,
    check_choice,
    check_document_list,
    check_documents,
    check_fraction,
    check_pairs,
    check_positive_int,
    check_query,
    check_relevance,
    check_threshold,
    check_top_n,
)
from .coalescer import Coalescer
from .engine import Generation, get_engine
from .inference_server.server_target import ServerCapabilityError
from .models import DEFAULT_MODEL
from .prompts import SHORT_ANSWER_TEMPLATE, Document, PromptBuilder, PromptTemplate
from .results import (
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

#: answer styles of the scoring pass: "long" (the paper's prompt, free-length answers) or "short"
#: (a short-answer instruction, a small token budget, the answer cut at its first line or sentence end)
ANSWER_STYLES = ("long", "short")
DEFAULT_MAX_NEW_TOKENS = {"long": 64, "short": 16}
#: one context to score: a query and the ordered documents given with it (the scorer's unit of engine work)
QueryContext = tuple[str, list[Document]]


class UtilityScorer:
    """GROGU utility scores of documents for one target LLM.

    Args:
        model: an :class:`~grogu.engine.Engine`, a model name/path/hub id (loaded once per process and
            shared, see :func:`grogu.engine.get_engine`), or a loaded (model, tokenizer) pair.
        metric: a name from :data:`grogu.metrics.METRICS`: the paper's 'key_entropy' (default),
            'entropy', 'ppl', 'key_ppl', or a small-model variant (see :mod:`grogu.metrics`).
        alpha: key-token threshold on |H_g - H_u| in nats (default 0.05).
        top_k_frac: fraction K of tokens kept (by H_g) when no token passes alpha (default 0.1).
        max_new_tokens: longest grounded answer generated (default 64; 16 with ``answer_style="short"``).
        template: a :class:`~grogu.prompts.PromptTemplate` to override the prompt text.
        answer_style: 'long' (default: the paper's prompt, the whole greedy answer is scored) or 'short'
            (:data:`~grogu.prompts.SHORT_ANSWER_TEMPLATE` asks for the answer only, and the answer is
            cut at its first line break or sentence end; a given ``template`` still wins).
        copy_ngram: n of the n-grams that mark answer tokens copied from the document (default 5).
        device, dtype: for a model given by name (default CUDA+bf16, else CPU+float32).

    A grounded-only target (``target.grounded_only``: ``ServerTarget(api="chat")``, which cannot
    teacher-force) is scored with the metrics of the grounded answer alone
    (:data:`grogu.metrics.GROUNDED_METRICS`: ``entropy``, ``ppl``; ``metric=None``, the default, is
    ``ppl`` there and ``key_entropy`` elsewhere); another metric is a
    :class:`~grogu.inference_server.ServerCapabilityError` here, and ``variants`` holds those metrics only.
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
        self.engine = get_engine(model, device=device, dtype=dtype)
        self.grounded_only = bool(getattr(self.engine, "grounded_only", False))
        self.metric = metrics.default_metric(self.grounded_only) if metric is None else metric
        if self.grounded_only and self.metric not in metrics.GROUNDED_METRICS:
            raise self.engine.teacher_forcing_error(
                f"metric={self.metric!r} (it compares the answer's token statistics with and without the documents)"
            )
        self.prompts = PromptBuilder.for_target(self.engine, max_new_tokens, template)
        self._coalescer = Coalescer(lambda contexts: self._score_contexts(contexts, details=True))
        # concurrent areranks: their plans scored together (the context mode's choice needs a plan whole)
        self._plan_coalescer = Coalescer(lambda plans: self._score_plans(plans, details=True))

    @property
    def model_name(self) -> str:
        return str(self.engine.model_name)

    @property
    def template(self) -> PromptTemplate:
        """The prompt text this scorer renders (grogu's own, the short-answer one, or the one given)."""
        return self.prompts.template

    @property
    def async_batches_run(self) -> int:
        """How many coalesced engine batches the async API has run (concurrent calls share one)."""
        return self._coalescer.batches_run + self._plan_coalescer.batches_run

    # ------------------------------------------------------------------ core
    def _score_contexts(self, contexts: Sequence[QueryContext], details: bool) -> list[ScoreResult]:
        """Score (query, ordered documents) contexts, all in one batched engine pass."""
        if not contexts:
            return []
        grounded, gens = self._generate(contexts)
        return self._results(contexts, grounded, gens, details)

    def _generate(self, contexts: Sequence[QueryContext]) -> tuple[list[list[int]], list[Generation]]:
        """Each context's grounded prompt and its greedy answer (cut at its first line in the short style)."""
        grounded = [self.prompts.grounded_ids(q, docs) for q, docs in contexts]
        gens = self.engine.generate(grounded, self.max_new_tokens)
        if self.answer_style == "short":
            gens = [self._first_line(g) for g in gens]
        return grounded, gens

    def _results(
        self, contexts: Sequence[QueryContext], grounded: list[list[int]], gens: list[Generation], details: bool
    ) -> list[ScoreResult]:
        """The contexts' results from their answers: each answer teacher-forced under the ungrounded prompt
        (query only), all in one batch; a grounded-only target teacher-forces none."""
        if self.grounded_only or not gens:  # no teacher forcing: the grounded statistics alone
            return [self._result(g, None, None, details) for g in gens]
        ungrounded = {q: self.prompts.ungrounded_ids(q) for q in dict.fromkeys(q for q, _ in contexts)}
        conts = [g.token_ids if g.token_ids else [g.stop_token_id] for g in gens]
        u_prompts = [ungrounded[q] for q, _ in contexts]
        u_stats = self.engine.token_stats(u_prompts, conts)
        return [
            self._result(g, u, metrics.copied_mask(c, gp, up, self.copy_ngram), details)
            for g, u, c, gp, up in zip(gens, u_stats, conts, grounded, u_prompts)
        ]

    def score_plans(self, plans: Sequence[rerank.RerankPlan], return_details: bool = False) -> list[list[ContextScore]]:
        """The scores of each rerank plan's contexts (:meth:`plan_rerank`), as :meth:`rerank` scores them:
        the context mode's lazy teacher forcing included."""
        return self._score_plans(plans, return_details)

    def generate_contexts(self, contexts: Sequence[QueryContext]) -> list[tuple[list[int], Generation]]:
        """Each (query, documents) context's grounded prompt and greedy answer: the first half of
        :meth:`score_generated` (answers do not depend on the batch, so a service draws them in slices)."""
        grounded, gens = self._generate(list(contexts))
        return list(zip(grounded, gens))

    def score_generated(
        self,
        plans: Sequence[rerank.RerankPlan],
        generated: Sequence[tuple[list[int], Generation]],
        return_details: bool = False,
    ) -> list[list[ContextScore]]:
        """:meth:`score_plans` from the plans' answers (:meth:`generate_contexts` of every plan's contexts,
        in order)."""
        contexts = iter(zip([(p.query, docs) for p in plans for docs in p.context_documents()], generated))
        answered = [[(c, g, a) for c, (g, a) in (next(contexts) for _ in p.contexts)] for p in plans]
        return self._score_generated(plans, answered, return_details)

    def _score_plans(self, plans: Sequence[rerank.RerankPlan], details: bool) -> list[list[ContextScore]]:
        """The scores of each rerank plan's contexts, every plan's answers generated in one engine batch.

        Under a gate (:func:`grogu.rerank.gated`) a plan's first candidate, the retriever's own context, is
        answered first; its other candidates are answered, in a second batch, only when that answer is in
        doubt (:func:`grogu.rerank.doubt`). Such a plan's list then holds its first candidate alone.
        Where the context mode compares its candidates on the grounded answers alone
        (:func:`grogu.rerank.grounded_choice`), only the chosen candidate's
        answer is teacher-forced under the ungrounded prompt and scored under the scorer's metric (the one
        result the rerank reports): the choice is the same as with every candidate teacher-forced. The other
        plans' contexts are all teacher-forced."""
        wanted = [p.contexts[:1] if rerank.gated(p.settings, p.contexts) else p.contexts for p in plans]
        answered = self._answer_plans(plans, wanted)
        doubtful = [
            i
            for i, p in enumerate(plans)
            if len(wanted[i]) < len(p.contexts)
            and rerank.doubt(
                p.settings, self._result(answered[i][0][2], None, None, False, "ppl"), p.support_texts(), p.contexts[0]
            )
        ]
        for i, more in zip(
            doubtful, self._answer_plans([plans[i] for i in doubtful], [plans[i].contexts[1:] for i in doubtful])
        ):
            answered[i] += more
        return self._score_generated(plans, answered, details)

    def _score_generated(
        self,
        plans: Sequence[rerank.RerankPlan],
        answered: list[list[tuple[QueryContext, list[int], Generation]]],
        details: bool,
    ) -> list[list[ContextScore]]:
        """The plans' results from their answered contexts (per plan, (context, grounded prompt, answer) of
        its first candidates: all of them, or the first alone where a gate is calm)."""
        rows = [row for a in answered for row in a]
        out: list[ScoreResult | None] = [None] * len(rows)  # None: to be scored under the scorer's metric
        start = 0
        for i, p in enumerate(plans):
            n = len(answered[i])
            if rerank.grounded_choice(p.settings) and n:
                metric = p.settings.context_metric
                first = [self._result(gen, None, None, details, metric) for _, _, gen in answered[i]]
                chosen = rerank.decide(
                    p.settings, p.base, p.contexts, first, p.top_n, p.threshold, p.relevance, p.support_texts()
                ).chosen
                out[start : start + n] = first
                out[start + chosen] = None
            start += n
        todo = [j for j, r in enumerate(out) if r is None]
        scored = self._results(
            [rows[j][0] for j in todo], [rows[j][1] for j in todo], [rows[j][2] for j in todo], details
        )
        for j, r in zip(todo, scored):
            out[j] = r
        results = iter(zip(rows, out))
        return [
            [ContextScore(documents=row[0][1], **vars(r)) for row, r in (next(results) for _ in a)] for a in answered
        ]

    def _answer_plans(
        self, plans: Sequence[rerank.RerankPlan], wanted: Sequence[Sequence[list[int]]]
    ) -> list[list[tuple[QueryContext, list[int], Generation]]]:
        """Each plan's ``wanted`` contexts answered, all in one engine batch: per plan, (context, its
        grounded prompt, its answer) for each."""
        contexts = [(p.query, [p.documents[j] for j in c]) for p, cs in zip(plans, wanted) for c in cs]
        grounded, gens = self._generate(contexts) if contexts else ([], [])
        flat = iter(zip(contexts, grounded, gens))
        return [[next(flat) for _ in cs] for cs in wanted]

    def _first_line(self, gen: Generation) -> Generation:
        """The answer cut before its first line break, or after its first sentence end ('.', '!' or
        '?' followed by a space), once it has some text. Greedy decoding is causal, so this is exactly
        the answer a decoder stopping there would give; the cut token becomes the stop token."""
        # each token's text as it reads after the tokens before it (SentencePiece drops a leading
        # space when a token is decoded alone); a chat API returns those texts itself
        if gen.tokens is not None:
            pieces = list(gen.tokens)
        else:
            prefixes = [""] + [self.engine.tokenizer.decode(gen.token_ids[: i + 1]) for i in range(len(gen.token_ids))]
            pieces = [
                b[len(a) :] if b.startswith(a) else self.engine.tokenizer.decode([t])
                for a, b, t in zip(prefixes, prefixes[1:], gen.token_ids)
            ]
        seen_text, cut = False, None
        for i, piece in enumerate(pieces):
            if seen_text and "\n" in piece:
                cut = i
                break
            if seen_text and piece[:1].isspace() and _sentence_end("".join(pieces[:i])):
                cut = i
                break
            seen_text = seen_text or bool(piece.strip())
        if cut is None:
            return gen
        text = "".join(pieces[:cut]).strip() if gen.tokens is not None else self.engine.decode(gen.token_ids[:cut])
        return Generation(
            token_ids=gen.token_ids[:cut],
            entropy=gen.entropy[:cut],
            logprob=gen.logprob[:cut],
            stop_token_id=gen.token_ids[cut],
            stop_entropy=float(gen.entropy[cut]),
            stop_logprob=float(gen.logprob[cut]),
            text=text,
            tokens=None if gen.tokens is None else gen.tokens[:cut],
        )

    def _answer_stats(self, gen: Generation) -> tuple[list[int], list[str] | None, torch.Tensor, torch.Tensor]:
        """(token ids, token texts or None, entropies, log-probabilities) scored for an answer: its tokens,
        or for an empty answer the end-of-turn token the model chose."""
        if gen.token_ids:
            return gen.token_ids, gen.tokens, gen.entropy, gen.logprob
        if gen.stop_entropy is None or gen.stop_logprob is None:
            raise ServerCapabilityError(
                f"{self.engine!r} gave an empty answer (its end-of-turn token first) and returned no "
                "log-probability of that token, so the answer has no statistics to score (a chat API reports "
                "the text tokens it generates only). Check the prompt (template=), or score through a "
                "completions API (api='vllm' or 'llama-cpp'), which teacher-forces the end-of-turn token"
            )
        return (
            [gen.stop_token_id],
            None if gen.tokens is None else [""],
            torch.tensor([gen.stop_entropy], dtype=torch.float32),
            torch.tensor([gen.stop_logprob], dtype=torch.float32),
        )

    def _result(
        self, gen: Generation, u: Any, copied: torch.Tensor | None, details: bool, metric: str | None = None
    ) -> ScoreResult:
        """One context's result under ``metric`` (default: the scorer's); ``u`` (the ungrounded statistics)
        None for an answer not teacher-forced (a grounded-only target), whose result holds the grounded
        metrics only."""
        h_u, lp_u = (u.entropy, u.logprob) if u is not None else (None, None)
        ids, tokens, h_g, lp_g = self._answer_stats(gen)
        names = metrics.METRICS if u is not None else metrics.GROUNDED_METRICS
        values = {
            name: metrics.compute(name, h_g, lp_g, h_u, self.alpha, self.top_k_frac, logp_u=lp_u, copied=copied)
            for name in names
        }
        metric = metric or self.metric
        chosen = values[metric]
        detail = None
        if details:
            detail = TokenDetail(
                tokens=list(tokens) if tokens is not None else self.engine.tokenizer.convert_ids_to_tokens(ids),
                token_ids=list(ids),
                grounded_entropy=h_g,
                grounded_logprob=lp_g,
                ungrounded_entropy=h_u,
                key_mask=None if h_u is None else metrics.key_token_mask(h_g, h_u, self.alpha, self.top_k_frac),
                ungrounded_logprob=lp_u,
                copied=copied,
            )
        return ScoreResult(
            score=chosen.utility,
            metric=metric,
            confidence=chosen.confidence,
            answer=gen.text,
            n_tokens=len(gen.token_ids),
            n_key_tokens=chosen.n_key_tokens,
            variants={k: v.utility for k, v in values.items()},
            answer_finished=gen.finished,
            details=detail,
        )

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

    def rerank(
        self,
        query: str,
        documents: Sequence[Any],
        top_n: int | None = None,
        threshold: float | None = None,
        *,
        settings: rerank.ModeSettings | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[rerank.ModeOverrides],
    ) -> list[DocumentScore]:
        """The documents to give the LLM, in order, chosen by a rerank mode (``grogu.selection``):

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
        fusion's relevance rank); without them the packaged MiniLM's query-document similarity does.
        The mode's settings (:class:`grogu.ModeSettings`): ``settings`` (default: the defaults), with
        each setting given by name (``**overrides``, e.g. ``mode=``, ``gate=``) replacing its value.
        Each result carries ``index`` (input position) and the original ``document``.
        """
        settings = rerank.ModeSettings.build(settings, **overrides)
        plan = self.plan_rerank(query, documents, top_n, threshold, settings=settings, relevance=relevance)
        return self.finish_rerank(plan, self._score_plans([plan], return_details)[0])

    def plan_rerank(
        self,
        query: str,
        documents: Sequence[Any],
        top_n: int | None = None,
        threshold: float | None = None,
        *,
        settings: rerank.ModeSettings | None = None,
        relevance: Sequence[float] | None = None,
    ) -> rerank.RerankPlan:
        """The first half of :meth:`rerank`: checks its inputs, sets the retrieval order (computing the
        MiniLM relevance when none is given) and plans the contexts to score (:class:`grogu.rerank.RerankPlan`)."""
        top_n, threshold = check_top_n(top_n), check_threshold(threshold)
        settings = rerank.ModeSettings.build(settings).for_target(self.grounded_only)
        settings.check_threshold(threshold)
        query, docs, originals = check_query(query), check_documents(documents), list(documents)
        if relevance is not None:
            relevance = check_relevance(relevance, len(docs))
        elif settings.mode != "document" and docs:
            relevance = rerank.relevance_scores(query, [self.prompts.template.render_context([d]) for d in docs])
        base = list(range(len(docs))) if relevance is None else selection.order_by(relevance)
        return rerank.RerankPlan(
            query=query,
            settings=settings,
            documents=docs,
            originals=originals,
            relevance=relevance,
            base=base,
            contexts=rerank.plan(settings, base, top_n),
            top_n=top_n,
            threshold=threshold,
        )

    def finish_rerank(self, plan: rerank.RerankPlan, scored: Sequence[ContextScore]) -> list[DocumentScore]:
        """The second half of :meth:`rerank`: the result, given the scores of ``plan.contexts``."""
        settings, originals = plan.settings, plan.originals
        sel = rerank.decide(
            settings, plan.base, plan.contexts, scored, plan.top_n, plan.threshold, plan.relevance, plan.support_texts()
        )
        if sel.mode == "context":
            ctx = sel.context
            fields = {k: v for k, v in vars(ctx).items() if k != "documents"} if ctx is not None else {}
            return [DocumentScore(index=i, document=originals[i], context=ctx, **fields) for i in sel.order]
        return [
            DocumentScore(
                index=i,
                document=originals[i],
                rank_score=None if sel.fused is None else sel.fused[i],
                **{k: v for k, v in vars(sel.scores[i]).items() if k != "documents"},
            )
            for i in sel.order
        ]

    # ------------------------------------------------------------------ async API
    # Each coroutine runs its engine work in a worker thread (the event loop is not blocked) and is
    # batched together with every other request waiting at the same time (see grogu.coalescer).
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

    async def arerank(
        self,
        query: str,
        documents: Sequence[Any],
        top_n: int | None = None,
        threshold: float | None = None,
        *,
        settings: rerank.ModeSettings | None = None,
        relevance: Sequence[float] | None = None,
        return_details: bool = False,
        **overrides: Unpack[rerank.ModeOverrides],
    ) -> list[DocumentScore]:
        """Async :meth:`rerank`."""
        settings = rerank.ModeSettings.build(settings, **overrides)
        plan = self.plan_rerank(query, documents, top_n, threshold, settings=settings, relevance=relevance)
        [scored] = await self._plan_coalescer.run([plan])
        if not return_details:
            scored = [ContextScore(**{**vars(r), "details": None}) for r in scored]
        return self.finish_rerank(plan, scored)

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
        gen = self.engine.generate([self.prompts.ungrounded_ids(query)], self.max_new_tokens)[0]
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


_INITIALS = re.compile(r"(?:^|\s)(?:[A-Za-z]\.)+$|(?:^|\s)(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|No)\.$")


def _sentence_end(text: str) -> bool:
    """True when ``text`` ends a sentence: '.', '!' or '?' at the end, not a '.' of initials/abbreviations."""
    text = text.rstrip()
    if not text.endswith((".", "!", "?")):
        return False
    return not (text.endswith(".") and _INITIALS.search(text))


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
