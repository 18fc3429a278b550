"""The choice of a setting, by a rule fixed here before any label is read.

**Pick** (:func:`pick`), on some questions: the setting with the most net wins over the retriever's order
(``keep``): questions it gets right and keep gets wrong, minus the reverse. Only settings whose cost,
relative to the plain answer (total seconds over the plain answers' total), is at most ``max_cost`` take
part; keep always does. Ties go to the cheaper setting, then to the earlier one in the grid (keep first,
then the shipped default). So a setting must win something to replace keep.

**Cross-validation.** The judged questions are dealt into folds (by a hash of their ids, so the folds do not
depend on the order of the file). For each fold, a setting is picked on the other folds and judged on this
one. Every question is then judged once by a setting that was not picked on it. Those held-out answers
against keep's give wins and losses.

**Guard.** The tuned setting is adopted only when, on the held-out folds, it wins more than it loses and
the one-sided exact sign test gives p <= :data:`GUARD_P` (0.2). Else the result is ``keep``. Why 0.2: the
guard must stop a setting that gains nothing. Under "no gain", each discordant question is a fair coin,
so at most 1 in 5 such settings passes. A real gain passes often at 50 questions: 7 wins to 2 losses gives
p = 0.09. A stricter level (0.05) would keep the retriever's order even where 7 : 2 was seen, and keep costs
little to use: nothing changes. The final setting is then picked on all judged questions.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..audit.stats import exact_sign_test
from .judging import answered_words, judgeable
from .replay import KEEP, SHIPPED, Outcomes, outcomes, setting_name

#: the guard's level: the one-sided sign test's p on the held-out folds must be at most this
GUARD_P = 0.2
#: the rule, as the settings file and the report state it
RULE = (
    "pick: the most net wins over the retriever's order among settings within the cost cap (ties: cheaper, "
    "then grid order); cross-validated over folds; adopted only if held-out wins > losses and the one-sided "
    f"exact sign test p <= {GUARD_P}, else the retriever's order is kept"
)


def one_sided_p(wins: int, losses: int) -> float:
    """P(at least ``wins`` of ``wins + losses`` fair coin flips): the one-sided exact sign test."""
    n = wins + losses
    if n == 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(wins, n + 1)) / 2.0**n


def cost(out: Outcomes, s: int, rows: Sequence[int]) -> float:
    """A setting's seconds on ``rows`` over the plain answers' seconds there (the ratio of the means)."""
    plain = sum(out.plain[r] for r in rows)
    return sum(out.seconds[s][r] for r in rows) / plain if plain > 0 else 1.0


def net_wins(out: Outcomes, s: int, rows: Sequence[int], base: int = 0) -> tuple[int, int]:
    """(wins, losses) of setting ``s`` against setting ``base`` (default keep) on ``rows``."""
    wins = sum(out.correct[s][r] and not out.correct[base][r] for r in rows)
    losses = sum(out.correct[base][r] and not out.correct[s][r] for r in rows)
    return wins, losses


def pick(out: Outcomes, rows: Sequence[int], max_cost: float | None) -> int:
    """The rule's pick on ``rows`` (module docstring): an index into ``out.settings``."""
    best, best_key = 0, None
    for s in range(len(out.settings)):
        c = cost(out, s, rows)
        if s != 0 and max_cost is not None and c > max_cost:
            continue
        w, l = net_wins(out, s, rows)
        key = (w - l, -c, -s)
        if best_key is None or key > best_key:
            best, best_key = s, key
    return best


def fold_of(ident: str, folds: int) -> int:
    """A question's fold: a hash of its id, so the folds do not depend on the file's order."""
    return int(hashlib.sha256(ident.encode("utf-8")).hexdigest(), 16) % folds


@dataclass
class Fold:
    """One fold: the setting picked on the other folds, and its wins and losses against keep (and the
    shipped default's) on this fold's questions."""

    index: int
    rows: list[int]
    chosen: int
    wins: int
    losses: int
    shipped_wins: int
    shipped_losses: int


