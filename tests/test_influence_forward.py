"""Forward-only attribution (leave_one_out_logprob, contextcite): the pure parts by hand, the scorer
against one-at-a-time plain transformers forward passes on a tiny real model, and ContextCite's
solver re-implemented directly on the same masks."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch
from grogu_research import testing

from grogu import Document, Engine
from grogu.metrics.attribution import contextcite_masks, fit_contextcite, leave_one_out_drops, logit_probability
from grogu.metrics.influence import InfluenceScorer

QUERY = "Which river flows through Prague?"
DOCS = [
    "The Vltava flows through Prague.",
    "Prague is the Czech capital.",
    "Bananas are yellow.",
    "The Danube flows through Vienna.",
]
ANSWER = "The Vltava."


# --- pure parts, by hand --------------------------------------------------------------------------


def test_logit_probability_by_hand():
    assert logit_probability(math.log(0.5)) == pytest.approx(0.0, abs=1e-12)
    assert logit_probability(math.log(0.2)) == pytest.approx(math.log(0.25), abs=1e-12)
    assert logit_probability(-50.0) == pytest.approx(-50.0, abs=1e-12)  # tiny P: logit = log P
    assert math.isfinite(logit_probability(0.0)) and logit_probability(0.0) > 700  # P = 1: floored
    for bad in (float("nan"), 0.1):
        with pytest.raises(ValueError, match="log-probability"):
            logit_probability(bad)


def test_leave_one_out_drops_by_hand():
    assert leave_one_out_drops(-3.0, [-5.0, -2.5, -3.0]) == [2.0, -0.5, 0.0]


def test_contextcite_masks_are_contextcites_draw():
    masks = contextcite_masks(7, 5, seed=3)
    assert masks.shape == (5, 7) and masks.dtype == bool
    for j in range(5):  # ContextCite's _create_mask(num_sources, alpha=0.5, seed=j + base_seed)
        expected = np.random.RandomState(3 + j).choice([False, True], size=7, p=[0.5, 0.5])
        assert masks[j].tolist() == expected.tolist()
    assert 0.3 < contextcite_masks(20, 64, 0).mean() < 0.7
    with pytest.raises(ValueError, match="n_ablations"):
        contextcite_masks(3, 0)
    with pytest.raises(ValueError, match="seed"):
        contextcite_masks(3, 4, seed=-1)


def test_fit_contextcite_by_hand():
    # y = n * (0.5 + a - 0.5 b) over all four masks of two documents, n = 2 answer tokens. ContextCite
    # fits y / n on standardised masks (std 0.5, orthonormal columns), so LASSO soft-thresholds the
    # least-squares coefficients (0.5, -0.25) by alpha 0.1 -> (0.4, -0.15); back in mask units
    # (/ 0.5) and times n: w = (1.6, -0.6); bias = n * (mean(y / n) - 0.5 * (0.8 - 0.3)) = 2 * 0.5.
    masks = [[0, 0], [1, 0], [0, 1], [1, 1]]
    y = [1.0, 3.0, 0.0, 2.0]
    w, b = fit_contextcite(masks, y, num_output_tokens=2, alpha=0.1)
    assert w == pytest.approx([1.6, -0.6], abs=1e-6) and b == pytest.approx(1.0, abs=1e-6)
    w1, _ = fit_contextcite(masks, y, num_output_tokens=1, alpha=0.1)  # the division by n matters
    assert w1 == pytest.approx([1.8, -0.8], abs=1e-6)


def test_fit_contextcite_bad_input():
    with pytest.raises(ValueError, match="masks"):
        fit_contextcite([[0, 1], [1]], [0.0, 1.0], 1)
    with pytest.raises(ValueError, match="masks"):
        fit_contextcite([[0, float("nan")]], [0.0], 1)
    with pytest.raises(ValueError, match="masks"):
        fit_contextcite([[0, 2]], [0.0], 1)
    with pytest.raises(ValueError, match="targets"):
        fit_contextcite([[0, 1], [1, 0]], [0.0, float("nan")], 1)
    with pytest.raises(ValueError, match="targets"):
        fit_contextcite([[0, 1], [1, 0]], [0.0], 1)
    with pytest.raises(ValueError, match="num_output_tokens"):
        fit_contextcite([[0, 1], [1, 0]], [0.0, 1.0], 0)


def contextcite_solver(masks, outputs, num_output_tokens, alpha=0.01):
    """ContextCite 0.0.4's ``LassoRegression.fit``, written out as it is there."""
    from sklearn.linear_model import Lasso
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x = np.asarray(masks).astype(np.float32)
    y = np.asarray(outputs) / num_output_tokens
    scaler, lasso = StandardScaler(), Lasso(alpha=alpha, random_state=0, fit_intercept=True)
    make_pipeline(scaler, lasso).fit(x, y)
    weight = lasso.coef_ / scaler.scale_
    bias = lasso.intercept_ - (scaler.mean_ / scaler.scale_) @ lasso.coef_.T
    return weight * num_output_tokens, bias * num_output_tokens


