"""ΔSePer and ACU: the math by hand, and the scorers against independently computed references."""

from __future__ import annotations

import math

import pytest
import torch
from grogu_research.naive import forward_stats

from grogu.metrics.acu import ACUScorer, acu, delta_p
from grogu.metrics.seper import NLIEntailment, SePerScorer, hard_belief, hard_clusters, sample_weights, soft_belief
from grogu.runtime.engine import Generation


def _gen(tokens, logprobs, stop_lp=None):
    lp = torch.tensor(logprobs, dtype=torch.float32)
    return Generation(
        token_ids=tokens,
        entropy=torch.zeros(len(tokens)),
        logprob=lp,
        stop_token_id=2 if stop_lp is not None else None,
        stop_logprob=stop_lp,
    )


def test_sample_weights_by_hand():
    gens = [
        _gen([5, 6], [-1.0, -1.0], stop_lp=-1.0),  # mean -1
        _gen([7], [-3.0]),  # mean -3 (no stop token)
        _gen([], [], stop_lp=-2.0),
    ]  # empty answer: its stop token, mean -2
    w = sample_weights(gens)
    z = math.exp(-1) + math.exp(-3) + math.exp(-2)
    assert w.tolist() == pytest.approx([math.exp(-1) / z, math.exp(-3) / z, math.exp(-2) / z])


def test_soft_and_hard_beliefs_by_hand():
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    assert soft_belief(w, torch.tensor([1.0, 0.5, 0.0])) == pytest.approx(0.65)
    pair = torch.tensor([[1.0, 0.9, 0.1], [0.8, 1.0, 0.2], [0.1, 0.3, 1.0]])
    assert hard_clusters(pair, tau=0.5) == [0, 0, 1]
    assert hard_clusters(pair, tau=0.85) == [0, 1, 2]  # 0.8 < 0.85: not bidirectional
    # cluster 0's head entails the reference both ways, cluster 1's does not
    assert hard_belief(w, [0, 0, 1], torch.tensor([0.9, 0.9]), torch.tensor([0.7, 0.2]), 0.5) == pytest.approx(0.8)


def _answer_kernel(premises, hypotheses):
    """Deterministic, asymmetric stub kernel with values spread over [0, 0.9] (so that soft beliefs,
    directions and clusters are all exercised with random-model samples)."""
    return [((len(p) * 7 + len(h) * 3) % 10) / 10 for p, h in zip(premises, hypotheses)]


@pytest.fixture(scope="module")
def seper(tiny_engine):
    return SePerScorer(tiny_engine, entailment=_answer_kernel, n_samples=4, max_new_tokens=5, seed=11)


def _expected_beliefs(engine, query, prompt, gens, ref, tau=0.5):
    """Soft and hard belief recomputed by hand: weights from an independent teacher-forced pass."""
    means = []
    for g in gens:
        tokens = g.token_ids + ([g.stop_token_id] if g.finished else [])
        means.append(float(forward_stats(engine.model, prompt, tokens)[1].double().mean()))
    w = torch.softmax(torch.tensor(means, dtype=torch.float64), 0)
    qa, qr = [f"{query} {g.text}" for g in gens], f"{query} {ref}"
    e = lambda a, b: _answer_kernel([a], [b])[0]  # noqa: E731
    soft = sum(float(w[i]) * max(e(a, qr), e(qr, a)) for i, a in enumerate(qa))
    heads, members = [], []
    for i, a in enumerate(qa):
        for c, h in enumerate(heads):
            if e(a, qa[h]) >= tau and e(qa[h], a) >= tau:
                members[c].append(i)
                break
        else:
            heads.append(i)
            members.append([i])
    hard = sum(
        float(w[i]) for c, h in enumerate(heads) if e(qa[h], qr) >= tau and e(qr, qa[h]) >= tau for i in members[c]
    )
    return soft, hard


def test_seper_equals_reference_computation(seper, tiny_engine):
    from grogu import Document

    query, docs, ref = "Which river flows through Prague?", ["The Vltava flows through Prague.", "Bananas."], "Vltava"
    res = seper.score(query, docs, [ref])
    assert [r.samples_with for r in res] == [r.samples_with for r in seper.score(query, docs, [ref])]  # seeded
    prompts = [seper.prompts.ungrounded_ids(query)] + [seper.prompts.grounded_ids(query, [Document(d)]) for d in docs]
    gens = tiny_engine.generate([p for p in prompts for _ in range(4)], 5, temperature=1.0, seed=11)
    groups = [gens[i * 4 : (i + 1) * 4] for i in range(3)]
    soft0, hard0 = _expected_beliefs(tiny_engine, query, prompts[0], groups[0], ref)
    assert 0 < soft0 < 1  # the stub kernel gives a non-trivial belief
    for r, prompt, group in zip(res, prompts[1:], groups[1:]):
        assert r.samples_with == [g.text for g in group]
        soft, hard = _expected_beliefs(tiny_engine, query, prompt, group, ref)
        assert (r.p_soft_with, r.p_hard_with) == pytest.approx((soft, hard), abs=1e-5)
        assert (r.p_soft_without, r.p_hard_without) == pytest.approx((soft0, hard0), abs=1e-5)
        assert r.delta_soft == pytest.approx(soft - soft0, abs=1e-5)
        assert r.delta_hard == pytest.approx(hard - hard0, abs=1e-5)


