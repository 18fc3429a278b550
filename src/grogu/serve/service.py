"""The scoring service: one Ray Serve deployment per target model, a FastAPI ingress mirroring the
Python API, and Ray Serve's request batching in front of the engine.

Each replica owns one :class:`grogu.Engine` (loaded once in the replica) and builds the scorers a
request's settings ask for on top of it (cached). GROGU requests of every kind (score, score_batch,
score_contexts, best_layout, rerank) become lists of (query, contexts) items; concurrent requests that
share settings are scored together in one engine call by the replica's :class:`_Scheduler`, which
counts each request's generation budget (contexts x answer tokens) against the call it joins: a call
holds at most ``max_batch_tokens`` of it (and ``max_batch_size`` requests), a larger request is split
into several calls, and a request that has had its turn goes to the back of the queue, so one heavy
request cannot hold small ones behind it for long. Influence requests are scheduled the same way.
Engine work runs on grogu's worker thread (:mod:`grogu.batching`), so the replica's event loop keeps
answering (health checks included).

Every request is checked against the service's limits (:class:`ServeConfig`, ``grogu serve --help``)
before any work: 413 with the limit's name and option.

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
from ..results import choose_layout
from ..scorer import UtilityScorer
from ..selection import RERANK_MODES
from ..seper import NLIEntailment, SePerScorer
from . import api as A
from . import wire as W
from .. import rerank as R
from .config import ServeConfig, option
from .httpapi import LimitError, app, set_replica_limits, set_replica_token

#: scorers (one per distinct settings) a replica keeps; they share the replica's engine
SCORER_CACHE = 32


@dataclasses.dataclass(eq=False)
class _Work:
    """One request's engine work under one scorer's settings, as units (each scored in one engine
    call, with the generation budget ``costs[i]``); ``results`` holds one entry per unit done."""

    key: str
    scorer: Any
    units: list
    costs: list
    want: bool  # return_details / return_ablations
    run: Callable[[Any, list, bool], list]  # (scorer, units, want) -> one result per unit
    results: list = dataclasses.field(default_factory=list)
    future: Any = None


def _run_call(picked: list[tuple[_Work, list]]) -> list[Any]:
    """One engine call (on the worker thread): the units of jobs with the same settings together,
    results split back per job. When it fails, each job is retried alone, so only the failing request
    gets the error (returned in its slot)."""
    first = picked[0][0]
    want = any(job.want for job, _ in picked)
    try:
        flat = iter(first.run(first.scorer, [u for _, units in picked for u in units], want))
        return [[next(flat) for _ in units] for _, units in picked]
    except Exception as exc:  # noqa: BLE001 - isolate the failing request
        if len(picked) == 1:
            return [exc]
    out: list[Any] = []
    for job, units in picked:
        try:
            out.append(job.run(job.scorer, units, job.want))
        except Exception as single:  # noqa: BLE001
            out.append(single)
    return out


class _Scheduler:
    """The replica's engine queue. Requests (jobs) wait in arrival order; each engine call takes the
    settings of the job at the head and gathers, from it and the jobs behind it with the same
    settings, units whose generation budget fits ``max_tokens`` (the head's first unit always), at
    most ``max_requests`` jobs. A job with units left goes to the back of the queue: a heavy request
    is scored a slice per turn, and the requests that arrived meanwhile get theirs in between. An idle
    replica waits ``wait_s`` for a call to fill."""

    def __init__(self, max_requests: int, max_tokens: int, wait_s: float, on_call: Callable[[int, int], None]) -> None:
        self.max_requests, self.max_tokens, self.wait_s, self.on_call = max_requests, max_tokens, wait_s, on_call
        self.queue: list[_Work] = []
        self._wake: Optional[asyncio.Event] = None
        self._task: Optional[asyncio.Task] = None

    async def submit(self, job: _Work) -> list[Any]:
        loop = asyncio.get_running_loop()
        job.future = loop.create_future()
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._loop())
        self.queue.append(job)
        self._wake.set()
        return await job.future

    def _take(self) -> list[tuple[_Work, list]]:
        head, budget, picked = self.queue[0], self.max_tokens, []
        for job in self.queue:
            if len(picked) >= self.max_requests or budget <= 0:
                break
            if job.key != head.key:
                continue
            start = n = len(job.results)
            while n < len(job.units) and (job.costs[n] <= budget or not picked and n == start):
                budget -= job.costs[n]
                n += 1
            if n > start:
                picked.append((job, job.units[start:n]))
        return picked

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.queue = [job for job in self.queue if not job.future.done()]  # cancelled requests leave
            if not self.queue:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time() + self.wait_s
                while len(self.queue) < self.max_requests and deadline > loop.time():
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), deadline - loop.time())
                    except asyncio.TimeoutError:
                        break
                continue
            picked = self._take()
            self.on_call(len(picked), sum(job.costs[len(job.results) + i] for job, units in picked
                                          for i in range(len(units))))
            try:
                outs = await asyncio.wrap_future(batching.submit(_run_call, picked))
            except BaseException as exc:  # noqa: BLE001 - the loop must go on
                if isinstance(exc, asyncio.CancelledError):
                    raise
                outs = [exc] * len(picked)
            for (job, _), out in zip(picked, outs):
                self.queue.remove(job)
                if job.future.done():
                    continue
                if isinstance(out, BaseException):
                    job.future.set_exception(out)
                    continue
                job.results.extend(out)
                if len(job.results) == len(job.units):
                    job.future.set_result(job.results)
                else:
                    self.queue.append(job)  # its next slice after the requests waiting now


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
        self._scheduler = _Scheduler(c.max_batch_size, c.max_batch_tokens, c.batch_wait_s, self._count_call)

    def _count_call(self, requests: int, tokens: int) -> None:
        self.batch_sizes[requests] += 1
        self.batch_tokens = max(self.batch_tokens, tokens)

    # ------------------------------------------------------------------ helpers
    def _admit(self, body: Any) -> None:
        """The limits, before any work (the token and the body size are checked by the guard, before
        the body is parsed). Each message names the limit's option."""
        c = self.config
        total = A.text_chars(body)
        if total > c.max_request_chars:
            raise LimitError(f"the request holds {total} characters in all; this service takes at most "
                             f"{c.max_request_chars} per request ({option('max_request_chars')}): split it")
        for i, query in enumerate(A.queries_of(body)):
            if len(query) > c.max_query_chars:
                raise LimitError(f"query {i} has {len(query)} characters; this service takes at most "
                                 f"{c.max_query_chars} per query ({option('max_query_chars')})")
        for name, size in A.templates_of(body):
            if size > c.max_template_chars:
                raise LimitError(f"the {name} has {size} characters; this service takes at most "
                                 f"{c.max_template_chars} ({option('max_template_chars')})")
        tokens = body.answer_tokens() if isinstance(body, A.ScorerSettings) else getattr(body, "max_new_tokens", None)
        if tokens is not None and tokens > c.max_new_tokens:
            raise LimitError(f"max_new_tokens is {tokens}; this service generates at most {c.max_new_tokens} "
                             f"answer tokens per context ({option('max_new_tokens')})")
        lists = A.docs_of(body)
        n = sum(len(docs) for docs in lists)
        if n > c.max_docs:
            raise LimitError(f"the request holds {n} documents; this service takes at most {c.max_docs} "
                             f"per request ({option('max_docs')}): split it into several requests")
        for docs in lists:
            for i, d in enumerate(docs):
                size = len(d) if isinstance(d, str) else len(d.text) + len(d.title or "")
                if size > c.max_doc_chars:
                    raise LimitError(f"document {i} has {size} characters; this service takes at most "
                                     f"{c.max_doc_chars} per document ({option('max_doc_chars')})")

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
        """Score [(query, [context, ...]), ...] with the scorer of ``s``, scheduled with other requests:
        each item's contexts in slices of at most ``max_batch_tokens // answer tokens`` contexts."""
        key, scorer = self._utility(s)
        tokens = s.answer_tokens()
        per_call = max(1, self.config.max_batch_tokens // tokens)
        units, owners = [], []
        for i, (query, contexts) in enumerate(items):
            for start in range(0, max(len(contexts), 1), per_call):
                units.append((query, contexts[start:start + per_call]))
                owners.append(i)
        done = await self._scheduler.submit(_Work(key, scorer, units, [len(c) * tokens for _, c in units], details,
                                                 lambda sc, us, want: sc.score_contexts_batch(us, return_details=want)))
        out: list[list[Any]] = [[] for _ in items]
        for i, rows in zip(owners, done):
            out[i].extend(rows)
        return out

    @staticmethod
    def _scores(results: list[Any], details: bool) -> list[dict[str, Any]]:
        return [{**W.encode_score(r), "details": W.encode_details(r.details) if details else None} for r in results]

    # ------------------------------------------------------------------ service routes
    @app.get("/health")
    async def health(self) -> dict:
        """Liveness: 200 once the replica has loaded its model (no token needed). While no replica is
        ready the proxy answers 503 within a second (:mod:`grogu.serve.proxy`)."""
        return {"status": "ok"}

    @app.get("/info")
    async def info(self) -> dict:
        """The model this deployment serves (its name, no filesystem path), its limits and batching."""
        c, e = self.config, self.engine
        return {"model": _public_name(e.model_name), "device": str(e.device),
                "dtype": str(e.dtype).removeprefix("torch."), "max_context_tokens": e.max_context_tokens,
                "grogu_version": __version__, "limits": {name: getattr(c, name) for name in ServeConfig.LIMITS},
                "batching": {"max_batch_size": c.max_batch_size, "max_batch_tokens": c.max_batch_tokens,
                             "batch_wait_s": c.batch_wait_s},
                "metrics": sorted(M.METRICS), "rerank_modes": list(RERANK_MODES),
                "embedder": _public_name(c.embedder), "nli": _public_name(c.nli)}

    @app.get("/stats")
    async def stats(self) -> dict:
        """Engine calls this replica ran, by number of requests gathered; the largest generation budget
        one call held. The process id only with ``stats_pids`` (``grogu serve --stats-pids``)."""
        out = {"replica": serve.get_replica_context().replica_id.unique_id,
               "batches": sum(self.batch_sizes.values()), "max_call_tokens": self.batch_tokens,
               "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())}}
        if self.config.stats_pids:
            out["pid"] = os.getpid()
        return out

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
        planned = R.plan(body.mode_settings(), list(range(len(body.documents))), body.top_n)
        slots = sum(max(len(c), 1) for c in planned)
        if slots > self.config.max_rerank_contexts:
            raise LimitError(f"this rerank would score {len(planned)} candidate contexts holding {slots} documents "
                             f"in all (candidates x documents); this service scores at most "
                             f"{self.config.max_rerank_contexts} per rerank ({option('max_rerank_contexts')})")
        _, scorer = self._utility(body)
        # checks, and the MiniLM relevance when none is given (model work: on the worker thread)
        rerank_plan = await self._on_worker(
            functools.partial(scorer.plan_rerank, body.query, A.plain_docs(body.documents), body.top_n,
                              body.threshold, settings=body.mode_settings(), relevance=body.relevance))
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
        # an item's budget: its answer, and one per document left out and per document alone
        costs = [(2 * len(docs) + 1) * body.max_new_tokens for _, docs, _ in items]
        result = await self._scheduler.submit(_Work(key, scorer, items, costs, body.return_ablations,
                                                   lambda sc, us, want: sc.score_batch(us, return_ablations=want)))
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
