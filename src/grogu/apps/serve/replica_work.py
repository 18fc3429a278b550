"""The engine work of one replica of the scoring service (:mod:`grogu.apps.serve.service` holds its routes):
its engine, the scorers built on it (cached), and the scheduling of each route's engine work on grogu's
worker thread (:mod:`.scheduler`, :mod:`grogu.runtime.coalescer`)."""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Callable

from ...core.checks import check_documents, check_query
from ...metrics.influence import EMBEDDING_METHODS, InfluenceScorer, load_embedder
from ...metrics.seper import NLIEntailment, SePerScorer, check_references
from ...rerank import pipeline as rerank_pipeline
from ...rerank.remote import schema, wire
from ...rerank.scorer import UtilityScorer
from ...rerank.tuned import from_dict, model_fingerprint
from ...runtime import coalescer
from ...runtime.engine import get_engine
from . import api
from .admission import admit, admit_budget
from .config import ServeConfig
from .httpapi import set_replica_limits, set_replica_token
from .scheduler import Scheduler, Work, split_parts

#: scorers (one per distinct settings) a replica keeps; they share the replica's engine
SCORER_CACHE = 32


class ReplicaWork:
    """One replica's engine and the engine work its routes ask for (the routes: ``GroguService``)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ServeConfig(**config)
        c = self.config
        set_replica_token(c.token)
        set_replica_limits(max_body_bytes=c.max_body_bytes, body_timeout_s=c.body_timeout_s)
        self.engine = get_engine(c.model, device=c.device, dtype=c.dtype, cpu_linear=c.cpu_linear)
        # grogu serve --settings: the compatible rerank routes' settings; another model warns in the log
        self.tuned = None if c.tuned_settings is None else from_dict(c.tuned_settings, "grogu serve --settings")
        if self.tuned is not None:
            self.tuned.check(self.engine.model_name, fingerprint=model_fingerprint(self.engine))
        self._scorers: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._embedder: Any = None
        self._nli: Any = None
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        self.batch_tokens = 0
        self._scheduler = Scheduler(c.max_batch_size, c.max_batch_tokens, c.batch_wait_s, self._count_call)

    def _count_call(self, requests: int, tokens: int) -> None:
        self.batch_sizes[requests] += 1
        self.batch_tokens = max(self.batch_tokens, tokens)

    # ------------------------------------------------------------------ helpers
    def _admit(self, body: Any) -> None:
        admit(self.config, body)

    def _cached(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._scorers:
            self._scorers[key] = build()
            while len(self._scorers) > SCORER_CACHE:
                self._scorers.popitem(last=False)
        self._scorers.move_to_end(key)
        return self._scorers[key]

    def _utility(self, s: schema.ScorerSettings) -> tuple[str, UtilityScorer]:
        key = "utility:" + s.scorer_key()
        template = wire.decode_template(s.template.model_dump() if s.template else None)
        return key, self._cached(
            key,
            lambda: UtilityScorer(
                self.engine,
                metric=s.metric,
                alpha=s.alpha,
                top_k_frac=s.top_k_frac,
                max_new_tokens=s.max_new_tokens,
                template=template,
                answer_style=s.answer_style,
                copy_ngram=s.copy_ngram,
            ),
        )

    def _embedder_model(self) -> Any:
        if self._embedder is None:
            self._embedder = load_embedder(self.config.embedder, device=str(self.engine.device))
        return self._embedder

    @staticmethod
    async def _on_worker(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(coalescer.submit(fn, *args))

    async def _contexts(self, s: schema.ScorerSettings, items: list, details: bool) -> list[list[Any]]:
        """Score [(query, [context, ...]), ...] with the scorer of ``s``, scheduled with other requests:
        each item's contexts in slices of at most ``max_batch_tokens // answer tokens`` contexts."""
        key, scorer = self._utility(s)
        tokens = s.answer_tokens()
        per_call = max(1, self.config.max_batch_tokens // tokens)
        units, owners = [], []
        for i, (query, contexts) in enumerate(items):
            for start in range(0, max(len(contexts), 1), per_call):
                units.append((query, contexts[start : start + per_call]))
                owners.append(i)
        costs = [max(len(c), 1) * tokens for _, c in units]
        admit_budget(self.config, costs)
        done = await self._scheduler.submit(
            Work(
                key,
                scorer,
                units,
                costs,
                details,
                lambda sc, us, want: sc.score_contexts_batch(us, return_details=want),
            )
        )
        out: list[list[Any]] = [[] for _ in items]
        for i, rows in zip(owners, done):
            out[i].extend(rows)
        return out

    @staticmethod
    def _scores(results: list[Any], details: bool) -> list[dict[str, Any]]:
        return [
            {**wire.encode_score(r), "details": wire.encode_details(r.details) if details else None} for r in results
        ]

    async def _built(self, key: str, build: Callable[[], Any]) -> Any:
        """A cached scorer, built on the worker thread (building may load a model or draw masks)."""
        return await self._on_worker(self._cached, key, build)

    # ------------------------------------------------------------------ rerank
    async def _rerank(
        self, body: schema.RerankRequest, scorer: UtilityScorer, usage: dict[str, int] | None = None
    ) -> list[Any]:
        """The ranked documents: the library's rerank pipeline (:mod:`grogu.rerank.pipeline`), each of its
        steps scheduled with the other requests' work. Under the gate the retriever's context is answered
        first, and the other candidates only when its answer is in doubt, exactly as in process.
        ``usage``: counts ``prompt_tokens`` (grounded prompts, and each teacher-forced ungrounded prompt
        with its answer) and ``completion_tokens`` (answer tokens decoded) into this dict."""
        key, tokens = "rerank:" + body.scorer_key(), body.answer_tokens()
        rerank_plan = rerank_pipeline.plan(
            body.query,
            api.plain_docs(body.documents),
            body.top_n,
            body.threshold,
            body.mode_settings(),
            body.relevance,
            scorer.grounded_only,
        )
        walk = rerank_pipeline.steps(scorer, rerank_plan, body.return_details)
        results: Any = None
        while True:
            try:
                step = walk.send(results)
            except StopIteration as done:
                return done.value
            if isinstance(step, rerank_pipeline.Answer):  # one unit a context: the scheduler slices them
                units, costs = step.contexts, [max(len(docs), 1) * tokens for _, docs in step.contexts]
                run = lambda sc, us, want: sc.answer_contexts(us)  # noqa: E731
            else:
                units, costs = step.rows, [tokens] * len(step.rows)
                run = lambda sc, us, want: sc.force_answers(us, want)  # noqa: E731
            admit_budget(self.config, costs)
            kind = type(step).__name__.lower()
            results = await self._scheduler.submit(
                Work(f"{key}:{kind}", scorer, units, costs, body.return_details, run)
            )
            if usage is not None:
                count_usage(usage, scorer, step, results)

    # ------------------------------------------------------------------ other metrics
    async def _influence_scorer(self, key: str, body: schema.InfluenceRequest, template: Any) -> InfluenceScorer:
        """The cached InfluenceScorer of the request's settings."""

        def build() -> InfluenceScorer:
            # the embedder is loaded once per replica, and only for the methods that embed answers
            embedder = self._embedder_model() if body.method in EMBEDDING_METHODS else self.config.embedder
            scorer = InfluenceScorer(
                self.engine,
                embedder=embedder,
                max_new_tokens=body.max_new_tokens,
                template=template,
                method=body.method,
                n_ablations=body.n_ablations,
                seed=body.seed,
                lasso_alpha=body.lasso_alpha,
            )
            scorer.embedder_name = self.config.embedder
            return scorer

        return await self._built(key, build)

    async def _seper_scorer(self, key: str, body: schema.SePerRequest) -> SePerScorer:
        """The cached SePerScorer of the request's settings (the NLI model is loaded once per replica)."""
        n, tokens = body.n_samples, body.max_new_tokens

        def build() -> SePerScorer:
            if self._nli is None:
                self._nli = NLIEntailment(self.config.nli, device=str(self.engine.device))
            return SePerScorer(
                self.engine,
                entailment=self._nli,
                n_samples=n,
                temperature=body.temperature,
                tau=body.tau,
                max_new_tokens=tokens,
                seed=body.seed,
                template=wire.decode_template(body.template.model_dump() if body.template else None),
            )

        return await self._built(key, build)

    async def _seper_results(self, key: str, scorer: SePerScorer, body: schema.SePerRequest, docs: list) -> list[Any]:
        """ΔSePer: the samples drawn in slices through the scheduler, then each prompt's entailment
        beliefs, one per slice."""
        n, tokens = body.n_samples, body.max_new_tokens
        query, refs, checked = check_query(body.query), check_references(body.references), check_documents(docs)
        contexts = [checked] if body.as_context else [[d] for d in checked]
        rows = await self._on_worker(scorer.sample_rows, query, contexts)
        per_call, split_parts_ = max(1, self.config.max_batch_tokens // tokens), split_parts
        slices = [rows[i : i + per_call] for i in range(0, len(rows), per_call)]
        done = await self._scheduler.submit(
            Work(
                key,
                scorer,
                slices,
                [len(x) * tokens for x in slices],
                False,
                lambda sc, us, want: split_parts_(sc.sample([r for u in us for r in u]), [len(u) for u in us]),
            )
        )
        gens = [g for part in done for g in part]
        groups = [gens[i : i + n] for i in range(0, len(gens), n)]
        beliefs = await self._scheduler.submit(
            Work(
                key + ":nli",
                scorer,
                groups,
                [n * tokens] * len(groups),
                False,
                lambda sc, us, want: sc.beliefs(query, refs, us),
            )
        )
        return SePerScorer.results(groups, beliefs)


def count_usage(usage: dict[str, int], scorer: UtilityScorer, step: Any, results: list[Any]) -> None:
    """Add one rerank step's tokens to ``usage``: an answered context's grounded prompt and its answer
    tokens; a teacher-forced row's ungrounded prompt and the answer it reads."""
    if isinstance(step, rerank_pipeline.Answer):
        for prompt, gen in results:
            usage["prompt_tokens"] = usage.get("prompt_tokens", 0) + len(prompt)
            usage["completion_tokens"] = usage.get("completion_tokens", 0) + len(gen.token_ids) + gen.finished
        return
    if scorer.grounded_only:
        return
    prompts = {q: len(scorer.prompts.ungrounded_ids(q)) for q in dict.fromkeys(q for (q, _), _, _ in step.rows)}
    for (query, _), _, gen in step.rows:
        usage["prompt_tokens"] = usage.get("prompt_tokens", 0) + prompts[query] + max(len(gen.token_ids), 1)
