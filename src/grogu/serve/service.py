"""The scoring service: one Ray Serve deployment per target model, a FastAPI ingress mirroring the
Python API, and Ray Serve's request batching in front of the engine.

Each replica owns one :class:`grogu.Engine` (loaded once in the replica) and builds the scorers a
request's settings ask for on top of it (cached). GROGU requests of every kind (score, score_batch,
score_contexts, best_layout, rerank) become lists of (query, contexts) items; concurrent requests are
gathered by ``@serve.batch`` and the items of those that share settings are scored in one engine
batch. Influence requests are batched the same way. Engine work runs on grogu's worker thread
(:mod:`grogu.batching`), so the replica's event loop keeps answering (health checks included).

A request that fails (a bad value, a document the tokenizer cannot take, an engine error) gets its
own error response; in a batch, the failing group is retried request by request so that one bad
request fails alone. Nothing a request sends can stop the replica.
"""

# no `from __future__ import annotations`: FastAPI reads the route signatures' annotations at runtime
import asyncio
import collections
import dataclasses
import functools
import os
from typing import Any, Callable, Optional

from ray import serve

from .. import __version__, batching
from .. import metrics as M
from ..acu import DEFAULT_PROMPT_WITH, DEFAULT_PROMPT_WITHOUT, ACUScorer
from ..checks import check_query
from ..engine import get_engine
from ..influence import EMBEDDING_METHODS, InfluenceScorer, load_embedder
from ..models import DEFAULT_MODEL
from ..results import choose_layout
from ..scorer import UtilityScorer
from ..selection import RERANK_MODES
from ..seper import NLIEntailment, SePerScorer
from . import api as A
from . import wire as W
from .httpapi import LimitError, app, set_replica_token

#: scorers (one per distinct settings) a replica keeps; they share the replica's engine
SCORER_CACHE = 32


@dataclasses.dataclass
class ServeConfig:
    """What one deployment serves and the limits it enforces (see ``grogu serve --help``)."""

    model: str = DEFAULT_MODEL
    device: Optional[str] = None
    dtype: Optional[str] = None
    token: Optional[str] = None
    max_docs: int = 256            # documents per request, over all its lists
    max_doc_chars: int = 20_000    # characters per document (text + title)
    max_batch_size: int = 16       # requests gathered into one engine batch
    batch_wait_s: float = 0.01     # how long a batch waits to fill
    embedder: str = "all-minilm-l6-v2"
    nli: Optional[str] = None      # NLI model for ΔSePer (none: /seper answers 422)


@dataclasses.dataclass
class _Job:
    """One request's share of a batch: its items under one scorer's settings."""

    key: str
    scorer: Any
    items: list
    want: bool  # return_details / return_ablations


def _run_groups(jobs: list[_Job], run: Callable[[Any, list, bool], list]) -> list[Any]:
    """Run the jobs of a batch: the items of jobs with the same settings in one call, results split
    back per job. A group that fails is retried job by job, so only the failing request gets the error
    (returned in its slot, raised by its handler)."""
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for i, job in enumerate(jobs):
        groups[job.key].append(i)
    out: list[Any] = [None] * len(jobs)
    for idx in groups.values():
        scorer, want = jobs[idx[0]].scorer, any(jobs[i].want for i in idx)
        try:
            flat = iter(run(scorer, [it for i in idx for it in jobs[i].items], want))
            for i in idx:
                out[i] = [next(flat) for _ in jobs[i].items]
        except Exception as exc:  # noqa: BLE001 - isolate the failing request
            if len(idx) == 1:
                out[idx[0]] = exc
                continue
            for i in idx:
                try:
                    out[i] = run(jobs[i].scorer, jobs[i].items, jobs[i].want)
                except Exception as single:  # noqa: BLE001
                    out[i] = single
    return out


