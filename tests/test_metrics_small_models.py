"""Small-model utility variants (issue #8): building blocks and metrics against hand-computed values,
and the scorer's short-answer style on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from grogu import UtilityScorer, metrics
from grogu.core.prompts import SHORT_ANSWER_TEMPLATE, Document
from grogu.runtime.engine import Generation

QUERY = "Which river flows through the old city of Prague?"
DOCS = [
    "The Vltava is the longest river within the Czech Republic and flows through Prague.",
    "Bananas are rich in potassium.",
]


# ---------------------------------------------------------------- building blocks
def test_copied_mask_marks_tokens_inside_document_ngrams():
    doc = [5, 6, 7, 8, 9, 20, 21, 22]
    question = [30, 31, 32, 33]
    # answer: 1 5 6 7 2 30 31 32 8 9 20
    #  - (5, 6, 7) occurs in the document -> positions 1, 2, 3 copied
    #  - (30, 31, 32) occurs, but in the ungrounded prompt too: not copied from the document
    #  - (8, 9, 20) occurs in the document -> positions 8, 9, 10 copied
    answer = [1, 5, 6, 7, 2, 30, 31, 32, 8, 9, 20]
    grounded = [0] + question + doc
    mask = metrics.copied_mask(answer, grounded, [0] + question, n=3)
    assert mask.tolist() == [False, True, True, True, False, False, False, False, True, True, True]
    # with n = 4 no 4-gram of the answer is in the document
    assert not metrics.copied_mask(answer, grounded, [0] + question, n=4).any()
    # an answer shorter than n copies nothing
    assert metrics.copied_mask([5, 6], grounded, [], n=3).tolist() == [False, False]
    with pytest.raises(ValueError):
        metrics.copied_mask(answer, grounded, [], n=0)


def test_quantile_key_mask():
    h_g = [1.0, 2.0, 0.5, 3.0, 1.0]
    h_u = [1.1, 1.0, 0.5, 1.0, 2.5]  # |dH| = 0.1, 1.0, 0.0, 2.0, 1.5
    # sorted |dH|: 0, 0.1, 1.0, 1.5, 2.0; quantile 0.5 -> 1.0 (the middle one): keep >= 1.0
    assert metrics.quantile_key_mask(h_g, h_u, 0.5).tolist() == [False, True, False, True, True]
    # quantile 0.8 -> position 0.8 * 4 = 3.2 -> 1.5 + 0.2 * (2.0 - 1.5) = 1.6: keep only 2.0
    assert metrics.quantile_key_mask(h_g, h_u, 0.8).tolist() == [False, False, False, True, False]
    # quantile 0 keeps everything; an empty answer has no key token
    assert metrics.quantile_key_mask(h_g, h_u, 0.0).all()
    assert metrics.quantile_key_mask([], [], 0.5).tolist() == []
    with pytest.raises(ValueError):
        metrics.quantile_key_mask(h_g, h_u, 1.5)


def test_relative_key_mask_and_fallback():
    h_g = [1.0, 2.0, 0.5]
    h_u = [2.0, 2.1, 0.5]  # |dH| = 1.0, 0.1, 0 ; rho * h_u with rho = 0.25: 0.5, 0.525, 0.125
    assert metrics.relative_key_mask(h_g, h_u, 0.25).tolist() == [True, False, False]
    # rho = 1: 1.0 > 2.0? no; nothing passes -> top ceil(0.1 * 3) = 1 token by h_g: the 2.0
    assert metrics.relative_key_mask(h_g, h_u, 1.0).tolist() == [False, True, False]


def test_copy_continuation_and_support_weights():
    copied = [False, True, True, True, False, True]
    # a copied token continues a span when the token before it is copied too
    assert metrics.copy_continuation_mask(copied).tolist() == [False, False, True, True, False, False]
    logp_u = [math.log(0.9), math.log(0.5), math.log(0.25), 0.0, math.log(0.1), math.log(0.2)]
    w = metrics.copy_support_weights(copied, logp_u)
    # not copied -> 1 (whatever p_u); copied -> p_u
    assert w.tolist() == pytest.approx([1.0, 0.5, 0.25, 1.0, 1.0, 0.2])
    assert metrics.weighted_mean([1.0, 2.0, 4.0], [1.0, 0.0, 3.0]) == pytest.approx((1 + 12) / 4)
    with pytest.raises(ValueError):
        metrics.weighted_mean([1.0], [0.0])


# ---------------------------------------------------------------- registered variants
# 11 answer tokens (dyadic numbers, so every sum is exact):
H_G = [1.0, 0.25, 0.5, 0.0, 2.0, 0.5, 0.25, 0.5, 0.0, 1.5, 0.75]
H_U = [1.0, 0.5, 0.75, 0.5, 1.0, 1.0, 1.0, 1.5, 3.0, 4.0, 0.75]
# d = h_g - h_u = [0, -.25, -.25, -.5, 1, -.5, -.75, -1, -3, -2.5, 0]
# |d| sorted: 0, 0, .25, .25, .5, .5, .75, 1, 1, 2.5, 3
#   quantile 0.5 -> position 5 -> 0.5: key = |d| >= 0.5 -> tokens 3..9 (7 tokens)
#   quantile 0.9 -> position 9 -> 2.5: key = tokens 8, 9
#   paper alpha 0.05: |d| > 0.05 -> tokens 1..9 (9 tokens)
LOGP_G = [-0.5] * 11
COPIED = [False] * 8 + [True, True, False]
LOGP_U = [0.0] * 8 + [math.log(0.5), math.log(0.25), math.log(0.1)]  # p_u of tokens 8, 9: 0.5, 0.25


def _v(name, **kw):
    return metrics.compute(name, H_G, LOGP_G, H_U, logp_u=LOGP_U, copied=COPIED, **kw)


def test_tuned_settings_are_the_documented_ones():
    # docs/results.md reports these (tuned on the SQuAD tuning split); change both together
    assert (metrics.ADAPTIVE_KEY_QUANTILE, metrics.CHANGE_KEY_QUANTILE, metrics.COPY_NGRAM) == (0.9, 0.5, 5)
    assert metrics.DEFAULT_METRIC == "key_entropy"
    assert {
        "key_entropy",
        "entropy",
        "ppl",
        "key_ppl",
        "key_entropy_adaptive",
        "entropy_change",
        "adaptive_entropy_change",
        "copy_aware_key_entropy",
        "copy_aware_entropy_change",
    } == set(metrics.METRICS)


def test_key_entropy_adaptive():
    v = _v("key_entropy_adaptive")
    # tokens 8, 9: mean h_g = (0.0 + 1.5) / 2
    assert (v.confidence, v.utility, v.n_tokens, v.n_key_tokens) == (pytest.approx(0.75), pytest.approx(-0.75), 11, 2)
    # the paper's KeyEntropy on the same answer: tokens 1..9, h_g sum 5.5
    assert _v("key_entropy").confidence == pytest.approx(5.5 / 9)


def test_entropy_change_on_paper_key_tokens():
    v = _v("entropy_change")
    # tokens 1..9: d sum = -.25 - .25 - .5 + 1 - .5 - .75 - 1 - 3 - 2.5 = -7.75
    assert (v.confidence, v.utility, v.n_key_tokens) == (pytest.approx(-7.75 / 9), pytest.approx(7.75 / 9), 9)
    # alpha still applies: with alpha = 0.6 the key tokens are 4, 6, 7, 8, 9: d sum 1 - .75 - 1 - 3 - 2.5
    assert _v("entropy_change", alpha=0.6).confidence == pytest.approx(-6.25 / 5)


def test_adaptive_entropy_change():
    v = _v("adaptive_entropy_change")
    # tokens 3..9: d sum = -.5 + 1 - .5 - .75 - 1 - 3 - 2.5 = -7.25
    assert (v.confidence, v.utility, v.n_key_tokens) == (pytest.approx(-7.25 / 7), pytest.approx(7.25 / 7), 7)


def test_copy_aware_variants():
    # key tokens 8, 9 (quantile 0.9), both copied: weights p_u = 0.5, 0.25
    ke = _v("copy_aware_key_entropy")
    assert ke.confidence == pytest.approx((0.5 * 0.0 + 0.25 * 1.5) / 0.75)  # = 0.5
    ch = _v("copy_aware_entropy_change")
    assert ch.confidence == pytest.approx((0.5 * -3.0 + 0.25 * -2.5) / 0.75)  # = -2.8333
    assert ch.utility == pytest.approx(2.125 / 0.75) and ch.n_key_tokens == 2
    # nothing copied: the weights are all 1 -> the plain adaptive means
    plain = metrics.compute("copy_aware_key_entropy", H_G, LOGP_G, H_U, logp_u=LOGP_U, copied=[False] * 11)
    assert plain.confidence == pytest.approx(0.75)
    # every key token copied with p_u = 0: fall back to the unweighted key tokens
    zero = metrics.compute("copy_aware_key_entropy", H_G, LOGP_G, H_U, logp_u=[-math.inf] * 11, copied=[True] * 11)
    assert zero.confidence == pytest.approx(0.75)


def test_variants_need_their_inputs():
    with pytest.raises(ValueError, match="logp_u"):
        metrics.compute("copy_aware_key_entropy", H_G, LOGP_G, H_U)
    with pytest.raises(ValueError, match="copied has 2"):
        metrics.compute("key_entropy", H_G, LOGP_G, H_U, copied=[True, False])
    # the paper's variants and the entropy-only variants need neither
    assert metrics.compute("adaptive_entropy_change", H_G, LOGP_G, H_U).confidence == pytest.approx(-7.25 / 7)
    assert metrics.metric_name("Adaptive-Entropy-Change") == "adaptive_entropy_change"


def test_scorer_variants_use_logp_u_and_copy_mask(tiny_engine):
    scorer = UtilityScorer(tiny_engine, max_new_tokens=10)
    for r in scorer.score(QUERY, DOCS, return_details=True):
        d = r.details
        assert len(d.ungrounded_logprob) == len(d.copied) == len(d.token_ids)
        g = scorer.prompts.grounded_ids(QUERY, [Document(DOCS[r.index])])
        assert (
            d.copied.tolist()
            == metrics.copied_mask(d.token_ids, g, scorer.prompts.ungrounded_ids(QUERY), metrics.COPY_NGRAM).tolist()
        )
        for name in metrics.METRICS:
            ref = metrics.compute(
                name,
                d.grounded_entropy,
                d.grounded_logprob,
                d.ungrounded_entropy,
                logp_u=d.ungrounded_logprob,
                copied=d.copied,
            )
            assert r.variants[name] == pytest.approx(ref.utility)
        assert r.score == r.variants["key_entropy"]
    ranked = UtilityScorer(tiny_engine, max_new_tokens=10, metric="adaptive-entropy-change").score(QUERY, DOCS)
    assert [x.metric for x in ranked] == ["adaptive_entropy_change"] * 2


# ---------------------------------------------------------------- scorer: short answers
def test_short_answer_style_changes_prompt_and_caps_tokens(tiny_engine):
    long = UtilityScorer(tiny_engine)
    short = UtilityScorer(tiny_engine, answer_style="short")
    assert (long.max_new_tokens, short.max_new_tokens) == (64, 16)
    assert short.prompts.template is SHORT_ANSWER_TEMPLATE
    g_long = long.prompts.grounded_ids(QUERY, [Document(DOCS[0])])
    g_short = short.prompts.grounded_ids(QUERY, [Document(DOCS[0])])
    text = tiny_engine.tokenizer.decode(g_short)
    assert g_long != g_short and "answer only, in a few words" in text
    assert "answer only" in tiny_engine.tokenizer.decode(short.prompts.ungrounded_ids(QUERY))
    results = short.score(QUERY, DOCS, return_details=True)
    for r in results:
        assert r.n_tokens <= 16 and len(r.details.token_ids) <= 16
        assert "\n" not in r.answer
        assert set(r.variants) == set(metrics.METRICS)
    assert UtilityScorer(tiny_engine, answer_style="short", max_new_tokens=5).max_new_tokens == 5
    with pytest.raises(ValueError, match="answer_style"):
        UtilityScorer(tiny_engine, answer_style="medium")


def _gen(tokenizer, text: str) -> Generation:
    ids = tokenizer.encode(text, add_special_tokens=False)
    n = len(ids)
    return Generation(
        token_ids=ids,
        entropy=torch.arange(n, dtype=torch.float32),
        logprob=-torch.arange(n, dtype=torch.float32),
        text=text,
    )


def test_short_answer_cut_at_first_line_or_sentence(tiny_engine):
    scorer = UtilityScorer(tiny_engine, answer_style="short")
    tok = tiny_engine.tokenizer
    cut = scorer._first_line(_gen(tok, "Paris is the capital.\nMore text here"))
    assert cut.text == "Paris is the capital." and cut.finished
    n = len(tok.encode("Paris is the capital.", add_special_tokens=False))
    assert cut.token_ids == tok.encode("Paris is the capital.\nMore text here", add_special_tokens=False)[:n]
    assert cut.entropy.tolist() == list(range(n)) and cut.stop_entropy == float(n)
    assert scorer._first_line(_gen(tok, "The Vltava. It flows north.")).text == "The Vltava."
    # initials are not a sentence end; a leading line break is not a cut
    assert scorer._first_line(_gen(tok, "The U.S. Army won")).text == "The U.S. Army won"
    assert scorer._first_line(_gen(tok, "\nVltava\nmore")).text == "Vltava"
    same = _gen(tok, "just words")
    assert scorer._first_line(same) is same