def test_seper_beliefs_with_a_kernel_that_always_agrees(tiny_engine):
    s = SePerScorer(tiny_engine, entailment=lambda p, h: [1.0] * len(p), n_samples=3, max_new_tokens=4)
    r = s.score_context("q?", ["a doc"], ["anything", "else"])
    # every sample entails every reference and each other: one cluster holding all the weight
    assert (r.p_soft_with, r.p_hard_with, r.p_soft_without, r.delta_soft, r.delta_hard) == pytest.approx(
        (1, 1, 1, 0, 0)
    )


def test_seper_bad_input(seper):
    with pytest.raises(ValueError, match="reference-based"):
        seper.score("q?", ["doc"], [])
    with pytest.raises(ValueError, match="reference-based"):
        seper.score("q?", ["doc"], ["  "])
    with pytest.raises(ValueError, match="reference answer 1 is empty"):  # not dropped from the average
        seper.score("q?", ["doc"], ["Paris", ""])
    with pytest.raises(TypeError, match="reference answer 1 must be a str"):
        seper.score("q?", ["doc"], ["Paris", 42])
    with pytest.raises(TypeError, match="references must be"):
        seper.score("q?", ["doc"], 42)
    with pytest.raises(ValueError, match="tau"):
        SePerScorer(seper.target, entailment=seper.kernel, tau=1.5)
    assert seper.score("q?", [], ["ref"]) == []


def test_nli_entailment_tiny_classifier(tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from grogu.runtime.models import embedded_embedder_path

    tok = AutoTokenizer.from_pretrained(embedded_embedder_path())
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    model = BertForSequenceClassification(cfg).eval()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    nli = NLIEntailment(str(tmp_path), batch_size=2)
    assert nli.entailment_index == 2
    prem, hyp = ["a cat sat", "the sky is blue today", "x"], ["a cat", "it rains", "y z"]
    got = nli(prem, hyp)
    for p, h, g in zip(prem, hyp, got):
        enc = tok(p, h, return_tensors="pt")
        assert g == pytest.approx(float(torch.softmax(model(**enc).logits.detach(), -1)[0, 2]), abs=1e-5)
    model.config.id2label = {0: "A", 1: "B", 2: "C"}
    with pytest.raises(ValueError, match="entail"):
        NLIEntailment((model, tok))


def test_delta_p_and_acu_by_hand():
    assert delta_p(0.6, 0.2) == pytest.approx(0.5)  # (0.6 - 0.2) / 0.8
    assert delta_p(0.1, 0.4) == pytest.approx(-0.75)  # (0.1 - 0.4) / 0.4
    assert delta_p(1.0, 1.0) == 0.0
    p_with = {"True": 0.6, "None": 0.1, "False": 0.3}
    p_without = {"True": 0.2, "None": 0.4, "False": 0.3}
    assert acu(p_with, p_without, "True") == pytest.approx((0.5 + 0.75 - 0.0) / 3)
    assert acu(p_with, p_without, "None") == pytest.approx((-0.5 - 0.75 - 0.0) / 3)


def test_acu_scorer_against_manual_probabilities(tiny_engine):
    scorer = ACUScorer(tiny_engine)
    claim, evidence = "The Vltava flows through Prague.", "Prague lies on the Vltava river."
    r = scorer.score(claim, evidence, "SUPPORTS")
    assert r.raised == "True" and -1 <= r.acu <= 1
    tok = tiny_engine.tokenizer
    for key, text in (
        ("p_with", scorer.prompt_with.format(claim=claim, evidence=evidence)),
        ("p_without", scorer.prompt_without.format(claim=claim)),
    ):
        ids = scorer._prompt(text)
        probs = torch.softmax(tiny_engine.model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        for lab in ("True", "None", "False"):
            variants = {
                tok.encode(v, add_special_tokens=False)[0]
                for v in (lab, " " + lab)
                if len(tok.encode(v, add_special_tokens=False)) == 1
            }
            assert getattr(r, key)[lab] == pytest.approx(float(sum(probs[i] for i in variants).detach()), abs=1e-5)
    assert r.acu == pytest.approx(acu(r.p_with, r.p_without, "True"))
    # batched with another row (padding): float32 sums differ in the last digits, as the probabilities above
    batch = scorer.score_batch([(claim, evidence, "SUPPORTS"), (claim, "", "NOT ENOUGH")])
    assert batch[0].acu == pytest.approx(r.acu, abs=1e-5) and batch[1].raised == "None"


def test_acu_bad_input(tiny_engine):
    with pytest.raises(ValueError, match="closest tokens"):
        ACUScorer(tiny_engine, labels=("True", "Zyxwvutsrqponm"))
    scorer = ACUScorer(tiny_engine)
    with pytest.raises(ValueError, match="unknown stance"):
        scorer.score("claim", "evidence", "MAYBE")
    with pytest.raises(ValueError, match="claim is empty"):
        scorer.score(" ", "evidence", "SUPPORTS")
    with pytest.raises(TypeError):
        scorer.score("claim", None, "SUPPORTS")