@serve.deployment(name="grogu", max_ongoing_requests=64, health_check_period_s=10)
@serve.ingress(app)
class GroguService:
    """One replica: one engine for ``config.model``, the routes below, batched engine work."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = ServeConfig(**config)
        c = self.config
        self.engine = get_engine(c.model, device=c.device, dtype=c.dtype)
        set_replica_token(c.token)
        self._scorers: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._embedder: Any = None
        self._nli: Any = None
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        for method in (self._grogu_batch, self._influence_batch):
            method.set_max_batch_size(c.max_batch_size)
            method.set_batch_wait_timeout_s(c.batch_wait_s)

    # ------------------------------------------------------------------ helpers
    def _admit(self, body: Any) -> None:
        """The size limits (the token is checked by the middleware, before the body is read)."""
        lists = A.docs_of(body)
        n = sum(len(docs) for docs in lists)
        if n > self.config.max_docs:
            raise LimitError(f"the request holds {n} documents; this service takes at most {self.config.max_docs} "
                             f"per request (grogu serve --max-docs): split it into several requests")
        for docs in lists:
            for i, d in enumerate(docs):
                size = len(d) if isinstance(d, str) else len(d.text) + len(d.title or "")
                if size > self.config.max_doc_chars:
                    raise LimitError(f"document {i} has {size} characters; this service takes at most "
                                     f"{self.config.max_doc_chars} per document (grogu serve --max-doc-chars)")

    def _cached(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._scorers:
            self._scorers[key] = build()
            while len(self._scorers) > SCORER_CACHE:
                self._scorers.popitem(last=False)
        self._scorers.move_to_end(key)
        return self._scorers[key]

    def _utility(self, s: A.ScorerSettings) -> tuple[str, UtilityScorer]:
        key = "utility:" + s.scorer_key()
        template = W.decode_template(s.template.model_dump() if s.template else None)
        return key, self._cached(key, lambda: UtilityScorer(
            self.engine, metric=s.metric, alpha=s.alpha, top_k_frac=s.top_k_frac, max_new_tokens=s.max_new_tokens,
            template=template, answer_style=s.answer_style, copy_ngram=s.copy_ngram))

    def _embedder_model(self) -> Any:
        if self._embedder is None:
            self._embedder = load_embedder(self.config.embedder, device=str(self.engine.device))
        return self._embedder

    @staticmethod
    async def _on_worker(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.wrap_future(batching.submit(fn, *args))

    async def _contexts(self, s: A.ScorerSettings, items: list, details: bool) -> list[list[Any]]:
        """Score [(query, [context, ...]), ...] with the scorer of ``s``, batched with other requests."""
        key, scorer = self._utility(s)
        result = await self._grogu_batch(_Job(key, scorer, items, details))
        if isinstance(result, BaseException):
            raise result
        return result

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def _grogu_batch(self, jobs: list[_Job]) -> list[Any]:
        self.batch_sizes[len(jobs)] += 1
        return await self._on_worker(_run_groups, jobs, lambda scorer, items, want:
                                     scorer.score_contexts_batch(items, return_details=want))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
    async def _influence_batch(self, jobs: list[_Job]) -> list[Any]:
        return await self._on_worker(_run_groups, jobs, lambda scorer, items, want:
                                     scorer.score_batch(items, return_ablations=want))

    @staticmethod
    def _scores(results: list[Any], details: bool) -> list[dict[str, Any]]:
        return [{**W.encode_score(r), "details": W.encode_details(r.details) if details else None} for r in results]

    # ------------------------------------------------------------------ service routes
    @app.get("/health")
    async def health(self) -> dict:
        """Liveness: 200 once the replica has loaded its model (no token needed)."""
        return {"status": "ok"}

    @app.get("/info")
    async def info(self) -> dict:
        """The model this deployment serves, its limits and batching settings."""
        c, e = self.config, self.engine
        return {"model": str(e.model_name), "device": str(e.device), "dtype": str(e.dtype).removeprefix("torch."),
                "max_context_tokens": e.max_context_tokens, "grogu_version": __version__,
                "limits": {"max_docs": c.max_docs, "max_doc_chars": c.max_doc_chars},
                "batching": {"max_batch_size": c.max_batch_size, "batch_wait_s": c.batch_wait_s},
                "metrics": sorted(M.METRICS), "rerank_modes": list(RERANK_MODES), "embedder": c.embedder,
                "nli": c.nli}

    @app.get("/stats")
    async def stats(self) -> dict:
        """Batches this replica ran, by number of requests gathered (GROGU routes)."""
        return {"replica": serve.get_replica_context().replica_id.unique_id, "pid": os.getpid(),
                "batches": sum(self.batch_sizes.values()),
                "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())}}

    # ------------------------------------------------------------------ GROGU routes
    @app.post("/score")
    async def score(self, body: A.ScoreRequest) -> dict:
        """Each document alone as the context (``UtilityScorer.score``)."""
        self._admit(body)
        docs = A.plain_docs(body.documents)
        [results] = await self._contexts(body, [(body.query, [[d] for d in docs])], body.return_details)
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_batch")
    async def score_batch(self, body: A.ScoreBatchRequest) -> dict:
        """Per-document scores of many (query, documents) items (``UtilityScorer.score_batch``)."""
        self._admit(body)
        items = [(it.query, [[d] for d in A.plain_docs(it.documents)]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/score_contexts")
    async def score_contexts(self, body: A.ContextsRequest) -> dict:
        """Each ordered document list as one context (``UtilityScorer.score_contexts``)."""
        self._admit(body)
        [results] = await self._contexts(body, [(body.query, [A.plain_docs(c) for c in body.contexts])],
                                         body.return_details)
        return {"results": self._scores(results, body.return_details)}

    @app.post("/score_contexts_batch")
    async def score_contexts_batch(self, body: A.ContextsBatchRequest) -> dict:
        """Contexts of many queries (``UtilityScorer.score_contexts_batch``)."""
        self._admit(body)
        items = [(it.query, [A.plain_docs(c) for c in it.contexts]) for it in body.items]
        results = await self._contexts(body, items, body.return_details)
        return {"results": [self._scores(r, body.return_details) for r in results]}

    @app.post("/best_layout")
    async def best_layout(self, body: A.LayoutRequest) -> dict:
        """The most useful of several orders of the documents (``UtilityScorer.best_layout``)."""
        self._admit(body)
        if not body.layouts:
            raise ValueError("best_layout needs at least one layout")
        [results] = await self._contexts(body, [(body.query, [A.plain_docs(c) for c in body.layouts])], False)
        return W.encode_layout(choose_layout(results))

    @app.post("/rerank")
    async def rerank(self, body: A.RerankRequest) -> dict:
        """The documents to give the LLM, by rerank mode (``UtilityScorer.rerank``)."""
        self._admit(body)
        _, scorer = self._utility(body)
        mode_settings = dict(weight=body.weight, family=body.family, swaps=body.swaps, margin=body.margin)
        # checks, and the MiniLM relevance when none is given (model work: on the worker thread)
        rerank_plan = await self._on_worker(
            functools.partial(scorer.plan_rerank, body.query, A.plain_docs(body.documents), body.top_n,
                              body.threshold, mode=body.mode, relevance=body.relevance, **mode_settings))
        [scored] = await self._contexts(body, [(rerank_plan.query, rerank_plan.context_documents())],
                                        body.return_details)
        ranked = scorer.finish_rerank(rerank_plan, scored)
        out = W.encode_ranked(ranked)
        if not body.return_details:
            for row in out["results"] + ([out["context"]] if out["context"] else []):
                row["details"] = None
        return out

    @app.post("/ungrounded")
    async def ungrounded(self, body: A.UngroundedRequest) -> dict:
        """The ungrounded answer's KeyEntropy (``UtilityScorer.ungrounded``)."""
        self._admit(body)
        _, scorer = self._utility(body)
        return W.encode_ungrounded(await self._on_worker(scorer.ungrounded, body.query))

    # ------------------------------------------------------------------ other metrics
    @app.post("/influence")
    async def influence(self, body: A.InfluenceRequest) -> dict:
        """Influence Scores of many (query, documents, answer) items (``InfluenceScorer.score_batch``)."""
        self._admit(body)
        key = "influence:" + body.scorer_key()
        template = W.decode_template(body.template.model_dump() if body.template else None)
        # the embedder is loaded once per replica, and only for the methods that embed answers
        embedder = self._embedder_model() if body.method in EMBEDDING_METHODS else self.config.embedder
        scorer = self._cached(key, lambda: InfluenceScorer(
            self.engine, embedder=embedder, max_new_tokens=body.max_new_tokens, template=template,
            method=body.method, n_ablations=body.n_ablations, seed=body.seed, lasso_alpha=body.lasso_alpha))
        scorer.embedder_name = self.config.embedder
        items = [(check_query(it.query), A.plain_docs(it.documents), it.answer) for it in body.items]
        result = await self._influence_batch(_Job(key, scorer, items, body.return_ablations))
        if isinstance(result, BaseException):
            raise result
        return {"results": [W.encode_influence(r) for r in result]}

    @app.post("/seper")
    async def seper(self, body: A.SePerRequest) -> dict:
        """ΔSePer of each document, or of all of them as one context (``SePerScorer``)."""
        self._admit(body)
        if self.config.nli is None:
            raise ValueError("this service has no NLI model for ΔSePer: start it with grogu serve --nli MODEL")
        if self._nli is None:
            self._nli = NLIEntailment(self.config.nli, device=str(self.engine.device))
        scorer = SePerScorer(self.engine, entailment=self._nli, n_samples=body.n_samples,
                             temperature=body.temperature, tau=body.tau, max_new_tokens=body.max_new_tokens,
                             seed=body.seed,
                             template=W.decode_template(body.template.model_dump() if body.template else None))
        docs = A.plain_docs(body.documents)
        if body.as_context:
            return {"results": [W.encode_seper(await self._on_worker(
                scorer.score_context, body.query, docs, body.references))]}
        results = await self._on_worker(scorer.score, body.query, docs, body.references)
        return {"results": [W.encode_seper(r) for r in results]}

    @app.post("/acu")
    async def acu(self, body: A.ACURequest) -> dict:
        """ACU of (claim, evidence, stance) items (``ACUScorer.score_batch``)."""
        self._admit(body)
        for i, it in enumerate(body.items):
            if len(it.claim) + len(it.evidence) > self.config.max_doc_chars:
                raise LimitError(f"item {i}: claim and evidence have {len(it.claim) + len(it.evidence)} characters; "
                                 f"at most {self.config.max_doc_chars} (grogu serve --max-doc-chars)")
        if len(body.items) > self.config.max_docs:
            raise LimitError(f"the request holds {len(body.items)} items; at most {self.config.max_docs}")
        scorer = ACUScorer(self.engine, labels=body.labels, prompt_with=body.prompt_with or DEFAULT_PROMPT_WITH,
                           prompt_without=body.prompt_without or DEFAULT_PROMPT_WITHOUT)
        results = await self._on_worker(scorer.score_batch, [(it.claim, it.evidence, it.stance) for it in body.items])
        return {"results": [W.encode_acu(r) for r in results]}


def build_app(config: ServeConfig, *, num_replicas: int = 1, min_replicas: Optional[int] = None,
              max_replicas: Optional[int] = None, num_cpus: float = 1, num_gpus: float = 0,
              max_ongoing_requests: Optional[int] = None) -> Any:
    """The Ray Serve application of one model. ``min_replicas``/``max_replicas`` turn on autoscaling
    (instead of a fixed ``num_replicas``); ``num_gpus`` / ``num_cpus`` are per replica (fractions share
    a device). ``max_ongoing_requests`` (default 4 x max_batch_size) must let a batch fill."""
    options: dict[str, Any] = {
        "ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus},
        "max_ongoing_requests": max_ongoing_requests or max(4 * config.max_batch_size, 16),
    }
    if min_replicas is not None or max_replicas is not None:
        low = 1 if min_replicas is None else min_replicas
        options["autoscaling_config"] = {"min_replicas": low, "initial_replicas": max(low, 1),
                                         "max_replicas": max(max_replicas or low, low, 1),
                                         "target_ongoing_requests": config.max_batch_size}
    else:
        options["num_replicas"] = num_replicas
    return GroguService.options(**options).bind(dataclasses.asdict(config))
