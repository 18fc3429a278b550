"""grogu.metrics.scales: the bounded score per metric family (values, order, bounds, bad input), the threshold
it implies on the utility (keeps exactly the documents at or above it on real scores), and
grogu.runtime.engine.config.configure_engine (the integrations' batch/memory knob)."""

from __future__ import annotations

import math

import pytest

from grogu import EngineConfig, UtilityScorer, metrics
from grogu.metrics.scales import SCORE_SCALES, check_score_scale, probability, utility_threshold
from grogu.runtime.engine.config import configure_engine

QUERY = "Which river flows through the old city of Prague?"
DOCS = [
    "The Vltava is the longest river within the Czech Republic and flows through Prague.",
    "Prague is the capital and largest city of the Czech Republic.",
    "Bananas are rich in potassium.",
    "The Danube flows through Vienna, Bratislava and Budapest.",
]


def test_every_metric_has_a_bounded_scale_with_its_meaning():
    for name in metrics.METRICS:
        assert 0.0 < probability(name, -3.0) < 1.0
    # entropy variants: exp(-H); 1/k for a uniform hesitation among k tokens
    assert probability("key_entropy", 0.0) == 1.0
    assert probability("entropy", -math.log(4)) == pytest.approx(0.25)
    # PPL variants: 1 / perplexity, the geometric-mean probability of the answer tokens
    assert probability("key_ppl", -1.0) == 1.0 and probability("ppl", -8.0) == pytest.approx(0.125)
    # change variants: logistic of minus the entropy change; 0.5 = as sure as without the document
    assert probability("entropy_change", 0.0) == 0.5
    assert probability("entropy_change", math.log(3)) == pytest.approx(0.75)  # entropy down by ln 3
    assert probability("copy_aware_entropy_change", -math.log(3)) == pytest.approx(0.25)
    # no overflow at extreme changes: the ends of [0, 1]
    assert probability("adaptive_entropy_change", -800.0) == 0.0 and probability("entropy_change", 800.0) == 1.0
    # a float32 rounding error past the bound is not an error; a real violation is
    assert probability("key_entropy", 1e-7) == 1.0 and probability("ppl", -0.99999) == 1.0


def test_scale_is_strictly_increasing_in_utility():
    for name in metrics.METRICS:
        if "ppl" in name:
            utilities = [-50.0, -9.0, -2.5, -1.2, -1.0]
        elif "change" in name:
            utilities = [-4.0, -0.5, 0.0, 0.3, 6.0]
        else:
            utilities = [-9.0, -2.0, -0.5, -0.01, 0.0]
        values = [probability(name, u) for u in utilities]
        assert values == sorted(values) and len(set(values)) == len(values), name


def test_bad_input_is_an_error():
    for bad in (float("nan"), "0.5", None, True):
        with pytest.raises(ValueError, match="utility must be a number"):
            probability("key_entropy", bad)
    with pytest.raises(ValueError, match="at most 0"):
        probability("key_entropy", 0.5)
    with pytest.raises(ValueError, match="at most -1"):
        probability("key_ppl", -0.5)
    with pytest.raises(ValueError, match="unknown metric"):
        probability("bleu", -1.0)
    for bad in (-0.1, 1.5, float("nan"), float("inf"), "0.5", True):
        with pytest.raises(ValueError, match="threshold"):
            utility_threshold("key_entropy", bad)
    assert SCORE_SCALES == ("utility", "probability") and check_score_scale("probability") == "probability"
    for bad in ("prob", None, 1):
        with pytest.raises(ValueError, match="score_scale"):
            check_score_scale(bad)


def test_utility_threshold_keeps_exactly_the_documents_at_or_above_it(tiny_engine):
    """On real scores of every metric: the converted threshold keeps a document iff its probability
    is >= the threshold, including the document whose probability is the threshold itself."""
    results = UtilityScorer(tiny_engine, max_new_tokens=8).score(QUERY, DOCS)
    for name in metrics.METRICS:
        utilities = [r.variants[name] for r in results]
        probs = [probability(name, u) for u in utilities]
        assert all(0.0 <= p <= 1.0 for p in probs)
        for p in sorted(probs) + [0.0, 0.5, 1.0]:
            u = utility_threshold(name, p)
            kept = [i for i, x in enumerate(utilities) if u is None or x >= u]
            assert kept == [i for i, q in enumerate(probs) if q >= p], (name, p)
    assert utility_threshold("key_entropy", 0.0) is None and utility_threshold("key_entropy", None) is None


def test_configure_engine_sets_the_batch_and_memory_settings(tokenizer):
    from grogu_research.testing import tiny_model

    from grogu import Engine

    engine = Engine((tiny_model("llama", seed=0), tokenizer))  # its own engine: the shared one stays as it is
    default = engine.config
    configure_engine(engine)
    assert engine.config == default
    configure_engine(engine, batch_size=3)
    assert engine.config.max_batch_size == 3 and engine.config.max_batch_tokens == default.max_batch_tokens
    configure_engine(engine, config=EngineConfig(max_batch_tokens=2048, logits_budget_mb=64))
    c = engine.config
    assert (c.max_batch_size, c.max_batch_tokens, c.logits_budget_mb) == (32, 2048, 64)
    for bad in (0, -2, 1.5, True, "8"):
        with pytest.raises(ValueError, match="batch_size"):
            configure_engine(engine, batch_size=bad)
    with pytest.raises(TypeError, match="not both"):
        configure_engine(engine, batch_size=2, config=EngineConfig())
    with pytest.raises(TypeError, match="EngineConfig"):
        configure_engine(engine, config={"max_batch_size": 2})
    assert engine.config.max_batch_tokens == 2048  # a failed call changes nothing
    # scores do not depend on the batch size
    before = [r.score for r in UtilityScorer(engine, max_new_tokens=8).score(QUERY, DOCS)]
    configure_engine(engine, batch_size=1)
    assert [r.score for r in UtilityScorer(engine, max_new_tokens=8).score(QUERY, DOCS)] == pytest.approx(
        before, abs=1e-4
    )
