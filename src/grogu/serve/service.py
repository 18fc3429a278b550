"""The scoring service: one Ray Serve deployment per target model, a FastAPI ingress mirroring the
Python API, and Ray Serve's request batching in front of the engine.

Each replica owns one :class:`grogu.Engine` (loaded once in the replica) and builds the scorers a
request's settings ask for on top of it (cached). GROGU requests of every kind (score, score_batch,
score_contexts, best_layout, rerank) become lists of (query, contexts) items; concurrent requests that
share settings are scored together in one engine call by the replica's scheduler (:mod:`.scheduler`), which
counts each request's generation budget (contexts x answer tokens) against the call it joins: a call
holds at most ``max_batch_tokens`` of it (and ``max_batch_size`` requests), a larger request is split
into several calls, and a request that has had its turn goes to the back of the queue, so one heavy
request cannot hold small ones behind it for long. Every other route's engine work (influence items,
ΔSePer samples and beliefs, ACU items, a rerank's plan) is scheduled the same way.
Engine work runs on grogu's worker thread (:mod:`grogu.coalescer`), so the replica's event loop keeps
answering (health checks included).

Every request is checked against the service's limits (:class:`ServeConfig`, ``grogu serve --help``)
before any work (:mod:`.admission`): 413 with the limit's name and option. ``/health`` reads the worker
thread's heartbeat: 503 while one engine slice has run ``health_stall_s`` seconds.

A request that fails (a bad value, a document the tokenizer cannot take, an engine error) gets its
own error response; in a batch, the failing group is retried request by request so that one bad
request fails alone. Nothing a request sends can stop the replica.
"""

# no `from __future__ import annotations`: FastAPI reads the route signatures' annotations at runtime
import asyncio
import collections
import dataclasses
import os
from typing import Any, Callable, Optional

from ray import serve

from .. import coalescer, metrics, rerank
from ..acu import DEFAULT_PROMPT_WITH, DEFAULT_PROMPT_WITHOUT, ACUScorer
from ..checks import check_documents, check_query
from ..engine import get_engine
from ..influence import EMBEDDING_METHODS, InfluenceScorer, load_embedder
from ..results import choose_layout
from ..scorer import UtilityScorer
from ..selection import RERANK_MODES
from ..seper import NLIEntailment, SePerScorer, check_references
from ..version import __version__
from . import api, wire
from .admission import PREFILL_COST, admit, admit_budget, admit_rerank, influence_runs
from .config import ServeConfig
from .httpapi import StalledError, app, set_replica_limits, set_replica_token
from .scheduler import Scheduler, Work, split_parts

#: scorers (one per distinct settings) a replica keeps; they share the replica's engine
SCORER_CACHE = 32


def _public_name(spec: Optional[str]) -> Optional[str]:
    """A model spec without its filesystem location (a local path shows as its last part)."""
    if spec is None:
        return None
    spec = str(spec)
    if os.path.isabs(spec) or spec.startswith((".", "~")) or os.path.exists(spec):
        return os.path.basename(spec.rstrip("/\\")) or "model"
    return spec


