"""DPO pairs from scored rewrites (plain logic, no model): the highest against the lowest GROGU
rewrite of a turn, and the rule that drops the pairs with the smallest gap."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from grogu.rerank.selection import argmax

DEFAULT_DROP_RATIO = 0.5


def check_drop_ratio(drop_ratio: float) -> float:
    """``drop_ratio`` in [0, 1); a ValueError naming it otherwise."""
    if not 0 <= drop_ratio < 1:
        raise ValueError(f"drop_ratio must be in [0, 1), got {drop_ratio}")
    return drop_ratio


@dataclass(frozen=True)
class PreferencePair:
    """A DPO pair of one turn: the highest- against the lowest-GROGU rewrite."""

    turn_index: int
    prompt: str
    chosen: str
    rejected: str
    chosen_score: float
    rejected_score: float

    @property
    def gap(self) -> float:
        """GROGU gap chosen - rejected (>= 0, in the metric's units)."""
        return self.chosen_score - self.rejected_score

    def record(self) -> dict[str, str]:
        """The TRL preference record."""
        return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}


def best_and_worst(scores: Sequence[float]) -> tuple[int, int] | None:
    """(index of the highest score, index of the lowest); ties go to the earlier candidate. None when
    there are fewer than two candidates or all scores are equal (no preference to learn)."""
    if len(scores) < 2:
        return None
    best = argmax(scores)
    worst = min(range(len(scores)), key=lambda i: (scores[i], i))
    if not scores[best] > scores[worst]:
        return None
    return best, worst


def drop_smallest_gaps(
    pairs: Sequence[PreferencePair], drop_ratio: float = DEFAULT_DROP_RATIO
) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(kept, dropped): drop the floor(drop_ratio * n) pairs with the smallest GROGU gap (ties: the
    earlier pair is dropped first); both lists keep the input order."""
    check_drop_ratio(drop_ratio)
    n_drop = math.floor(round(drop_ratio * len(pairs), 9))
    by_gap = sorted(range(len(pairs)), key=lambda i: (pairs[i].gap, i))
    dropped = set(by_gap[:n_drop])
    return ([p for i, p in enumerate(pairs) if i not in dropped], [p for i, p in enumerate(pairs) if i in dropped])


__all__ = ["PreferencePair", "best_and_worst", "drop_smallest_gaps", "check_drop_ratio", "DEFAULT_DROP_RATIO"]
