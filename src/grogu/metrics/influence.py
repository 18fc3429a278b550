"""Influence Score (DocImpact): how much each document of a context shaped the answer.

With k documents, G(.) the greedy answer of the target LLM and F a sentence-embedding model:
IS_i = cos(F(G(i)), F(G(1..k))) - cos(F(G(1..k without i)), F(G(1..k))).
G(1..k) is the full-context answer, or the answer the pipeline actually gave when passed in; then
2k (else 2k + 1) generations: every leave-one-out and every single-document context, all in one
batched engine call. With k = 1 the leave-one-out context is empty: the query alone.
Higher = more influence; IS_i lies in [-2, 2].

For many documents (``method="ablation"``, or ``"auto"``) the scores are estimated as ContextCite
does (Cohen-Wang et al., 2024): m random ablations, each document kept with probability 1/2; target
y_j = cos(F(G(mask_j)), F(G(1..k))); a LASSO fit y ~ w_0 + sum_i w_i * mask_ij gives w_i, the expected
change of that similarity when document i is present. Cost: m generations (+1 for the full answer
when not given) instead of 2k + 1, and about m/(2k) of the exact score's prompt tokens. Were y exactly
linear in the mask, IS_i = y({i}) - y(all but i) = 2 w_i - sum_j w_j: the same ranking. The estimate
is on its own scale (w_i, sparse: many are 0) and only as good as y is linear in the documents kept.

Forward-only attribution (``method="leave_one_out_logprob"`` or ``"contextcite"``, see
:mod:`grogu.metrics.attribution`) generates nothing but the full-context answer when none is given: the answer
is teacher-forced under each ablated context and its log-probability compared; no embedder is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..core.checks import (
    MAX_ABLATIONS,
    check_choice,
    check_count,
    check_documents,
    check_influence_items,
    check_masks,
    check_positive_float,
    check_positive_int,
    check_query,
    check_seed,
)
from ..core.prompts import Document, PromptBuilder, PromptTemplate
from ..runtime.coalescer import Coalescer
from ..runtime.embedders import embedder_name, load_embedder
from ..runtime.engine import get_engine
from ..runtime.models import DEFAULT_MODEL
from . import attribution
from .attribution import AttributionRequest
from .defaults import FORWARD_METHODS, INFLUENCE_MAX_NEW_TOKENS, INFLUENCE_METHODS
from .results import Ablations, InfluenceResult  # noqa: F401 - this metric's results, defined without tensor code

#: ``method="auto"`` uses the ablation estimate above this many documents, when it also needs fewer
#: generations than the exact score (n_ablations < 2k + 1).
AUTO_ABLATION_ABOVE_K = 12
EMBEDDING_METHODS = ("exact", "ablation", "auto")
METHODS = INFLUENCE_METHODS
DEFAULT_MAX_NEW_TOKENS = INFLUENCE_MAX_NEW_TOKENS  #: the longest answer per context where none is given
#: m when n_ablations is not given: 32 for the embedding estimate, ContextCite's 64 for contextcite.
DEFAULT_ABLATIONS = {"ablation": 32, "auto": 32, "contextcite": attribution.CONTEXTCITE_ABLATIONS}


@dataclass
class InfluenceRequest:
    """One query to score, checked: its documents, the answer (None: generated from all the documents),
    whether to keep the ablations, and contextcite masks given by the caller (None: drawn)."""

    query: str
    documents: list[Document]
    answer: str | None
    return_ablations: bool = False
    masks: Any = None


def influence_scores(full: torch.Tensor, leave_one_out: torch.Tensor, single: torch.Tensor) -> list[float]:
    """IS_i from embeddings: full [d], leave_one_out [k, d], single [k, d] (any scale; cosines are used)."""
    full = torch.nn.functional.normalize(full.float(), dim=-1)
    loo = torch.nn.functional.normalize(leave_one_out.float(), dim=-1)
    one = torch.nn.functional.normalize(single.float(), dim=-1)
    return (one @ full - loo @ full).tolist()


def fit_ablation_surrogate(masks: Any, targets: Any, alpha: float = 0.01) -> tuple[list[float], float]:
    """Sparse linear surrogate y ~ w_0 + sum_i w_i * mask_i fitted by LASSO, as ContextCite does.

    masks: [m, k] (0/1 or bool; 1 = document kept), targets: [m] (here: cosine similarities).
    The masks are standardised before the fit (so ``alpha`` penalises every document alike, whatever
    its keep rate) and the weights mapped back to mask units. Returns (weights w_1..w_k, intercept w_0);
    a document kept in all ablations or in none gets weight 0.
    """
    from sklearn.linear_model import Lasso

    x = np.asarray(masks, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0] or x.shape[0] < 1:
        raise ValueError(f"masks must be [m, k] and targets [m] with m >= 1, got {x.shape} and {y.shape}")
    alpha = check_positive_float("alpha", alpha)
    if x.shape[1] == 0:
        return [], float(y.mean())
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    lasso = Lasso(alpha=alpha, fit_intercept=True, max_iter=100_000, tol=1e-8)
    lasso.fit((x - mean) / std, y)
    weights = lasso.coef_ / std
    return weights.tolist(), float(lasso.intercept_ - (mean * weights).sum())


class InfluenceScorer:
    """Influence Score of each document of a context for one target LLM.

    Args:
        model: a grogu Engine, a model name/path/hub id, or a loaded (model, tokenizer) pair.
        embedder: sentence-transformers model (default: the packaged all-MiniLM-L6-v2).
        max_new_tokens: longest answer generated per context (default 64).
        template: prompt text override (:class:`~grogu.core.prompts.PromptTemplate`).
        method: "exact" (2k + 1 generations), "ablation" (the ContextCite-style estimate from
            ``n_ablations`` random ablations) or "auto" (ablation when k > 12 and n_ablations < 2k + 1,
            so k >= 16 with the default m). Default "exact". Forward-only (no generation but the
            full-context answer when none is given, see :mod:`grogu.metrics.attribution`):
            "leave_one_out_logprob" (k + 1 forward passes) or "contextcite" (m forward passes + LASSO).
        n_ablations: m, the number of random ablations (default 32 for "ablation"/"auto": at k = 16
            that is about the exact cost, below it for larger k; 64 for "contextcite", ContextCite's).
        seed: seed of the ablation masks; each query draws them afresh from it, so a result does not
            depend on what else is in the batch. None: different masks every call. With "contextcite"
            the masks are ContextCite's own draw (seed 0: the masks ``ContextCiter`` uses).
        lasso_alpha: L1 penalty of the surrogate fit, on standardised masks (default 0.01, ContextCite's).
    """

    def __init__(
        self,
        model: Any = DEFAULT_MODEL,
        *,
        embedder: Any = "all-minilm-l6-v2",
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        template: PromptTemplate | None = None,
        device: str | None = None,
        dtype: str | None = None,
        method: str = "exact",
        n_ablations: int | None = None,
        seed: int | None = 0,
        lasso_alpha: float = 0.01,
    ) -> None:
        max_new_tokens = check_positive_int("max_new_tokens", max_new_tokens)
        method = check_choice("method", method, METHODS)
        if n_ablations is None:
            n_ablations = DEFAULT_ABLATIONS.get(method, 32)
        n_ablations = check_count("n_ablations", n_ablations, MAX_ABLATIONS)
        seed = check_seed(seed)
        if method == "contextcite" and seed is not None:
            attribution.contextcite_masks(0, n_ablations, seed)  # the seed range check
        lasso_alpha = check_positive_float("lasso_alpha", lasso_alpha)
        self.method, self.n_ablations, self.seed, self.lasso_alpha = method, n_ablations, seed, float(lasso_alpha)
        self.target = get_engine(model, device=device, dtype=dtype)
        if method in FORWARD_METHODS:
            self.target.require_teacher_forcing(f"forward-only attribution (method={method!r})")
        self._embedder_spec, self._device, self._embedder = embedder, device, None
        if method in EMBEDDING_METHODS:  # forward-only methods load it only when asked for
            self._embedder = load_embedder(embedder, device=device)
        self.embedder_name = embedder if isinstance(embedder, str) else embedder_name(embedder)
        self.max_new_tokens = max_new_tokens
        self.prompts = PromptBuilder.for_target(self.target, max_new_tokens, template)
        self._coalescer = Coalescer(self._run_requests)

    @property
    def embedder(self):
        """The sentence-transformers model F (loaded on first use with a forward-only method)."""
        if self._embedder is None:
            self._embedder = load_embedder(self._embedder_spec, device=self._device)
        return self._embedder

    @property
    def forward_only(self) -> bool:
        return self.method in FORWARD_METHODS

    def _prompt(self, query: str, docs: list[Document]) -> list[int]:
        return self.prompts.grounded_ids(query, docs) if docs else self.prompts.ungrounded_ids(query)

    def method_for(self, k: int) -> str:
        """The method used for k documents: "exact" or "ablation" (exact for k = 0: nothing to estimate),
        or the forward-only method the scorer was made with."""
        if self.forward_only:
            return self.method
        if k == 0:
            return "exact"
        if self.method == "auto":
            return "ablation" if k > AUTO_ABLATION_ABOVE_K and self.n_ablations < 2 * k + 1 else "exact"
        return self.method

    def ablation_masks(self, k: int) -> np.ndarray:
        """[n_ablations, k] bool: each document kept with probability 1/2, drawn from ``seed``."""
        return np.random.default_rng(self.seed).random((self.n_ablations, k)) < 0.5

    def _run_requests(self, requests: list[InfluenceRequest]) -> list[InfluenceResult]:
        """Many requests' engine work in one call (the coalescer's function: concurrent async calls too)."""
        return self._run_forward(requests) if self.forward_only else self._run_generative(requests)

    def _target(self, answer: str) -> list[int]:
        """A given answer's tokens plus the end-of-turn token (the tokenizer's EOS when it is a stop
        token, else the first stop token)."""
        eos = self.target.tokenizer.eos_token_id
        eot = eos if eos in self.target.stop_token_ids else self.target.stop_token_ids[0]
        return self.target.encode(answer) + [int(eot)]

    def _run_forward(self, requests: list[InfluenceRequest]) -> list[InfluenceResult]:
        """Forward-only attribution of many requests: one generation call for the answers not given, one
        teacher-forced call for every context."""
        todo = [i for i, r in enumerate(requests) if r.answer is None]
        gens = (
            dict(
                zip(
                    todo,
                    self.target.generate(
                        [self._prompt(requests[i].query, requests[i].documents) for i in todo], self.max_new_tokens
                    ),
                )
            )
            if todo
            else {}
        )
        answers, attributed = [], []
        for i, r in enumerate(requests):
            answer = r.answer
            if i in gens:
                g = gens[i]
                answer, target = g.text, g.token_ids + ([g.stop_token_id] if g.finished else [])
            else:
                target = self._target(answer)
            answers.append(answer)
            if r.documents:
                attributed.append(AttributionRequest(r.query, r.documents, target, r.masks))
        seed = self.seed if self.seed is not None else int(np.random.SeedSequence().entropy % 2**31)
        done = iter(
            attribution.attribute(
                self.target,
                self._prompt,
                attributed,
                self.method,
                n_ablations=self.n_ablations,
                seed=seed,
                alpha=self.lasso_alpha,
            )
        )
        out = []
        for r, answer in zip(requests, answers):
            scores, data = next(done) if r.documents else ([], None)
            out.append(
                InfluenceResult(
                    scores=scores,
                    answer=answer,
                    leave_one_out_answers=[],
                    single_answers=[],
                    model=str(self.target.model_name),
                    embedder=None,
                    method=self.method,
                    forward=data,
                )
            )
        return out

    def _run_generative(self, requests: list[InfluenceRequest]) -> list[InfluenceResult]:
        """All generations of many requests in one engine call, and one embedding call."""
        plans = []  # per request: (method, masks or None)
        prompts: list[list[int]] = []
        for r in requests:
            query, docs, answer = r.query, r.documents, r.answer
            k = len(docs)
            method, masks = self.method_for(k), None
            if method == "exact":
                contexts = [docs[:i] + docs[i + 1 :] for i in range(k)] + [[d] for d in docs]
            else:
                masks = self.ablation_masks(k)
                contexts = [[d for d, keep in zip(docs, row) if keep] for row in masks]
            if answer is None:
                contexts = [docs] + contexts
            prompts += [self._prompt(query, c) for c in contexts]
            plans.append((method, masks))
        texts = iter(g.text for g in self.target.generate(prompts, self.max_new_tokens))
        answers = []  # per request: [full, *generated answers]
        for r, (method, masks) in zip(requests, plans):
            full = r.answer if r.answer is not None else next(texts)
            n = 2 * len(r.documents) if method == "exact" else len(masks)
            answers.append([full] + [next(texts) for _ in range(n)])
        flat = [t for block in answers for t in block]
        emb = self.embedder.encode(flat, convert_to_tensor=True, show_progress_bar=False).cpu() if flat else None
        out, start = [], 0
        for r, (method, masks), block_texts in zip(requests, plans, answers):
            k, full, rest = len(r.documents), block_texts[0], block_texts[1:]
            block = emb[start : start + len(block_texts)]
            start += len(block_texts)
            common = dict(answer=full, model=str(self.target.model_name), embedder=str(self.embedder_name))
            if method == "exact":
                out.append(
                    InfluenceResult(
                        scores=influence_scores(block[0], block[1 : 1 + k], block[1 + k :]),
                        leave_one_out_answers=rest[:k],
                        single_answers=rest[k:],
                        **common,
                    )
                )
                continue
            normed = torch.nn.functional.normalize(block.float(), dim=-1)
            sims = (normed[1:] @ normed[0]).tolist()
            weights, intercept = fit_ablation_surrogate(masks, sims, self.lasso_alpha)
            ablations = (
                Ablations(masks=masks.tolist(), similarities=sims, answers=rest, intercept=intercept)
                if r.return_ablations
                else None
            )
            out.append(
                InfluenceResult(
                    scores=weights,
                    leave_one_out_answers=[],
                    single_answers=[],
                    method="ablation",
                    ablations=ablations,
                    **common,
                )
            )
        return out

    def _request(
        self,
        query: str,
        documents: Sequence[Any],
        answer: str | None,
        return_ablations: bool = False,
        masks: Any = None,
    ) -> InfluenceRequest:
        query, docs = check_query(query), check_documents(documents)
        if answer is not None and not isinstance(answer, str):
            raise TypeError(f"answer must be a str or None, got {type(answer).__name__}")
        if masks is not None:
            if self.method != "contextcite":
                raise ValueError(
                    f"masks are taken by method='contextcite' only, this scorer's method is {self.method!r}"
                )
            masks = check_masks(masks, len(docs))
        return InfluenceRequest(query, docs, answer, bool(return_ablations), masks)

    def score(
        self,
        query: str,
        documents: Sequence[Any],
        answer: str | None = None,
        *,
        return_ablations: bool = False,
        masks: Any = None,
    ) -> InfluenceResult:
        """Influence Score of each document for the answer to ``query`` (generated from all documents
        when ``answer`` is None). No documents give an empty result. With the ablation method,
        ``return_ablations=True`` keeps the masks, similarities and answers in ``result.ablations``.
        With method "contextcite", ``masks`` ([m, k] bools, True = document kept) replaces the drawn
        masks (e.g. to compare with another implementation on the same ablations)."""
        return self._run_requests([self._request(query, documents, answer, return_ablations, masks)])[0]

    def score_batch(
        self, items: Sequence[tuple[str, Sequence[Any], str | None]], *, return_ablations: bool = False
    ) -> list[InfluenceResult]:
        """Influence Scores of many (query, documents, answer-or-None) triples in one engine call (a
        (query, documents) pair means answer=None)."""
        return self._run_requests(
            [self._request(*item, return_ablations=return_ablations) for item in check_influence_items(items)]
        )

    async def ascore(
        self, query: str, documents: Sequence[Any], answer: str | None = None, *, return_ablations: bool = False
    ) -> InfluenceResult:
        """Async :meth:`score`: runs off the event loop, batched with concurrent requests."""
        return (await self._coalescer.run([self._request(query, documents, answer, return_ablations)]))[0]
