"""Influence Score by random ablations + LASSO (ContextCite-style): the fit by hand, and the scorer's
ablation path on a tiny model (generation count, seed, masks, bad input)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from grogu import Document
from grogu.metrics.influence import AUTO_ABLATION_ABOVE_K, InfluenceScorer, fit_ablation_surrogate

QUERY = "Which river flows through Prague?"
DOCS = [
    "The Vltava flows through Prague.",
    "Prague is the Czech capital.",
    "Bananas are yellow.",
    "The Danube flows through Vienna.",
    "Rivers carry water to the sea.",
]


# --- the surrogate fit ---------------------------------------------------------------------------


def test_fit_by_hand_full_factorial():
    # 2 documents, all 4 masks, y = 1 + 2 a - b. The centred, standardised masks are orthonormal
    # (Z'Z/m = I), so LASSO soft-thresholds the least-squares coefficients in standardised units:
    # b = (2 * 0.5, -1 * 0.5) -> (1 - 0.1, -0.5 + 0.1) at alpha 0.1; back in mask units (std 0.5):
    # w = (1.8, -0.8); intercept = mean(y) - 0.5 * (1.8 - 0.8) = 1.5 - 0.5 = 1.0.
    masks = [[0, 0], [1, 0], [0, 1], [1, 1]]
    y = [1.0, 3.0, 0.0, 2.0]
    w, w0 = fit_ablation_surrogate(masks, y, alpha=0.1)
    assert w == pytest.approx([1.8, -0.8], abs=1e-6) and w0 == pytest.approx(1.0, abs=1e-6)
    # a penalty larger than every coefficient leaves the mean alone
    w, w0 = fit_ablation_surrogate(masks, y, alpha=5.0)
    assert w == [0.0, 0.0] and w0 == pytest.approx(1.5)


def test_fit_recovers_linear_and_sparse_weights():
    rng = np.random.default_rng(0)
    masks = rng.random((128, 12)) < 0.5
    true = np.array([0.6, -0.4, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 0.15, 0.0, 0.0, 0.0])
    y = 0.25 + masks @ true
    w, w0 = fit_ablation_surrogate(masks, y, alpha=1e-6)  # noise-free: exact recovery
    assert w == pytest.approx(true.tolist(), abs=1e-4) and w0 == pytest.approx(0.25, abs=1e-4)
    w, w0 = fit_ablation_surrogate(masks, y + rng.normal(0, 0.01, len(y)))  # default alpha 0.01, noise
    w = np.array(w)
    assert np.all(np.abs(w[true == 0]) < 0.01)  # sparse: zero weights stay ~0
    assert np.all(np.abs(w[true != 0] - true[true != 0]) < 0.05)  # shrunk by about alpha / 0.5
    assert np.argsort(-w)[:2].tolist() == [0, 4]


def test_fit_degenerate_and_bad_input():
    # a document kept in every ablation (or none) cannot be told apart from the intercept: weight 0
    w, w0 = fit_ablation_surrogate([[1, 0], [1, 1]], [0.2, 0.8], alpha=1e-6)
    assert w[0] == 0.0 and w[1] == pytest.approx(0.6, abs=1e-4) and w0 == pytest.approx(0.2, abs=1e-4)
    assert fit_ablation_surrogate([[1, 0, 1]], [0.5]) == ([0.0, 0.0, 0.0], 0.5)  # m = 1
    with pytest.raises(ValueError):
        fit_ablation_surrogate([[1, 0]], [0.5, 0.4])
    with pytest.raises(ValueError):
        fit_ablation_surrogate([[1, 0]], [0.5], alpha=0.0)


# --- the scorer ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exact(tiny_engine):
    return InfluenceScorer(tiny_engine, max_new_tokens=8)


def _scorer(exact, **kw):
    kw.setdefault("method", "ablation")
    return InfluenceScorer(exact.target, embedder=exact.embedder, max_new_tokens=8, **kw)


@pytest.fixture
def rows(monkeypatch, tiny_engine):
    """Counts engine.generate calls and the prompts (generations) in each."""
    calls: list[int] = []
    generate = tiny_engine.generate

    def counting(prompts, *args, **kwargs):
        calls.append(len(prompts))
        return generate(prompts, *args, **kwargs)

    monkeypatch.setattr(tiny_engine, "generate", counting)
    return calls


def test_ablation_costs_m_generations_in_one_call(exact, rows):
    scorer = _scorer(exact, n_ablations=7)
    res = scorer.score(QUERY, DOCS, answer="The Vltava.")
    assert rows == [7] and res.method == "ablation" and len(res.scores) == len(DOCS)
    assert res.leave_one_out_answers == [] and res.single_answers == [] and res.ablations is None
    rows.clear()
    res = scorer.score(QUERY, DOCS)  # + 1: the full-context answer
    assert rows == [8] and len(res.scores) == len(DOCS)
    rows.clear()
    exact.score(QUERY, DOCS)  # the exact path is unchanged: 2k + 1
    assert rows == [2 * len(DOCS) + 1]


def test_ablation_data_and_masks(exact):
    scorer = _scorer(exact, n_ablations=12, seed=3)
    res = scorer.score(QUERY, DOCS[:2], return_ablations=True)
    ab = res.ablations
    assert np.array(ab.masks).shape == (12, 2) and len(ab.similarities) == len(ab.answers) == 12
    assert ab.masks == scorer.ablation_masks(2).tolist()
    # the scores are the surrogate fitted to the reported data
    w, w0 = fit_ablation_surrogate(ab.masks, ab.similarities, scorer.lasso_alpha)
    assert res.scores == pytest.approx(w, abs=1e-6) and ab.intercept == pytest.approx(w0, abs=1e-6)
    # each ablation's answer is the one-at-a-time answer of its masked context; empty = query alone
    docs = [Document(d) for d in DOCS[:2]]
    one = lambda ctx: exact.target.generate([exact._prompt(QUERY, ctx)], 8)[0].text  # noqa: E731
    assert [False, False] in ab.masks, "seed 3 should draw an empty mask"
    for mask, answer in zip(ab.masks[:4], ab.answers[:4]):
        assert answer == one([d for d, keep in zip(docs, mask) if keep])
    assert ab.answers[ab.masks.index([False, False])] == one([])
    # similarity j = cos(F(G(mask_j)), F(G(full)))
    emb = exact.embedder.encode([res.answer, *ab.answers], convert_to_tensor=True).cpu()
    sims = torch.nn.functional.cosine_similarity(emb[1:], emb[:1]).tolist()
    assert ab.similarities == pytest.approx(sims, abs=1e-4)
    assert all(-2 <= s <= 2 for s in res.scores)


def test_seed_reproducible(exact):
    a = _scorer(exact, n_ablations=6, seed=11).score(QUERY, DOCS, return_ablations=True)
    b = _scorer(exact, n_ablations=6, seed=11).score(QUERY, DOCS, return_ablations=True)
    c = _scorer(exact, n_ablations=6, seed=12).score(QUERY, DOCS, return_ablations=True)
    assert a.scores == b.scores and a.ablations.masks == b.ablations.masks
    assert a.ablations.masks != c.ablations.masks
    # seed=None: fresh masks each call
    free = _scorer(exact, n_ablations=6, seed=None)
    assert not np.array_equal(free.ablation_masks(5), free.ablation_masks(5))


def test_auto_batch_and_async(exact):
    auto = _scorer(exact, method="auto", n_ablations=4)
    assert (
        auto.method_for(AUTO_ABLATION_ABOVE_K) == "exact" and auto.method_for(AUTO_ABLATION_ABOVE_K + 1) == "ablation"
    )
    default_m = _scorer(exact, method="auto")  # m = 32: ablation only once it is cheaper (2k + 1 > 32)
    assert [default_m.method_for(k) for k in (13, 15, 16, 40)] == ["exact", "exact", "ablation", "ablation"]
    many = [f"Document number {i} about rivers." for i in range(AUTO_ABLATION_ABOVE_K + 1)]
    items = [(QUERY, many, "The Vltava."), (QUERY, DOCS[:2], None), (QUERY, [], None)]
    batch = auto.score_batch(items)
    assert [r.method for r in batch] == ["ablation", "exact", "exact"]
    assert [len(r.scores) for r in batch] == [len(many), 2, 0]

    async def main():
        return await asyncio.gather(*(auto.ascore(*it) for it in items))

    for b, a in zip(batch, asyncio.run(main())):
        assert a.method == b.method and a.scores == pytest.approx(b.scores, abs=1e-4)


def test_bad_input(exact):
    for m in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_ablations"):
            _scorer(exact, n_ablations=m)
    with pytest.raises(ValueError, match="method"):
        _scorer(exact, method="sampled")
    with pytest.raises(ValueError, match="lasso_alpha"):
        _scorer(exact, lasso_alpha=0)
    with pytest.raises(TypeError, match="seed"):
        _scorer(exact, seed="0")
    res = _scorer(exact).score(QUERY, [])
    assert res.scores == [] and res.method == "exact"
