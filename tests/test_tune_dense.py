"""grogu tune's dense judge, its choice and its stated gain: the gold answers' log-likelihood against a
direct forward pass of SmolLM2, batched against one at a time; the interval and the sample sizes by hand;
old records (no dense judge) still replay by words; the small grid is the default, the full one reachable."""

from __future__ import annotations

import inspect
import json
import math
import os
from statistics import NormalDist
from types import SimpleNamespace

import pytest
import torch
from grogu_research.testing import squad_paragraphs, with_shared_data

from grogu import ModeSettings, UtilityScorer
from grogu.apps.tune import template_from_text
from grogu.apps.tune.api import set_up, tune
from grogu.apps.tune.choose import choose, decide
from grogu.apps.tune.collect import collect
from grogu.apps.tune.examples import load_examples
from grogu.apps.tune.gain import questions_needed
from grogu.apps.tune.judging import gold_logliks
from grogu.apps.tune.replay import KEEP, SHIPPED, Outcomes, grid, grid_named, small_grid
from grogu.rerank import pipeline as rerank_pipeline

HERE = os.path.dirname(os.path.abspath(__file__))
SEED8 = os.path.join(HERE, "..", "benchmarks", "results", "tune_validation_seed8")
PROMPT = "Answer the question using only the documents.\n\n{context}\n\nQuestion: {question}"


def _examples(n: int = 5) -> list[dict]:
    """n SQuAD questions, each with its own paragraph among 4 others (cut to 50 words), its own second
    (as tests/test_tune.py builds them)."""
    paras = squad_paragraphs(n + 4, 11)
    cut = [" ".join(p["text"].split()[:50]) for p in paras]
    return [
        {
            "question": paras[i]["question"],
            "answers": paras[i]["answers"],
            "documents": [cut[i + 1], cut[i], *cut[i + 2 : i + 5]],
        }
        for i in range(n)
    ]


def _seed8(name: str, part: str = "tune") -> list[dict]:
    with open(os.path.join(SEED8, f"records_{name}_{part}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------------------------------------- the judge
@pytest.fixture(scope="module")
def smol_collected(smol_engine):
    """Two SQuAD questions collected on SmolLM2 (two at a time), and each candidate's grounded prompt."""
    scorer = UtilityScorer(smol_engine, max_new_tokens=6, template=template_from_text(PROMPT))
    exs = load_examples(with_shared_data(_examples, 4))[:2]
    records = collect(scorer, exs, 3, set_up(scorer, 3), batch=2, progress=False)
    prompts = []
    for ex, rec in zip(exs, records):
        plan = rerank_pipeline.plan(ex.question, list(ex.documents), 3, None, ModeSettings(), None, False)
        prompts.append([scorer.prompts.grounded_ids(q, docs) for q, docs in plan.context_documents(rec["candidates"])])
    return scorer, exs, records, prompts


def _by_hand(model, tokenizer, prompt: list[int], golds: list[str]) -> float:
    """The best gold answer's mean log-probability per token: log-softmax of one transformers forward pass
    of prompt + answer, read at the answer's positions."""
    best = -math.inf
    for gold in set(g.strip() for g in golds):
        answer = tokenizer.encode(gold, add_special_tokens=False)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt + answer])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        lp = [logp[len(prompt) + j - 1, t].item() for j, t in enumerate(answer)]
        best = max(best, sum(lp) / len(lp))
    return best


@pytest.mark.slow
def test_the_dense_judge_equals_a_forward_pass_by_hand(smol_collected, smol_engine):
    """Every candidate of a collected record (the plain context first) holds the gold answers'
    log-likelihood, and it equals a direct forward pass of prompt + context + answer within 1e-4."""
    scorer, exs, records, prompts = smol_collected
    tokenizer = smol_engine.tokenizer
    for ex, rec, ps in zip(exs, records, prompts):
        assert len(rec["scored"]) == len(rec["candidates"]) == 6 and rec["candidates"][0] == [0, 1, 2]
        for c, (row, prompt) in enumerate(zip(rec["scored"], ps)):
            text = tokenizer.decode(prompt)
            assert ex.question in text and all(ex.documents[i][:40] in text for i in rec["candidates"][c])
            want = _by_hand(smol_engine.model, tokenizer, prompt, list(ex.answers))
            assert row["gold_loglik"] == pytest.approx(want, abs=1e-4)
        assert "gold" in rec["seconds"]


