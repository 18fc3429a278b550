"""The held-out samples stay held out: each is a frozen list of question ids (benchmarks/samples); the
draws that exclude earlier samples read those lists and reproduce the committed records exactly; the
union files are exactly the union; and samples overlap only where docs/benchmarks.md says they do."""

from __future__ import annotations

import itertools
import json
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
sys.path.insert(0, BENCH)
import held_out  # noqa: E402
import pipeline_accuracy  # noqa: E402


def _record_ids(path: str) -> list[str]:
    out: list[str] = []
    with open(os.path.join(BENCH, "results", path), encoding="utf-8") as f:
        for line in f:
            qid = json.loads(line)["qid"]
            if qid not in out:
                out.append(qid)
    return out


def test_the_entry_point_draw_reproduces_its_records():
    """entry_points.py's SQuAD draw at this commit gives the committed seed-3 records' questions, in order."""
    import entry_points

    _, questions = entry_points.load("squad", 150, None)
    assert [q["qid"] for q in questions] == _record_ids("entry_langchain_squad.jsonl")
    assert [q["qid"] for q in questions[:30]] == _record_ids("entry_service_squad.jsonl")


def test_the_seed2_sample_is_the_draw_that_left_out_seeds_0_and_1():
    _, drawn = pipeline_accuracy.squad_questions("held", 150, 2, set(held_out.frozen("squad_accuracy_seed0_1")))
    assert [q["qid"] for q in drawn] == held_out.frozen("squad_selective_seed2")


def test_frozen_samples_match_their_records():
    for name, records in [
        ("squad_entry_points_seed3", "entry_langchain_squad.jsonl"),
        ("nq_entry_points_seed3", "entry_langchain_nq.jsonl"),
        ("hotpotqa-dev_entry_points_seed3", "entry_langchain_hotpotqa.jsonl"),
        ("squad_cost_seed3", "cost_whole_query_squad.jsonl"),
        ("nq_cost_seed3", "cost_whole_query_nq.jsonl"),
        ("squad_cost_seed4", "cost_whole_query_seed4_squad.jsonl"),
        ("nq_cost_seed4", "cost_whole_query_seed4_nq.jsonl"),
        ("squad_audit_seed5", "audit_signals/records_squad_held_smollm2-135m-instruct.jsonl"),
        ("nq_audit_seed5", "audit_signals/records_nq_held_smollm2-135m-instruct.jsonl"),
        ("squad_prompt_gate_seed6", "prompt_gate/squad_held.jsonl"),
        ("nq_prompt_gate_seed6", "prompt_gate/nq_held.jsonl"),
        ("hotpotqa-dev_prompt_gate_seed6", "prompt_gate/hotpotqa_held.jsonl"),
    ]:
        assert held_out.frozen(name) == _record_ids(records), name
        assert len(set(held_out.frozen(name))) == len(held_out.frozen(name)), name


def test_samples_overlap_only_where_documented():
    """Samples of one data set are disjoint, but for the overlaps docs/benchmarks.md reports (a later
    sample whose exclusion lacked an earlier one); those share exactly the questions counted there."""
    for data in ("squad", "nq", "hotpotqa-dev"):
        names = held_out.sample_names(data)
        for a, b in itertools.combinations(names, 2):
            shared = len(set(held_out.frozen(a)) & set(held_out.frozen(b)))
            known = held_out.KNOWN_OVERLAPS.get((a, b), held_out.KNOWN_OVERLAPS.get((b, a), 0))
            assert shared == known, (a, b, shared)
    assert len(held_out.sample_names("squad")) == 10 and len(held_out.sample_names("nq")) == 8
    assert len(held_out.sample_names("hotpotqa-dev")) == 2
    for data in ("squad", "nq", "hotpotqa-dev"):  # every sample has its place in the draw order
        assert all(held_out.purpose(n) in held_out.ORDER for n in held_out.sample_names(data))


def test_a_stable_draw_only_skips_what_a_later_exclusion_adds():
    """held_out.stable_draw: excluding more ids removes just those ids from a draw; the other questions keep
    their order, and the draw is topped up from the same permutation. So a frozen sample added later never
    moves an earlier draw."""
    import random

    permuted = [{"qid": f"q{i}"} for i in random.Random(3).sample(range(200), 200)]
    first = held_out.stable_draw(permuted, 20, {"q5", "q7"})
    later_exclusion = {"q5", "q7"} | {q["qid"] for q in first[3:6]} | {"q150", "q151"}
    second = held_out.stable_draw(permuted, 20, later_exclusion)
    kept = [q for q in first if q["qid"] not in later_exclusion]
    assert second[: len(kept)] == kept and len(second) == 20
    assert not {q["qid"] for q in second} & later_exclusion
    order = [q["qid"] for q in permuted]
    assert [order.index(q["qid"]) for q in second] == sorted(order.index(q["qid"]) for q in second)


def test_the_tune_validation_draws_reproduce_their_frozen_samples(monkeypatch):
    """tune_validation.py's SQuAD draws (stable draws leaving out every sample drawn before them) give their
    frozen samples, and share no question with an earlier one."""
    import tune_validation

    for seed in (7, 8):
        monkeypatch.setattr(tune_validation, "SEED", seed)
        _, drawn = tune_validation.draw("squad", None)
        frozen = held_out.frozen(f"squad_tune_validation_seed{seed}")
        assert [q["qid"] for q in drawn] == frozen
        before = held_out.drawn_before("squad", f"tune_validation_seed{seed}")
        earlier = set().union(*(held_out.frozen(n) for n in before))
        assert len(frozen) == 150 and not earlier & set(frozen)


def test_the_union_files_are_the_union():
    for data in ("squad", "nq"):
        union = set().union(*(held_out.frozen(n) for n in held_out.sample_names(data)))
        path = os.path.join(held_out.SAMPLES, f"{data}_held_earlier.txt")
        assert pipeline_accuracy.excluded_ids([path]) == union


def test_the_prompt_gate_draw_leaves_every_earlier_sample_out_and_reproduces_its_records():
    """prompt_gate.py's SQuAD draw at this commit gives the committed held-out records' questions, in order,
    and none of them is in an earlier frozen sample."""
    from types import SimpleNamespace

    import prompt_gate

    args = SimpleNamespace(split="held", data="squad", data_file=None, questions=150, seed=6)
    _, drawn = prompt_gate.questions_of(args)
    frozen = held_out.frozen("squad_prompt_gate_seed6")
    assert [q["qid"] for q in drawn][: len(frozen)] == frozen == _record_ids("prompt_gate/squad_held.jsonl")
    earlier = set().union(*(held_out.frozen(n) for n in held_out.sample_names("squad") if "prompt_gate" not in n))
    assert not earlier & set(frozen)