# --- the scorer on a tiny real model --------------------------------------------------------------


@pytest.fixture(scope="module")
def loo(tiny_engine):
    return InfluenceScorer(tiny_engine, method="leave_one_out_logprob", max_new_tokens=8)


@pytest.fixture(scope="module")
def cc(tiny_engine):
    return InfluenceScorer(tiny_engine, method="contextcite", max_new_tokens=8)


def plain_logprob(engine, prompt: list[int], target: list[int]) -> float:
    """log P(target | prompt) from one plain transformers forward pass of prompt + target (nats)."""
    ids = torch.tensor([prompt + target])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0].double()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return float(logp.gather(1, torch.tensor(target)[:, None]).sum())


def one_at_a_time(scorer, query, docs, masks, target):
    docs = [Document(d) for d in docs]
    return [
        plain_logprob(scorer.target, scorer._prompt(query, [d for d, k in zip(docs, row) if k]), target)
        for row in masks
    ]


def test_leave_one_out_logprob_equals_one_at_a_time(loo):
    res = loo.score(QUERY, DOCS, answer=ANSWER)
    target = loo.target.encode(ANSWER) + [loo.target.tokenizer.eos_token_id]
    assert res.method == "leave_one_out_logprob" and res.answer == ANSWER and res.embedder is None
    assert res.forward.target_token_ids == target
    masks = [[True] * 4] + [[j != i for j in range(4)] for i in range(4)]
    assert res.forward.masks == masks
    lps = one_at_a_time(loo, QUERY, DOCS, masks, target)
    assert res.forward.logprobs == pytest.approx(lps, abs=1e-4)
    assert res.scores == pytest.approx([lps[0] - x for x in lps[1:]], abs=1e-4)
    assert max(map(abs, res.scores)) > 0.1  # the documents do move the answer's probability


def test_leave_one_out_logprob_by_hand_on_a_uniform_model(tokenizer):
    # every weight of the output layer zero: all logits 0, every token has p = 1 / V under any context,
    # so log P(answer + end-of-turn) = -n ln V and removing a document changes nothing
    model = testing.tiny_model("llama")
    torch.nn.init.zeros_(model.lm_head.weight)
    engine = Engine(model, tokenizer, device="cpu")
    for method in ("leave_one_out_logprob", "contextcite"):
        res = InfluenceScorer(engine, method=method, max_new_tokens=8).score(QUERY, DOCS[:3], answer=ANSWER)
        n = len(engine.encode(ANSWER)) + 1
        expected = -n * math.log(engine.vocab_size)
        assert res.forward.logprobs == pytest.approx([expected] * len(res.forward.masks), abs=1e-4)
        assert res.scores == pytest.approx([0.0, 0.0, 0.0], abs=1e-6)
        if method == "contextcite":  # constant target: the bias is the logit of P = V^-n (= log P here)
            assert res.forward.intercept == pytest.approx(expected, abs=1e-4)


def test_one_token_answer_by_hand(loo):
    # a one-token target (the end-of-turn token of an empty answer): log P = logit_t - logsumexp(logits)
    eot = loo.target.tokenizer.eos_token_id
    res = loo.score(QUERY, DOCS[:2], answer="")
    assert res.forward.target_token_ids == [eot]
    for row, lp in zip(res.forward.masks, res.forward.logprobs):
        prompt = loo._prompt(QUERY, [Document(d) for d, k in zip(DOCS[:2], row) if k])
        with torch.no_grad():
            logits = loo.target.model(input_ids=torch.tensor([prompt])).logits[0, -1].double()
        hand = float(logits[eot]) - math.log(sum(math.exp(float(v)) for v in logits))
        assert lp == pytest.approx(hand, abs=1e-4)