@serve.deployment(name="grogu", max_ongoing_requests=64, health_check_period_s=10)
@serve.ingress(app)
class GroguService:
    """One replica: one engine for ``config.model``, the routes below, batched engine work."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ServeConfig(**config)
        c = self.config
        set_replica_token(c.token)
        set_replica_limits(max_body_bytes=c.max_body_bytes, body_timeout_s=c.body_timeout_s)
        self.engine = get_engine(c.model, device=c.device, dtype=c.dtype)
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

    def _utility(self, s: api.ScorerSettings) -> tuple[str, UtilityScorer]:
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

    async def _contexts(self, s: api.ScorerSettings, items: list, details: bool) -> list[list[Any]]:
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

    # ------------------------------------------------------------------ service routes
    @app.get("/health")
    async def health(self) -> dict:
        """Readiness: 200 once the replica has loaded its model (no token needed); 503 while its worker
        thread has run one engine slice for ``health_stall_s`` seconds (stuck). While no replica is
        ready the proxy answers 503 within a second (:mod:`grogu.serve.proxy`)."""
        self.check_health()
        return {"status": "ok"}

    def check_health(self) -> None:
        """Ray Serve's own health check (it replaces a replica whose check fails): the worker thread's
        heartbeat, not the event loop's."""
        busy = coalescer.busy_for()
        if busy > self.config.health_stall_s:
            raise StalledError(
                f"the replica's worker has run one engine slice for {busy:.0f} s (over "
                f"{self.config.health_stall_s:g} s, grogu serve --health-stall-s): it is stuck"
            )

    @app.get("/info")
    async def info(self) -> dict:
        """The model this deployment serves (its name, no filesystem path), its limits and batching."""
        c, e = self.config, self.engine
        return {
            "model": _public_name(e.model_name),
            "device": str(e.device),
            "dtype": str(e.dtype).removeprefix("torch."),
            "max_context_tokens": e.max_context_tokens,
            "grogu_version": __version__,
            "limits": {name: getattr(c, name) for name in ServeConfig.LIMITS},
            "batching": {
                "max_batch_size": c.max_batch_size,
                "max_batch_tokens": c.max_batch_tokens,
                "batch_wait_s": c.batch_wait_s,
            },
            "metrics": sorted(metrics.METRICS),
            "rerank_modes": list(RERANK_MODES),
            "embedder": _public_name(c.embedder),
            "nli": _public_name(c.nli),
        }

    @app.get("/stats")
    async def stats(self) -> dict:
        """Engine calls this replica ran, by number of requests gathered; the largest generation budget
        one call held. The process id only with ``stats_pids`` (``grogu serve --stats-pids``)."""
        out = {
            "replica": serve.get_replica_context().replica_id.unique_id,
            "batches": sum(self.batch_sizes.values()),
            "max_call_tokens": self.batch_tokens,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
        }
        if self.config.stats_pids:
            out["pid"] = os.getpid()
        return out

    # ------------------------------------------------------------------ GROGU routes
    @app.post("/score")
    async def score(self, body: api.ScoreRequest) -> dict:
        """Each document alone as the context (``UtilityScorer.score``)."""
        self._admit(body)
        docs = api.plain_docs(body.documents)
        [results] = await self._contexts(body, [(body.query, [[d] for d in docs])], body.return_details)
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_batch")
    async def score_batch(self, body: api.ScoreBatchRequest) -> dict:
        """Per-document scores of many (query, documents) items (``UtilityScorer.score_batch``)."""
        self._admit(body)
        items = [(it.query, [[d] for d in api.plain_docs(it.documents)]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/score_contexts")
    async def score_contexts(self, body: api.ContextsRequest) -> dict:
        """Each ordered document list as one context (``UtilityScorer.score_contexts``)."""
        self._admit(body)
        [results] = await self._contexts(
            body, [(body.query, [api.plain_docs(c) for c in body.contexts])], body.return_details
        )
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_contexts_batch")
    async def score_contexts_batch(self, body: api.ContextsBatchRequest) -> dict:
        """Contexts of many queries (``UtilityScorer.score_contexts_batch``)."""
        self._admit(body)
        items = [(it.query, [api.plain_docs(c) for c in it.contexts]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/best_layout")
    async def best_layout(self, body: api.LayoutRequest) -> dict:
        """The most useful of several orders of the documents (``UtilityScorer.best_layout``)."""
        self._admit(body)
        if not body.layouts:
            raise ValueError("best_layout needs at least one layout")
        [results] = await self._contexts(body, [(body.query, [api.plain_docs(c) for c in body.layouts])], False)
        return wire.encode_layout(choose_layout(results))

    @app.post("/rerank")
    async def rerank(self, body: api.RerankRequest) -> dict:
        """The documents to give the LLM, by rerank mode (``UtilityScorer.rerank``)."""
        self._admit(body)
        admit_rerank(self.config, body)
        _, scorer = self._utility(body)
        # checks, the MiniLM relevance when none is given, the candidates: on the worker, scheduled
        args = (body.query, api.plain_docs(body.documents), body.top_n, body.threshold)
        [rerank_plan] = await self._scheduler.submit(
            Work(
                "rerank-plan",
                scorer,
                [args],
                [len(body.documents) + 1],
                False,
                lambda sc, us, want, s=body.mode_settings(), rel=body.relevance: [
                    sc.plan_rerank(*u, settings=s, relevance=rel) for u in us
                ],
            )
        )
        if rerank.grounded_choice(rerank_plan.settings) and rerank_plan.contexts:
            # the library's path: the candidates' answers (in slices), then the choice on their grounded
            # statistics, and only the chosen one teacher-forced
            key, tokens = "rerank:" + body.scorer_key(), body.answer_tokens()
            contexts = [(rerank_plan.query, docs) for docs in rerank_plan.context_documents()]
            costs = [max(len(docs), 1) * tokens for _, docs in contexts]
            admit_budget(self.config, costs)
            generated = await self._scheduler.submit(
                Work(key, scorer, contexts, costs, False, lambda sc, us, want: sc.generate_contexts(us))
            )
            [scored] = await self._scheduler.submit(
                Work(
                    f"{key}:choose:{id(rerank_plan)}",
                    scorer,
                    [rerank_plan],
                    [tokens],
                    body.return_details,
                    lambda sc, us, want, g=generated: sc.score_generated(us, g, want),
                )
            )
        else:  # every context fully scored: in slices
            [scored] = await self._contexts(
                body, [(rerank_plan.query, rerank_plan.context_documents())], body.return_details
            )
        ranked = scorer.finish_rerank(rerank_plan, scored)
        out = wire.encode_ranked(ranked)
        if not body.return_details:
            for row in out["results"] + ([out["context"]] if out["context"] else []):
                row["details"] = None
        return out

    @app.post("/ungrounded")
    async def ungrounded(self, body: api.UngroundedRequest) -> dict:
        """The ungrounded answer's KeyEntropy (``UtilityScorer.ungrounded``)."""
        self._admit(body)
        key, scorer = self._utility(body)
        [result] = await self._scheduler.submit(
            Work(
                key + ":ungrounded",
                scorer,
                [body.query],
                [body.answer_tokens()],
                False,
                lambda sc, us, want: [sc.ungrounded(q) for q in us],
            )
        )
        return wire.encode_ungrounded(result)

    # ------------------------------------------------------------------ other metrics
    async def _built(self, key: str, build: Callable[[], Any]) -> Any:
        """A cached scorer, built on the worker thread (building may load a model or draw masks)."""
        return await self._on_worker(self._cached, key, build)

    @app.post("/influence")
    async def influence(self, body: api.InfluenceRequest) -> dict:
        """Influence Scores of many (query, documents, answer) items (``InfluenceScorer.score_batch``)."""
        self._admit(body)
        key = "influence:" + body.scorer_key()
        template = wire.decode_template(body.template.model_dump() if body.template else None)
        items = [(check_query(it.query), api.plain_docs(it.documents), it.answer) for it in body.items]
        # an item's budget: an answer's tokens per engine pass it needs (answer, leave-outs, ablations)
        costs = [
            max(influence_runs(body.method, len(docs), body.n_ablations, answer is not None), 1) * body.max_new_tokens
            for _, docs, answer in items
        ]
        admit_budget(self.config, costs)

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

        scorer = await self._built(key, build)
        result = await self._scheduler.submit(
            Work(
                key,
                scorer,
                items,
                costs,
                body.return_ablations,
                lambda sc, us, want: sc.score_batch(us, return_ablations=want),
            )
        )
        return {"results": [wire.encode_influence(r) for r in result]}

    @app.post("/seper")
    async def seper(self, body: api.SePerRequest) -> dict:
        """ΔSePer of each document, or of all of them as one context (``SePerScorer``): the samples are
        drawn in slices through the scheduler, then each prompt's entailment beliefs, one per slice."""
        self._admit(body)
        if self.config.nli is None:
            raise ValueError("this service has no NLI model for ΔSePer: start it with grogu serve --nli MODEL")
        docs = api.plain_docs(body.documents)
        n_contexts = 1 if body.as_context else len(docs)
        if not n_contexts:
            check_query(body.query)
            return {"results": []}
        n, tokens = body.n_samples, body.max_new_tokens
        admit_budget(self.config, [(n_contexts + 1) * n * tokens])
        key = "seper:" + body.model_dump_json(
            include={"n_samples", "temperature", "tau", "max_new_tokens", "seed", "template"}
        )

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

        scorer = await self._built(key, build)
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
        results = SePerScorer.results(groups, beliefs)
        return {"results": [wire.encode_seper(r) for r in results]}

    @app.post("/acu")
    async def acu(self, body: api.ACURequest) -> dict:
        """ACU of (claim, evidence, stance) items (``ACUScorer.score_batch``), a slice of items per call."""
        self._admit(body)
        key = "acu:" + body.model_dump_json(include={"labels", "prompt_with", "prompt_without"})
        scorer = await self._built(
            key,
            lambda: ACUScorer(
                self.engine,
                labels=body.labels,
                prompt_with=body.prompt_with or DEFAULT_PROMPT_WITH,
                prompt_without=body.prompt_without or DEFAULT_PROMPT_WITHOUT,
            ),
        )
        items = [(it.claim, it.evidence, it.stance) for it in body.items]
        results = await self._scheduler.submit(
            Work(key, scorer, items, [2 * PREFILL_COST] * len(items), False, lambda sc, us, want: sc.score_batch(us))
        )
        return {"results": [wire.encode_acu(r) for r in results]}


def build_app(
    config: ServeConfig,
    *,
    num_replicas: int = 1,
    min_replicas: Optional[int] = None,
    max_replicas: Optional[int] = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    max_ongoing_requests: Optional[int] = None,
) -> Any:
    """The Ray Serve application of one model. ``min_replicas``/``max_replicas`` turn on autoscaling
    (instead of a fixed ``num_replicas``); ``num_gpus`` / ``num_cpus`` are per replica (fractions share
    a device). ``max_ongoing_requests`` (default 4 x max_batch_size) must let a batch fill."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus},
        "max_ongoing_requests": max_ongoing_requests or max(4 * config.max_batch_size, 16),
    }
    if min_replicas is not None or max_replicas is not None:
        low = 1 if min_replicas is None else min_replicas
        options["autoscaling_config"] = {
            "min_replicas": low,
            "initial_replicas": max(low, 1),
            "max_replicas": max(max_replicas or low, low, 1),
            "target_ongoing_requests": config.max_batch_size,
        }
    else:
        options["num_replicas"] = num_replicas
    return GroguService.options(**options).bind(dataclasses.asdict(config))
