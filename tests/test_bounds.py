"""The library's own bounds on absurd values: clear errors before any work."""

from __future__ import annotations

import pytest

from grogu.core.checks import MAX_ABLATIONS, MAX_SAMPLES, check_count, check_documents, check_query, check_temperature


def test_counts_temperatures_and_text():
    assert check_count("n_samples", 10, MAX_SAMPLES) == 10
    with pytest.raises(ValueError, match="n_samples must be at most 1000, got 100000"):
        check_count("n_samples", 100_000, MAX_SAMPLES)
    with pytest.raises(ValueError, match="n_ablations must be at most 10000"):
        check_count("n_ablations", MAX_ABLATIONS + 1, MAX_ABLATIONS)
    assert check_temperature(0.001) == 0.001
    with pytest.raises(ValueError, match="temperature must be >= 0.001, got 1e-50: a smaller temperature overflows"):
        check_temperature(1e-50)
    with pytest.raises(ValueError, match="query is not valid UTF-8 text: a lone surrogate '\\\\ud800' at character 4"):
        check_query("bad \ud800")
    with pytest.raises(ValueError, match="document 1's title is not valid UTF-8"):
        check_documents(["ok", {"text": "fine", "title": "\udfff"}])


def test_a_filled_template_past_the_window_is_refused(tiny_engine):
    """A template that repeats {text} builds a prompt past the window: a ValueError before generation."""
    import grogu

    template = grogu.PromptTemplate(document="{text}" * 60)
    scorer = grogu.UtilityScorer(tiny_engine, max_new_tokens=4, template=template)
    with pytest.raises(ValueError, match="once the template is filled"):
        scorer.score("q?", ["0123456789 " * 40])