@pytest.mark.slow
def test_the_dense_judge_batched_equals_one_at_a_time(smol_collected):
    scorer, exs, records, prompts = smol_collected
    flat = [(p, ex.answers) for ex, ps in zip(exs, prompts) for p in ps]
    batched = gold_logliks(scorer, [p for p, _ in flat], [a for _, a in flat])
    alone = [gold_logliks(scorer, [p], [a])[0] for p, a in flat]
    stored = [row["gold_loglik"] for rec in records for row in rec["scored"]]
    assert batched == pytest.approx(alone, abs=1e-5) and stored == pytest.approx(alone, abs=1e-5)
    assert len(set(round(v, 4) for v in alone)) > 1  # the contexts change it
    # no gold answer with a token: None; a target that cannot teacher-force: None everywhere
    assert gold_logliks(scorer, [prompts[0][0]], [[" "]]) == [None]
    assert gold_logliks(SimpleNamespace(grounded_only=True), [[1, 2]], [["a"]]) == [None]


# ---------------------------------------------------------------------------------------------- the gain
def _outcomes(correct: list[list[bool]], loglik: list[list[float]] | None) -> Outcomes:
    """A hand-built Outcomes over keep and the shipped default, one candidate per setting per record."""
    n = len(correct[0])
    return Outcomes(
        settings=[KEEP, SHIPPED],
        ids=[f"q{i}" for i in range(n)],
        correct=correct,
        seconds=[[1.0] * n, [2.0] * n],
        plain=[1.0] * n,
        f1=[[0.0] * n, [0.0] * n],
        words=[[1] * n, [1] * n],
        changed=[[False] * n, [True] * n],
        in_doubt=[[None] * n, [True] * n],
        loglik=loglik,
        candidate=[[0] * n, [1] * n],
        candidate_correct=[[a, b] for a, b in zip(*correct)],
        candidate_loglik=None if loglik is None else [[a, b] for a, b in zip(*loglik)],
    )


def _binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= q."""
    cdf = 0.0
    for k in range(n + 1):
        cdf += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        if cdf >= q:
            return k
    return n


def test_the_interval_and_the_questions_needed_by_hand():
    """Ten questions. Words: the shipped default is right on one, keep on none (differences 1, 0 x 9).
    Dense: the default gains 0.5 on two (0.5, 0.5, 0 x 8). A bootstrap mean is then K / 10 (K ~ Binomial(10,
    0.1)) and 0.5 K / 10 (K ~ Binomial(10, 0.2)): the 90 % interval's bounds are those binomials' 5 % and
    95 % quantiles, far from any jump of their CDF, so 10,000 resamples find them exactly."""
    n = 10
    correct = [[False] * n, [True] + [False] * (n - 1)]
    loglik = [[-2.0] * n, [-1.5, -1.5] + [-2.0] * (n - 2)]
    result = decide(_outcomes(correct, loglik), range(n))
    g = result.evidence["gain"]["shipped"]
    acc, dense = g["accuracy"], g["dense"]
    assert acc["mean"] == pytest.approx(0.1) and dense["mean"] == pytest.approx(0.1)
    assert (acc["low"], acc["high"]) == pytest.approx(
        (_binomial_quantile(n, 0.1, 0.05) / n, _binomial_quantile(n, 0.1, 0.95) / n)
    )
    assert (acc["low"], acc["high"]) == pytest.approx((0.0, 0.3))
    assert (dense["low"], dense["high"]) == pytest.approx((0.0, 0.5 * 4 / n))
    assert acc["p_one_sided"] == pytest.approx(0.9**10, abs=0.02)  # P(K = 0): no gain in the resample
    assert dense["p_one_sided"] == pytest.approx(0.8**10, abs=0.02)
    sd = math.sqrt((0.9**2 + 9 * 0.1**2) / 9)
    z = NormalDist().inv_cdf(0.9) + NormalDist().inv_cdf(0.8)
    assert acc["sd"] == pytest.approx(sd)
    assert g["questions_needed"] == {k: math.ceil((z * sd / (int(k) / 100)) ** 2) for k in ("3", "5", "10")}
    assert g["questions_needed"]["3"] == 501 and questions_needed(0.0, 0.03) is None
    # the default is the incumbent and nothing beats it: its gain is the line, on questions not fitted on
    assert result.decision == "default"
    line = result.evidence["gain"]["line"]
    assert line.startswith("the shipped default: +10 pts of accuracy over the retriever's order (90%: +0 to +30)")
    assert "dense judge +0.100 nats/token (90%: +0.000 to +0.200)" in line and "501 / 181 / 46 questions" in line
    assert line in result.summary()
    json.dumps(result.evidence, allow_nan=False)  # the settings file stays strict JSON


def _record(i: int, right: list[bool], loglik: list[float]) -> dict:
    """A hand-made record over 3 documents, top 2 (candidates [0, 1], [0, 2], [1, 0], [2, 0]), as
    tests/test_tune.py builds it: each answer right where ``right`` says, candidate 0 the least sure and
    the last the surest (so 'confidence' picks it); each candidate's dense judge from ``loglik``."""
    from grogu.rerank.selection import context_candidates

    scored = [
        {
            "answer": "paris" if ok else f"wrong{j}",
            "variants": {"key_entropy": -2.0 + 0.1 * j, "ppl": -3.0, "entropy": -1.0},
            "n_tokens": 1,
            "finished": True,
            "gold_loglik": ll,
        }
        for j, (ok, ll) in enumerate(zip(right, loglik))
    ]
    return {
        "id": f"r{i}",
        "answers": ["Paris"],
        "top_n": 2,
        "texts": ["a", "b", "c"],
        "candidates": context_candidates(3, 2, "swap_orders", 2),
        "scored": scored,
        "seconds": {"answer_first": 1.0, "force_first": 0.5, "rest": 4.0},
    }


