"""GROGU metric functions against hand-computed values."""

import math

import pytest
import torch

from grogu import metrics


def test_key_tokens_strict_threshold():
    h_g = [1.0, 2.0, 0.5, 3.0]
    h_u = [1.25, 2.5, 0.5, 2.5]  # |dH| = 0.25 (exactly alpha: not key), 0.5, 0, 0.5
    mask = metrics.key_token_mask(h_g, h_u, alpha=0.25)
    assert mask.tolist() == [False, True, False, True]
    assert metrics.key_entropy(h_g, mask) == pytest.approx((2.0 + 3.0) / 2)
    v = metrics.compute("key_entropy", h_g, [-0.1] * 4, h_u, alpha=0.25)
    assert (v.confidence, v.utility, v.n_tokens, v.n_key_tokens) == (pytest.approx(2.5), pytest.approx(-2.5), 4, 2)


def test_fallback_top_k_when_no_token_passes_alpha():
    h_g = [0.2, 0.9, 0.4, 0.7, 0.1, 0.3, 0.8, 0.6, 0.5, 0.0, 0.05, 0.15]  # 12 tokens -> ceil(1.2) = 2
    mask = metrics.key_token_mask(h_g, h_g, alpha=0.05, top_k_frac=0.1)
    assert mask.nonzero().flatten().tolist() == [1, 6]  # 0.9 and 0.8
    assert metrics.key_entropy(h_g, mask) == pytest.approx(0.85)


def test_fallback_ties_take_the_earlier_tokens_and_ceil_is_exact():
    h = [0.5] * 30  # 0.1 * 30 = 3 tokens exactly (not 4 from float error)
    mask = metrics.key_token_mask(h, h)
    assert mask.nonzero().flatten().tolist() == [0, 1, 2]
    assert metrics.top_k_count(30, 0.1) == 3 and metrics.top_k_count(31, 0.1) == 4 and metrics.top_k_count(3, 0.1) == 1


def test_entropy_and_perplexity_variants():
    h_g = [1.0, 2.0, 4.0]
    logp = [math.log(0.5), math.log(0.25), math.log(0.125)]
    h_u = [1.0, 1.0, 4.0]  # key: token 1 only
    assert metrics.compute("entropy", h_g, logp, h_u).confidence == pytest.approx(7 / 3)
    assert metrics.compute("ppl", h_g, logp, h_u).confidence == pytest.approx(
        math.exp((math.log(2) + math.log(4) + math.log(8)) / 3)
    )
    assert metrics.compute("ppl", h_g, logp, h_u).confidence == pytest.approx(4.0)  # geometric mean of 2, 4, 8
    assert metrics.compute("key_ppl", h_g, logp, h_u).confidence == pytest.approx(4.0)
    assert metrics.compute("KeyEntropy", h_g, logp, h_u).confidence == pytest.approx(2.0)


def test_ungrounded_key_entropy_appendix_c():
    assert metrics.ungrounded_key_entropy([0.01, 0.3, 0.04, 0.7]) == pytest.approx(0.5)
    # none above alpha: top ceil(0.1 * 4) = 1 token by entropy
    assert metrics.ungrounded_key_entropy([0.01, 0.03, 0.02, 0.0]) == pytest.approx(0.03)
    assert metrics.grogu_difference(0.4, 1.0) == pytest.approx(-0.6)


def test_metric_names_and_bad_input():
    assert metrics.metric_name("Key-PPL") == "key_ppl"
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.metric_name("bleu")
    with pytest.raises(TypeError):
        metrics.metric_name(3)
    with pytest.raises(ValueError, match="tokens"):
        metrics.key_token_mask([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        metrics.entropy([])
    with pytest.raises(ValueError):
        metrics.top_k_count(3, 0.0)
    assert metrics.key_token_mask(torch.zeros(0), torch.zeros(0)).tolist() == []
