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
Engine work runs on grogu's worker thread (:mod:`grogu.runtime.coalescer`), so the replica's event loop keeps
answering (health checks included).

Every request is checked against the service's limits (:class:`ServeConfig`, ``grogu serve --help``)
before any work (:mod:`.admission`): 413 with the limit's name and option. ``/health`` reads the worker
thread's heartbeat: 503 while one engine slice has run ``health_stall_s`` seconds.

A request that fails (a bad value, a document the tokenizer cannot take, an engine error) gets its
own error response; in a batch, the failing group is retried request by request so that one bad
request fails alone. Nothing a request sends can stop the replica.

The routes are here; the replica's engine, its scorers and the engine work the routes schedule are
:class:`.replica_work.ReplicaWork`, which the deployment class extends.
"""

# no `from __future__ import annotations`: FastAPI reads the route signatures' annotations at runtime
import dataclasses
import os
from typing import Any, Optional

from fastapi import Response
from ray import serve

from ...core.checks import check_query
from ...core.results import choose_layout
from ...core.version import __version__
from ...metrics import grogu as metrics
from ...metrics.acu import DEFAULT_PROMPT_WITH, DEFAULT_PROMPT_WITHOUT, ACUScorer
from ...rerank.modes import MODES
from ...rerank.remote import schema, wire
from ...runtime import coalescer
from . import api, compat
from .admission import PREFILL_COST, admit_budget, admit_rerank, influence_runs
from .config import ServeConfig, model_names
from .httpapi import ModelNotFound, StalledError, answers, app
from .replica_work import ReplicaWork
from .scheduler import Work


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
class GroguService(ReplicaWork):
    """One replica: one engine for ``config.model``, the routes below, batched engine work
    (:class:`~grogu.apps.serve.replica_work.ReplicaWork`)."""

    # ------------------------------------------------------------------ service routes
    @app.get("/health", **answers(schema.HealthResponse))
    async def health(self) -> dict:
        """Readiness: 200 once the replica has loaded its model (no token needed); 503 while its worker
        thread has run one engine slice for ``health_stall_s`` seconds (stuck). While no replica is
        ready the proxy answers 503 within a second (:mod:`grogu.apps.serve.proxy`)."""
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

    @app.get("/info", **answers(schema.InfoResponse))
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
            "rerank_modes": list(MODES),
            "embedder": _public_name(c.embedder),
            "nli": _public_name(c.nli),
        }

    @app.get("/stats", **answers(schema.StatsResponse))
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
    @app.post("/score", **answers(schema.ScoresResponse))
    async def score(self, body: schema.ScoreRequest) -> dict:
        """Each document alone as the context (``UtilityScorer.score``)."""
        self._admit(body)
        docs = api.plain_docs(body.documents)
        [results] = await self._contexts(body, [(body.query, [[d] for d in docs])], body.return_details)
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_batch", **answers(schema.ScoresBatchResponse))
    async def score_batch(self, body: schema.ScoreBatchRequest) -> dict:
        """Per-document scores of many (query, documents) items (``UtilityScorer.score_batch``)."""
        self._admit(body)
        items = [(it.query, [[d] for d in api.plain_docs(it.documents)]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/score_contexts", **answers(schema.ScoresResponse))
    async def score_contexts(self, body: schema.ContextsRequest) -> dict:
        """Each ordered document list as one context (``UtilityScorer.score_contexts``)."""
        self._admit(body)
        [results] = await self._contexts(
            body, [(body.query, [api.plain_docs(c) for c in body.contexts])], body.return_details
        )
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_contexts_batch", **answers(schema.ScoresBatchResponse))
    async def score_contexts_batch(self, body: schema.ContextsBatchRequest) -> dict:
        """Contexts of many queries (``UtilityScorer.score_contexts_batch``)."""
        self._admit(body)
        items = [(it.query, [api.plain_docs(c) for c in it.contexts]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/best_layout", **answers(schema.LayoutResponse))
    async def best_layout(self, body: schema.LayoutRequest) -> dict:
        """The most useful of several orders of the documents (``UtilityScorer.best_layout``)."""
        self._admit(body)
        if not body.layouts:
            raise ValueError("best_layout needs at least one layout")
        [results] = await self._contexts(body, [(body.query, [api.plain_docs(c) for c in body.layouts])], False)
        return wire.encode_layout(choose_layout(results))

    @app.post("/rerank", **answers(schema.RerankResponse))
    async def rerank(self, body: schema.RerankRequest) -> dict:
        """The documents to give the LLM, by rerank mode (``UtilityScorer.rerank``)."""
        self._admit(body)
        admit_rerank(self.config, body)
        _, scorer = self._utility(body)
        ranked = await self._rerank(body, scorer)
        out = wire.encode_ranked(ranked)
        if not body.return_details:
            for row in out["results"] + ([out["context"]] if out["context"] else []):
                row["details"] = None
        return out

    # ------------------------------------------------------------------ the clients' rerank API
    @app.post("/v1/rerank", **answers(schema.CompatRerankResponse))
    async def rerank_v1(self, body: compat.CompatRerankRequest, response: Response) -> dict:
        """Cohere's v1 and Jina's rerank API (:mod:`grogu.apps.serve.compat`): the ``/rerank`` pipeline,
        ``relevance_score`` in [0, 1], documents returned unless ``return_documents`` is false."""
        return await self._compat(body, 1, response)

    @app.post("/v2/rerank", **answers(schema.CompatRerankResponse))
    async def rerank_v2(self, body: compat.CompatRerankRequest, response: Response) -> dict:
        """Cohere's v2 rerank API (:mod:`grogu.apps.serve.compat`): the ``/rerank`` pipeline,
        ``relevance_score`` in [0, 1], documents returned only with ``return_documents``."""
        return await self._compat(body, 2, response)

    async def _compat(self, body: compat.CompatRerankRequest, version: int, response: Response) -> dict:
        served = _public_name(self.engine.model_name) or self.config.model
        if body.model is not None and body.model not in {served, *model_names(self.config.model)}:
            raise ModelNotFound(
                f"model {body.model!r} is not served here; this route serves {served!r}: pass "
                f"model={served!r} (the LLM grogu scores the documents for)"
            )
        own = compat.rerank_request(body, self.tuned)
        self._admit(own)
        admit_rerank(self.config, own)
        _, scorer = self._utility(own)
        usage: dict[str, int] = {"prompt_tokens": 0, "completion_tokens": 0}
        ranked = await self._rerank(own, scorer, usage)
        ignored = body.ignored()
        if ignored:
            response.headers[compat.IGNORED_HEADER] = compat.ignored_header(ignored)
        note = compat.tuned_note(self.tuned, scorer, own)
        return compat.response(body, version, ranked, served, usage, own.mode_settings().mode, note)

    @app.post("/ungrounded", **answers(schema.UngroundedResponse))
    async def ungrounded(self, body: schema.UngroundedRequest) -> dict:
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
        return dataclasses.asdict(result)

    @app.post("/influence", **answers(schema.InfluenceResponse))
    async def influence(self, body: schema.InfluenceRequest) -> dict:
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
        scorer = await self._influence_scorer(key, body, template)
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
        return {"results": [dataclasses.asdict(r) for r in result]}

    @app.post("/seper", **answers(schema.SePerResponse))
    async def seper(self, body: schema.SePerRequest) -> dict:
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
        scorer = await self._seper_scorer(key, body)
        results = await self._seper_results(key, scorer, body, docs)
        return {"results": [dataclasses.asdict(r) for r in results]}

    @app.post("/acu", **answers(schema.ACUResponse))
    async def acu(self, body: schema.ACURequest) -> dict:
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
        return {"results": [dataclasses.asdict(r) for r in results]}


def build_app(
    config: ServeConfig,
    *,
    num_replicas: int = 1,
    min_replicas: Optional[int] = None,
    max_replicas: Optional[int] = None,
    num_cpus: float = 1,
    num_gpus: float = 0,
    max_ongoing_requests: Optional[int] = None,
    max_replicas_per_node: Optional[int] = None,
) -> Any:
    """The Ray Serve application of one model. ``min_replicas``/``max_replicas`` turn on autoscaling
    (instead of a fixed ``num_replicas``); ``num_gpus`` / ``num_cpus`` are per replica (fractions share
    a device). ``max_ongoing_requests`` (default 4 x max_batch_size) must let a batch fill.
    ``max_replicas_per_node`` spreads the replicas over a cluster's nodes (1: one per node, so losing
    a node loses one replica)."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus},
        "max_ongoing_requests": max_ongoing_requests or max(4 * config.max_batch_size, 16),
    }
    if max_replicas_per_node is not None:
        options["max_replicas_per_node"] = max_replicas_per_node
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