def test_the_dense_judge_tells_apart_what_words_cannot():
    """Every answer is wrong, so words see no difference; the dense judge sees the last candidate (the one
    'confidence' picks) make the gold answer likelier on 10 of 12 questions. Dense adopts it, words keep
    the incumbent, and the judges' agreement is counted by hand."""
    always = ModeSettings(gate="always", rule="confidence", margin=0.0)
    recs = [_record(i, [False] * 4, [-3.0, -3.0, -3.0, -2.0 if i < 10 else -3.5]) for i in range(12)]
    dense = choose(recs, settings=[KEEP, always])
    assert dense.evidence["choose_by"] == "dense" and dense.decision == "tuned" and dense.settings == always
    cv = dense.evidence["cross_validation"]["dense"]
    assert cv["mean"] == pytest.approx((10 * 1.0 - 2 * 0.5) / 12) and cv["p_one_sided"] <= 0.2
    assert choose(recs, settings=[KEEP, always], choose_by="words").decision == "keep"
    # agreement: one right candidate (the first) against three wrong, on questions 0-5
    mixed = [_record(i, [True, False, False, False], [-1.0, -2.0, -0.5, -2.0]) for i in range(6)]
    ag = choose(mixed, settings=[KEEP, always]).evidence["agreement"]["candidates"]
    assert (ag["pairs"], ag["agree"]) == (18, 12) and ag["share"] == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------- old records
def test_old_records_replay_by_words_and_reproduce_the_seed8_validation():
    """The committed seed-8 records have no gold_loglik: they replay by words (the default falls back and
    says so; asking for dense is a clear error). The full grid by words reproduces the validation's own
    held-out folds (results/tune_validation_seed8/report.json)."""
    recs = _seed8("squad_llamaindex")
    assert not any("gold_loglik" in row for rec in recs for row in rec["scored"])
    fallback = choose(recs)
    assert fallback.evidence["choose_by"] == "words" and "unavailable" in fallback.evidence["dense_note"]
    assert "unavailable" in fallback.summary() and "dense judge: not in these records" in fallback.summary()
    assert fallback.evidence["gain"]["shipped"]["dense"] is None and fallback.evidence["agreement"] is None
    with pytest.raises(ValueError, match="choose_by='words'"):
        choose(recs, choose_by="dense")
    with pytest.raises(ValueError, match="choose_by"):
        choose(recs, choose_by="loglik")
    with open(os.path.join(SEED8, "report.json"), encoding="utf-8") as f:
        [want] = [s["tuned"] for s in json.load(f)["sets"] if (s["data"], s["prompt"]) == ("squad", "llamaindex")]
    got = choose(recs, settings="full", choose_by="words")
    cv = got.evidence["cross_validation"]
    assert got.decision == want["decision"] and (cv["wins"], cv["losses"]) == (want["wins"], want["losses"])
    assert [f["setting"] for f in cv["per_fold"]] == [f["setting"] for f in want["per_fold"]]