@dataclass
class TuneResult:
    """What tune found: the settings to use, the decision, the evidence (written to the settings file), the
    replayed outcomes and the folds (for the report)."""

    settings: Any
    decision: str
    chosen: int
    evidence: dict[str, Any]
    outcomes: Outcomes
    rows: list[int]
    folds: list[Fold] = field(default_factory=list)
    held_out: dict[int, int] = field(default_factory=dict)  # row -> the setting picked without it

    def summary(self) -> str:
        """The result in a few lines (the command line prints it)."""
        e, cv = self.evidence, self.evidence["cross_validation"]
        keep = "the retriever's order is kept" if self.decision == "keep" else f"use: {e['chosen']}"
        lines = [
            f"grogu tune: {e['judged']} judged questions of {e['n']}, {e['folds']} folds; {keep}",
            f"  held-out folds, tuned vs retriever's order: {cv['wins']} wins, {cv['losses']} losses "
            f"(one-sided p = {cv['p_one_sided']:.3f}; adopt at p <= {GUARD_P})",
            f"  shipped default vs retriever's order (same folds): {e['shipped']['wins']} wins, "
            f"{e['shipped']['losses']} losses (p = {e['shipped']['p']:.3f})",
            f"  accuracy on all judged questions: retriever {e['accuracy']['keep']:.3f}, shipped "
            f"{e['accuracy']['shipped']:.3f}, chosen {e['accuracy']['chosen']:.3f} (chosen on these questions)",
            f"  cost relative to the plain answer: chosen {e['cost']['chosen']:.2f}x, shipped "
            f"{e['cost']['shipped']:.2f}x, retriever's order {e['cost']['keep']:.2f}x",
        ]
        return "\n".join(lines)


def default_judge(answer: str, answers: Sequence[str]) -> bool:
    return answered_words(answer, answers)


def choose(
    records: Sequence[dict[str, Any]],
    judge: Callable[[str, Sequence[str]], bool] | None = None,
    max_cost: float | None = None,
    folds: int = 5,
    grounded_only: bool = False,
    settings: Sequence[Any] | None = None,
) -> TuneResult:
    """Replay every setting on ``records`` and apply the rule (module docstring). ``settings``: the grid
    (default :func:`grogu.apps.tune.replay.grid`; keep must come first)."""
    out = outcomes(records, judge or default_judge, settings, grounded_only)
    if out.settings[0] != KEEP:
        raise ValueError("the grid must start with keep (the retriever's order)")
    rows = [r for r, rec in enumerate(records) if judge is not None or judgeable(rec["answers"])]
    if len(rows) < 4:
        raise ValueError(
            f"only {len(rows)} questions can be judged (words cannot judge yes/no answers: pass judge=); tune needs 4"
        )
    k = max(2, min(folds, len(rows) // 2))
    shipped = out.settings.index(SHIPPED) if SHIPPED in out.settings else None
    result_folds, held = [], {}
    for f in range(k):
        test = [r for r in rows if fold_of(out.ids[r], k) == f]
        train = [r for r in rows if fold_of(out.ids[r], k) != f]
        if not test:
            continue
        s = pick(out, train, max_cost)
        held.update({r: s for r in test})
        w, l = net_wins(out, s, test)
        sw, sl = net_wins(out, shipped, test) if shipped is not None else (0, 0)
        result_folds.append(Fold(f, test, s, w, l, sw, sl))
    wins = sum(f.wins for f in result_folds)
    losses = sum(f.losses for f in result_folds)
    p_one = one_sided_p(wins, losses)
    adopt = wins > losses and p_one <= GUARD_P
    chosen = pick(out, rows, max_cost) if adopt else 0
    decision = "tuned" if chosen != 0 else "keep"
    sw = sum(f.shipped_wins for f in result_folds)
    sl = sum(f.shipped_losses for f in result_folds)

    def acc(s: int) -> float:
        return sum(out.correct[s][r] for r in rows) / len(rows)

    evidence = {
        "n": len(records),
        "judged": len(rows),
        "folds": k,
        "rule": RULE,
        "judge": "whole words (grogu.apps.tune.judging.answered_words)" if judge is None else "the caller's",
        "max_cost": max_cost,
        "chosen": setting_name(out.settings[chosen]),
        "cross_validation": {
            "wins": wins,
            "losses": losses,
            "p_one_sided": p_one,
            "p_two_sided": exact_sign_test(wins, losses),
            "accuracy_tuned": sum(out.correct[held[r]][r] for r in rows) / len(rows),
            "accuracy_keep": acc(0),
            "adopted": adopt,
            "per_fold": [
                {
                    "fold": f.index,
                    "questions": len(f.rows),
                    "setting": setting_name(out.settings[f.chosen]),
                    "wins": f.wins,
                    "losses": f.losses,
                }
                for f in result_folds
            ],
        },
        "shipped": {"wins": sw, "losses": sl, "p": exact_sign_test(sw, sl)},
        "accuracy": {
            "keep": acc(0),
            "shipped": acc(shipped) if shipped is not None else None,
            "chosen": acc(chosen),
        },
        "cost": {
            "keep": cost(out, 0, rows),
            "shipped": cost(out, shipped, rows) if shipped is not None else None,
            "chosen": cost(out, chosen, rows),
        },
        "changed": sum(out.changed[chosen][r] for r in rows) / len(rows),
    }
    return TuneResult(out.settings[chosen], decision, chosen, evidence, out, rows, result_folds, held)


__all__ = ["choose", "pick", "one_sided_p", "cost", "net_wins", "fold_of", "TuneResult", "Fold", "GUARD_P", "RULE"]