def test_contextcite_equals_direct_reimplementation(cc):
    masks = np.array(
        [
            [1, 0, 1, 1],
            [0, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [1, 1, 1, 1],
            [0, 0, 1, 1],
            [1, 0, 0, 1],
            [0, 1, 0, 1],
            [1, 0, 1, 0],
            [0, 1, 1, 1],
        ],
        dtype=bool,
    )
    res = cc.score(QUERY, DOCS, answer=ANSWER, masks=masks)
    target = cc.target.encode(ANSWER) + [cc.target.tokenizer.eos_token_id]
    assert res.method == "contextcite" and res.forward.masks == masks.tolist()
    lps = one_at_a_time(cc, QUERY, DOCS, masks, target)  # the empty mask: the query alone
    assert res.forward.logprobs == pytest.approx(lps, abs=1e-4)
    logits = [lp - math.log(-math.expm1(lp)) for lp in lps]
    assert res.forward.targets == pytest.approx(logits, abs=1e-4)
    weights, bias = contextcite_solver(masks, np.array(logits), len(target))
    assert res.scores == pytest.approx(weights.tolist(), abs=1e-4)
    assert res.forward.intercept == pytest.approx(float(bias), abs=1e-4)
    assert max(map(abs, res.scores)) > 0.1


def test_contextcite_default_masks_seed_and_generated_answer(cc):
    res = cc.score(QUERY, DOCS)
    assert cc.n_ablations == 64 and res.forward.masks == contextcite_masks(4, 64, 0).tolist()
    gen = cc.target.generate([cc._prompt(QUERY, [Document(d) for d in DOCS])], 8)[0]
    assert res.answer == gen.text
    assert res.forward.target_token_ids == gen.token_ids + ([gen.stop_token_id] if gen.finished else [])
    other = InfluenceScorer(cc.target, method="contextcite", max_new_tokens=8, seed=5, n_ablations=16)
    r5 = other.score(QUERY, DOCS)
    assert r5.forward.masks == contextcite_masks(4, 16, 5).tolist() and r5.scores != res.scores
    assert other.score(QUERY, DOCS).scores == r5.scores  # same seed, same result


def test_forward_only_generates_nothing_for_a_given_answer(loo, cc, monkeypatch):
    calls = {"generate": [], "token_stats": []}
    for name in calls:
        real = getattr(loo.target, name)
        monkeypatch.setattr(
            loo.target, name, lambda *a, _real=real, _n=name, **kw: calls[_n].append(len(a[0])) or _real(*a, **kw)
        )
    loo.score(QUERY, DOCS, answer=ANSWER)
    cc.score(QUERY, DOCS, answer=ANSWER)
    assert calls == {"generate": [], "token_stats": [len(DOCS) + 1, 64]}
    loo.score(QUERY, DOCS)  # no answer: one generation, the full context's
    assert calls["generate"] == [1]
    assert loo._embedder is None and cc._embedder is None  # no embedder loaded


def test_batch_async_and_empty(loo, cc):
    items = [(QUERY, DOCS, ANSWER), ("Who is yellow?", DOCS[1:3], None), (QUERY, [], ANSWER)]
    for scorer in (loo, cc):
        batch = scorer.score_batch(items)

        async def main():
            return await asyncio.gather(*(scorer.ascore(*it) for it in items))

        for b, a, it in zip(batch, asyncio.run(main()), items):
            one = scorer.score(*it)
            assert b.answer == a.answer == one.answer and b.method == scorer.method
            assert b.scores == pytest.approx(one.scores, abs=1e-4) and a.scores == pytest.approx(one.scores, abs=1e-4)
        assert batch[2].scores == [] and batch[2].forward is None


def test_bad_input(loo, cc):
    with pytest.raises(ValueError, match="masks"):
        cc.score(QUERY, DOCS, answer=ANSWER, masks=[[1, 0, 1]])  # 3 columns for 4 documents
    with pytest.raises(ValueError, match="masks"):
        cc.score(QUERY, DOCS, answer=ANSWER, masks=np.full((3, 4), np.nan))
    with pytest.raises(ValueError, match="masks"):
        cc.score(QUERY, DOCS, answer=ANSWER, masks=np.zeros((0, 4)))
    with pytest.raises(ValueError, match="contextcite"):
        loo.score(QUERY, DOCS, answer=ANSWER, masks=np.ones((2, 4)))
    for m in (0, -3, 2.5, True, float("nan")):
        with pytest.raises(ValueError, match="n_ablations"):
            InfluenceScorer(cc.target, method="contextcite", n_ablations=m)
    with pytest.raises(ValueError, match="seed"):
        InfluenceScorer(cc.target, method="contextcite", seed=-1)
    with pytest.raises(ValueError, match="method"):
        InfluenceScorer(cc.target, method="loo")
    with pytest.raises(TypeError, match="answer"):
        loo.score(QUERY, DOCS, answer=1)
