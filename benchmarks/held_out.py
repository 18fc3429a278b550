"""The held-out samples the benchmarks drew, frozen: one file per sample in ``benchmarks/samples``
(``<data>_<purpose>_seed<N>.txt``), the question ids in draw order, written once when the sample is
drawn and never edited. Excluding earlier samples reads these lists; it never redraws a sample from a
list that has grown since.

``<data>_held_earlier.txt`` is the union of a data set's frozen samples (``--exclude`` it before a fresh
draw); ``tests/test_samples.py`` checks it is exactly that union, that the SQuAD draws reproduce their
records, and which samples overlap (the ones that do are listed in :data:`KNOWN_OVERLAPS`).
"""

from __future__ import annotations

import glob
import os

SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "samples")
#: the union file of each data set (not a sample itself)
UNION = "held_earlier"
#: samples that share questions although the later one meant to leave the earlier out, with how many
#: they share (the later sample's exclusion list lacked the earlier one). Reported in docs/benchmarks.md.
KNOWN_OVERLAPS = {
    ("squad_selective_seed2", "squad_cost_seed3"): 14,
    ("squad_selective_seed2", "squad_audit_seed5"): 14,
    ("squad_selective_seed2", "squad_cost_seed4"): 13,
    ("squad_entry_points_seed3", "squad_audit_seed5"): 6,
    ("nq_entry_points_seed3", "nq_audit_seed5"): 6,
    ("nq_cost_seed3", "nq_audit_seed5"): 2,
}


#: every sample's purpose, in the order the samples were drawn. A draw that leaves out "every earlier
#: sample" reads :func:`drawn_before`, never "every sample but mine", so a sample frozen later does not
#: change it. Append a new sample's purpose here when it is drawn.
ORDER = (
    "accuracy_seed0_1",
    "selective_seed2",
    "cost_seed3",
    "entry_points_seed3",
    "cost_seed4",
    "audit_seed5",
    "prompt_gate_seed6",
    "tune_validation_seed7",
    "tune_validation_seed8",
    "tune_validation_seed9",
)


def purpose(name: str) -> str:
    """A sample's purpose: its name without the data set (``squad_cost_seed3`` -> ``cost_seed3``)."""
    return next(p for p in ORDER if name.endswith("_" + p))


def drawn_before(data: str, this: str) -> list[str]:
    """The frozen samples of ``data`` drawn before the sample whose purpose is ``this`` (:data:`ORDER`)."""
    limit = ORDER.index(this)
    return [n for n in sample_names(data) if ORDER.index(purpose(n)) < limit]


def frozen(name: str) -> list[str]:
    """The question ids of one frozen sample, in draw order."""
    with open(os.path.join(SAMPLES, f"{name}.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def has(name: str) -> bool:
    return os.path.exists(os.path.join(SAMPLES, f"{name}.txt"))


def sample_names(data: str) -> list[str]:
    """The frozen samples of a data set (``squad``, ``nq``, ``hotpotqa-dev``), by name."""
    names = [os.path.basename(p)[:-4] for p in glob.glob(os.path.join(SAMPLES, f"{data}_*.txt"))]
    return sorted(n for n in names if n != f"{data}_{UNION}")


def stable_draw(permuted: list[dict], n: int, exclude: set[str]) -> list[dict]:
    """The first ``n`` questions of a fixed permutation that are not in ``exclude``.

    ``permuted`` is one data set's split shuffled once by a seed, with nothing excluded (for example
    ``squad_questions("held", 10**9, seed)``). A draw then never depends on what else was excluded before
    it: excluding more ids later only skips those ids, so the other questions keep their places, and an
    earlier sample reproduces from its commit and its own exclusion list."""
    return [q for q in permuted if q["qid"] not in exclude][:n]
