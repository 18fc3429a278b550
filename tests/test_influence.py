"""Influence Score: hand-computed cosine arithmetic, and the batched scorer against a plain loop."""

from __future__ import annotations

import asyncio

import pytest
import torch

from grogu import Document
from grogu.metrics.influence import InfluenceScorer, influence_scores

QUERY = "Which river flows through Prague?"
DOCS = ["The Vltava flows through Prague.", "Prague is the Czech capital.", "Bananas are yellow."]


def test_influence_arithmetic_by_hand():
    full = torch.tensor([1.0, 0.0])
    loo = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # cos with full: 0, 1
    single = torch.tensor([[3.0, 0.0], [1.0, 1.0]])  # cos with full: 1, 1/sqrt(2)
    assert influence_scores(full, loo, single) == pytest.approx([1.0, 2**-0.5 - 1.0])


@pytest.fixture(scope="module")
def influence(tiny_engine):
    return InfluenceScorer(tiny_engine, max_new_tokens=8)


def _naive(scorer, query, docs, answer=None):
    """2k+1 generations one at a time, then the formula."""
    gen = lambda d: scorer.target.generate([scorer._prompt(query, d)], 8)[0].text  # noqa: E731
    docs = [Document(d) for d in docs]
    full = answer if answer is not None else gen(docs)
    loo = [gen(docs[:i] + docs[i + 1 :]) for i in range(len(docs))]
    single = [gen([d]) for d in docs]
    emb = lambda t: scorer.embedder.encode(t, convert_to_tensor=True)  # noqa: E731
    f = emb(full)
    cos = lambda a: float(torch.nn.functional.cosine_similarity(a, f, dim=0))  # noqa: E731
    return [cos(emb(s)) - cos(emb(l)) for s, l in zip(single, loo)], full, loo, single


def test_batched_equals_naive(influence):
    res = influence.score(QUERY, DOCS)
    scores, full, loo, single = _naive(influence, QUERY, DOCS)
    assert (res.answer, res.leave_one_out_answers, res.single_answers) == (full, loo, single)
    assert res.scores == pytest.approx(scores, abs=1e-4)
    assert all(-2 <= s <= 2 for s in res.scores)


def test_given_answer_and_k1(influence):
    res = influence.score(QUERY, DOCS[:1], answer="The Vltava.")
    scores, *_ = _naive(influence, QUERY, DOCS[:1], answer="The Vltava.")
    assert res.answer == "The Vltava." and res.scores == pytest.approx(scores, abs=1e-4)
    # k = 1: leave-one-out is the query alone
    assert (
        res.leave_one_out_answers[0] == influence.target.generate([influence.prompts.ungrounded_ids(QUERY)], 8)[0].text
    )


def test_batch_and_async(influence):
    items = [(QUERY, DOCS, None), ("Who is yellow?", DOCS[1:], "Bananas")]
    batch = influence.score_batch(items)

    async def main():
        return await asyncio.gather(*(influence.ascore(*it) for it in items))

    for b, a, it in zip(batch, asyncio.run(main()), items):
        single = influence.score(*it)
        assert b.single_answers == single.single_answers == a.single_answers
        assert b.scores == pytest.approx(single.scores, abs=1e-4)
        assert a.scores == pytest.approx(single.scores, abs=1e-4)


def test_bad_input(influence):
    assert influence.score(QUERY, []).scores == []
    with pytest.raises(ValueError):
        influence.score("", DOCS)
    with pytest.raises(TypeError):
        influence.score(QUERY, DOCS, answer=3)
    with pytest.raises(ValueError, match="sentence-transformers"):
        InfluenceScorer(influence.target, embedder="/no/such/embedder")
