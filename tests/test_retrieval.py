"""grogu.rerank.retrieval: the one BM25 (bm25s index, BM25Okapi scores) checked against rank_bm25 on real SQuAD
paragraphs and against the formula by hand; the tokenizer; the missing-extra error."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from grogu_research import testing

from grogu.rerank.retrieval import BM25Retriever, bm25_tokenize
from grogu.rerank.selection import order_by as ranked


@pytest.fixture(scope="module")
def squad():
    return testing.with_shared_data(testing.squad_paragraphs, 200, seed=0)


def test_tokenizer():
    assert bm25_tokenize("Who wrote HAMLET? It's 1600-ish.") == ["who", "wrote", "hamlet", "it", "s", "1600", "ish"]
    assert bm25_tokenize("  ...  ") == []


def test_bm25_scores_are_rank_bm25_okapi_on_squad(squad):
    rank_bm25 = pytest.importorskip("rank_bm25")
    texts = [p["text"] for p in squad]
    ours = BM25Retriever(texts)
    ref = rank_bm25.BM25Okapi([bm25_tokenize(t) for t in texts])  # k1 = 1.5, b = 0.75, epsilon = 0.25
    queries = [p["question"] for p in squad] + ["the of and", "zzzz unknown words", ""]
    for q in queries:
        expected = np.asarray(ref.get_scores(bm25_tokenize(q)), dtype=np.float64)
        got = ours.scores(q)
        assert np.array_equal(got, expected), q  # the same floating-point operations: equal to the bit
        assert ranked(got) == ranked(expected)
    q = squad[0]["question"]
    assert ours.retrieve(q, 5) == [texts[i] for i in ranked(ref.get_scores(bm25_tokenize(q)))[:5]]
    assert ours.score_ids(q, [3, 1]) == list(ref.get_batch_scores(bm25_tokenize(q), [3, 1]))


@pytest.mark.slow
def test_bm25s_own_robertson_variant_differs_only_on_terms_in_most_paragraphs(squad):
    """What the BM25Retriever docstring says of bm25s's variants: "robertson" is BM25Okapi but for the
    (k1 + 1) factor and for terms in more than half of the paragraphs, which it weighs 0."""
    import bm25s

    texts = [p["text"] for p in squad]
    tokens = [bm25_tokenize(t) for t in texts]
    common = {w for w in set().union(*map(set, tokens)) if sum(w in set(d) for d in tokens) > len(tokens) / 2}
    assert {"the", "of", "and"} <= common
    native = bm25s.BM25(k1=1.5, b=0.75, method="robertson", dtype="float64")
    native.index(tokens, show_progress=False)
    ours = BM25Retriever(texts)
    differ = 0
    for p in squad:
        words = bm25_tokenize(p["question"])
        rare = " ".join(w for w in words if w not in common)
        ids = native.get_tokens_ids(words)
        theirs = 2.5 * native.get_scores_from_ids(ids) if ids else np.zeros(len(texts))
        assert np.allclose(theirs, ours.scores(rare), rtol=1e-12, atol=1e-12)
        differ += not np.allclose(theirs, ours.scores(p["question"]))
    assert differ > 100  # most SQuAD questions hold "the", "of" or "in"


def test_bm25_by_hand():
    texts = ["a cat sat", "a dog", "cat cat cat dog bird"]
    bm25 = BM25Retriever(texts, k1=1.2, b=0.5)
    n, avgdl = 3, (3 + 2 + 5) / 3

    def term(df, tf, dl):
        idf = math.log(n - df + 0.5) - math.log(df + 0.5)
        return idf * tf * 2.2 / (tf + 1.2 * (1 - 0.5 + 0.5 * dl / avgdl))

    # "cat" is in 2 of 3 passages: idf < 0, floored at 0.25 x the mean idf of the vocabulary
    idfs = {
        w: math.log(n - df + 0.5) - math.log(df + 0.5)
        for w, df in {"a": 2, "cat": 2, "sat": 1, "dog": 2, "bird": 1}.items()
    }
    floor = 0.25 * sum(idfs.values()) / len(idfs)
    cat = [floor * tf * 2.2 / (tf + 1.2 * (1 - 0.5 + 0.5 * dl / avgdl)) for tf, dl in ((1, 3), (0, 2), (3, 5))]
    assert bm25.scores("cat bird") == pytest.approx([cat[0], 0.0, cat[2] + term(1, 1, 5)], rel=1e-12)
    assert bm25.scores("sat sat")[0] == pytest.approx(2 * term(1, 1, 3), rel=1e-12)  # a repeated token counts again
    assert bm25.retrieve("bird", 2) == [texts[2], texts[0]]  # ties (0.0) keep corpus order
    assert list(bm25.scores("unknown")) == [0.0, 0.0, 0.0]


def test_bm25_bad_input():
    with pytest.raises(ValueError, match="corpus is empty"):
        BM25Retriever([])
    with pytest.raises(ValueError, match="no word tokens"):
        BM25Retriever(["", " ?! "])
    with pytest.raises(TypeError, match="passage 1"):
        BM25Retriever(["ok", 3])
    with pytest.raises(ValueError, match="k must be a positive int"):
        BM25Retriever(["ok"]).retrieve("ok", 0)


def test_missing_eval_extra_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "bm25s", None)  # what an install without the eval extra sees
    with pytest.raises(ImportError, match=r'BM25 retrieval needs .*bm25s.*pip install "grogu\[eval\]"'):
        BM25Retriever(["a passage"])
