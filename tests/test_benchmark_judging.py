"""How benchmarks/pipeline_accuracy.py judges answers and draws fresh samples: whole words (a longer
answer cannot buy a match by containing a gold string inside a word), SQuAD's token F1, yes/no golds
left out, and earlier samples excluded before the draw."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import pipeline_accuracy  # noqa: E402


def test_whole_words_not_characters():
    assert pipeline_accuracy.answered("It was founded in 1908.", ["1"]) and not pipeline_accuracy.answered_words(
        "It was founded in 1908.", ["1"]
    )
    assert pipeline_accuracy.answered("That is not known.", ["no"]) and not pipeline_accuracy.answered_words(
        "That is not known.", ["no"]
    )
    assert pipeline_accuracy.answered_words(
        "The Vltava flows through Prague.", ["the Vltava"]
    )  # articles dropped, as SQuAD does
    assert pipeline_accuracy.answered_words("In 1 year, more or less", ["1"])
    assert not pipeline_accuracy.answered_words("Vltava river", ["river Vltava"])  # the words in order
    assert not pipeline_accuracy.answered_words("anything", [""])


def test_token_f1_against_the_best_gold():
    # "the eiffel tower in paris" -> [eiffel, tower, in, paris]; gold [eiffel, tower]: P = 2/4, R = 1
    assert pipeline_accuracy.answer_f1("The Eiffel Tower in Paris", ["Eiffel Tower"]) == pytest.approx(
        2 * 0.5 * 1 / 1.5
    )
    assert pipeline_accuracy.answer_f1(
        "The Eiffel Tower in Paris", ["Louvre", "Eiffel Tower in Paris"]
    ) == pytest.approx(1.0)
    assert pipeline_accuracy.answer_f1("No idea", ["Eiffel Tower"]) == 0.0


def test_yes_no_golds_are_not_judged():
    assert (
        not pipeline_accuracy.judgeable(["yes"])
        and not pipeline_accuracy.judgeable(["No", "no"])
        and pipeline_accuracy.judgeable(["no", "Norway"])
    )


def test_a_fresh_draw_leaves_the_earlier_samples_out(tmp_path):
    questions = [{"qid": f"q{i}"} for i in range(50)]
    earlier = pipeline_accuracy.draw(questions, 20, seed=0)
    assert pipeline_accuracy.draw(questions, 20, seed=0) == earlier  # reproducible
    listing = tmp_path / "earlier.txt"
    listing.write_text("# a comment\n" + "\n".join(q["qid"] for q in earlier[:10]) + "\n")
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(f'{{"qid": "{q["qid"]}", "answers": []}}' for q in earlier[10:]) + "\n")
    excluded = pipeline_accuracy.excluded_ids([str(listing), str(records)])
    assert excluded == {q["qid"] for q in earlier}
    fresh = pipeline_accuracy.draw(questions, 30, seed=1, exclude=excluded)
    assert len(fresh) == 30 and not {q["qid"] for q in fresh} & excluded
    assert len(pipeline_accuracy.draw(questions, 40, seed=1, exclude=excluded)) == 30