# ---------------------------------------------------------------------------------------------- the grids
def test_the_small_grid_is_the_default_and_the_full_grid_reachable():
    small, full = small_grid(), grid()
    assert small[:2] == [KEEP, SHIPPED] and len(set(small)) == len(small) and 20 <= len(small) <= 40
    assert set(small) <= set(full) and len(full) > 1000
    assert grid_named("small") == small and grid_named("full") == full
    with pytest.raises(ValueError, match="grid must be one of"):
        grid_named("medium")
    assert inspect.signature(tune).parameters["grid"].default == "small"
    assert inspect.signature(choose).parameters["choose_by"].default is None
    recs = _seed8("nq_readme")[:12]
    assert choose(recs).evidence["grid"] == len(small)
    from grogu.apps.tune.judging import answered_words
    from grogu.apps.tune.replay import outcomes

    both = outcomes(recs[:4], answered_words, [KEEP, *full[2:40], SHIPPED])
    alone = outcomes(recs[:4], answered_words, [KEEP, SHIPPED])
    assert vars(both.only([KEEP, SHIPPED])) == vars(alone)  # a smaller grid's outcomes without replaying
    assert choose(recs, settings="full").evidence["grid"] == len(full)
    import argparse

    from grogu.apps.tune.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--examples", "x", "--out", "y"])
    assert args.grid == "small" and args.choose_by is None
    assert p.parse_args(["--examples", "x", "--out", "y", "--grid", "full", "--choose-by", "words"]).grid == "full"


def test_tune_writes_the_gain_line_and_the_dense_evidence(tiny_engine, tmp_path):
    """End to end on the tiny model: the records hold the dense judge, tune chooses by it, and the gain's
    line is in report.txt, report.html, the summary and the settings file's evidence."""
    exs = with_shared_data(_examples, 4)
    tuned = tune(exs, tiny_engine, PROMPT, 3, str(tmp_path), max_new_tokens=4, progress=False)
    lines = [json.loads(line) for line in open(tmp_path / "records.jsonl")]
    assert all(isinstance(row["gold_loglik"], float) for rec in lines for row in rec["scored"])
    e = tuned.evidence
    assert e["choose_by"] == "dense" and e["gain"]["tuned"]["dense"] is not None and e["grid"] == len(small_grid())
    line = e["gain"]["line"]
    assert "pts of accuracy over the retriever's order (90%" in line and "dense judge" in line
    assert line in (tmp_path / "report.txt").read_text()
    html = (tmp_path / "report.html").read_text()
    assert "dense judge" in html and "gold log-lik" in html
    saved = json.loads((tmp_path / "settings.json").read_text())
    assert saved["evidence"]["gain"]["line"] == line and "questions_needed" in saved["evidence"]["gain"]["shipped"]


@pytest.mark.parametrize(
    "bad", [{"grid": "medium"}, {"choose_by": "loglik"}, {"incumbent": "best"}], ids=["grid", "choose_by", "incumbent"]
)
def test_a_wrong_grid_judge_or_incumbent_fails_before_any_model_loads(bad, monkeypatch):
    """Collection is the slow part: a typo in a choice of the rule fails before it starts."""
    from grogu.apps.tune import api

    def no_model(*args, **kwargs):
        raise AssertionError("the scorer was built before the settings were checked")

    monkeypatch.setattr(api, "build_scorer", no_model)
    examples = [
        {"question": f"Who {i}?", "answers": ["Ann"], "documents": ["Ann did.", "Bob did not."]} for i in range(4)
    ]
    with pytest.raises(ValueError, match=next(iter(bad))):
        tune(examples, "smollm2-135m-instruct", **bad, progress=False)
