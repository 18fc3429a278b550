"""Small-model utility variants (issue #8): building blocks and metrics against hand-computed values,
and the scorer's short-answer style on a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from grogu import UtilityScorer, metrics as M
from grogu.engine import Generation
from grogu.prompts import SHORT_ANSWER_TEMPLATE, Document

QUERY = "Which river flows through the old city of Prague?"
DOCS = ["The Vltava is the longest river within the Czech Republic and flows through Prague.",
        "Bananas are rich in potassium."]


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
    mask = M.copied_mask(answer, grounded, [0] + question, n=3)
    assert mask.tolist() == [False, True, True, True, False, False, False, False, True, True, True]
    # with n = 4 no 4-gram of the answer is in the document
    assert not M.copied_mask(answer, grounded, [0] + question, n=4).any()
    # an answer shorter than n copies nothing
    assert M.copied_mask([5, 6], grounded, [], n=3).tolist() == [False, False]
    with pytest.raises(ValueError):
        M.copied_mask(answer, grounded, [], n=0)


def test_quantile_key_mask():
    h_g = [1.0, 2.0, 0.5, 3.0, 1.0]
    h_u = [1.1, 1.0, 0.5, 1.0, 2.5]  # |dH| = 0.1, 1.0, 0.0, 2.0, 1.5
    # sorted |dH|: 0, 0.1, 1.0, 1.5, 2.0; quantile 0.5 -> 1.0 (the middle one): keep >= 1.0
    assert M.quantile_key_mask(h_g, h_u, 0.5).tolist() == [False, True, False, True, True]
    # quantile 0.8 -> position 0.8 * 4 = 3.2 -> 1.5 + 0.2 * (2.0 - 1.5) = 1.6: keep only 2.0
    assert M.quantile_key_mask(h_g, h_u, 0.8).tolist() == [False, False, False, True, False]
    # quantile 0 keeps everything; an empty answer has no key token
    assert M.quantile_key_mask(h_g, h_u, 0.0).all()
    assert M.quantile_key_mask([], [], 0.5).tolist() == []
    with pytest.raises(ValueError):
        M.quantile_key_mask(h_g, h_u, 1.5)


def test_relative_key_mask_and_fallback():
    h_g = [1.0, 2.0, 0.5]
    h_u = [2.0, 2.1, 0.5]  # |dH| = 1.0, 0.1, 0 ; rho * h_u with rho = 0.25: 0.5, 0.525, 0.125
    assert M.relative_key_mask(h_g, h_u, 0.25).tolist() == [True, False, False]
    # rho = 1: 1.0 > 2.0? no; nothing passes -> top ceil(0.1 * 3) = 1 token by h_g: the 2.0
    assert M.relative_key_mask(h_g, h_u, 1.0).tolist() == [False, True, False]


def test_copy_continuation_and_support_weights():
    copied = [False, True, True, True, False, True]
    # a copied token continues a span when the token before it is copied too
    assert M.copy_continuation_mask(copied).tolist() == [False, False, True, True, False, False]
    logp_u = [math.log(0.9), math.log(0.5), math.log(0.25), 0.0, math.log(0.1), math.log(0.2)]
    w = M.copy_support_weights(copied, logp_u)
    # not copied -> 1 (whatever p_u); copied -> p_u
    assert w.tolist() == pytest.approx([1.0, 0.5, 0.25, 1.0, 1.0, 0.2])
    assert M.weighted_mean([1.0, 2.0, 4.0], [1.0, 0.0, 3.0]) == pytest.approx((1 + 12) / 4)
    with pytest.raises(ValueError):
        M.weighted_mean([1.0], [0.0])


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
        assert set(r.variants) == set(M.METRICS)
    assert UtilityScorer(tiny_engine, answer_style="short", max_new_tokens=5).max_new_tokens == 5
    with pytest.raises(ValueError, match="answer_style"):
        UtilityScorer(tiny_engine, answer_style="medium")


def _gen(tokenizer, text: str) -> Generation:
    ids = tokenizer.encode(text, add_special_tokens=False)
    n = len(ids)
    return Generation(token_ids=ids, entropy=torch.arange(n, dtype=torch.float32),
                      logprob=-torch.arange(n, dtype=torch.float32), text=text)


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
