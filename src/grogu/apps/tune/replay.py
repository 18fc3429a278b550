"""Replay: a rerank setting on the collected records, decided exactly as the rerank pipeline decides.

For each record and setting, the setting's candidates are taken from the record (they are a subset of the
ones collected), and :func:`grogu.rerank.decide` chooses among them, gate included. The chosen candidate's
recorded answer is the answer the pipeline would give. Its cost is read from the record's seconds: the
retriever's context answered and teacher-forced, plus, where the setting answers other candidates, their
share of the record's other candidates' seconds. The plain pipeline's cost is the first answer alone.

:func:`grid` lists the settings tune tries. The first is ``keep`` (the retriever's order: nothing
changes; the context is still scored and its verdict read), the second the shipped default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...rerank import settings as rerank
from ...rerank.settings import ModeSettings
from .judging import answer_f1, answer_words

#: the families replayed: each a subset of the collected candidates (swap_orders, two swaps)
FAMILIES = (
    ("reversed", 2),
    ("swap", 1),
    ("swap", 2),
    ("swap_reversed", 1),
    ("swap_reversed", 2),
    ("swap_orders", 1),
    ("swap_orders", 2),
)
#: the gate's floors tried under gate="doubt": (support, confidence, entropy change)
GATE_SUPPORT = (0.5, 0.8, 1.0)
GATE_CONFIDENCE = (0.2, 0.4, 0.6)
GATE_ENTROPY_CHANGE = (None, 0.0)
#: (rule, margin) pairs: margins on each rule's own scale (agreement is in [0, 1])
RULES = (
    ("confidence_support", 0.0),
    ("confidence_support", 0.3),
    ("confidence_support", 1.0),
    ("confidence", 0.0),
    ("confidence", 0.3),
    ("confidence", 1.0),
    ("agreement", 0.0),
    ("agreement", 0.1),
    ("agreement", 0.3),
)
KEEP = ModeSettings(family="keep")
SHIPPED = ModeSettings()


def setting_name(s: ModeSettings) -> str:
    """A short readable name of a context-mode setting."""
    if s.family == "keep":
        return "keep (the retriever's order)"
    family = s.family if s.family == "reversed" else f"{s.family}/{s.swaps}"
    if s.gate == "always":
        gate = "always"
    else:
        gate = f"doubt s<{s.gate_support:g} c<{s.gate_confidence:g}"
        if s.gate_entropy_change is not None:
            gate += f" ec<{s.gate_entropy_change:g}"
    return f"{family}, {gate}, {s.rule} +{s.margin:g}"


def grid() -> list[ModeSettings]:
    """The settings tune tries: keep, the shipped default, then every family × gate × rule and margin."""
    out = [KEEP, SHIPPED]
    gates = [dict(gate="always")] + [
        dict(gate="doubt", gate_support=s, gate_confidence=c, gate_entropy_change=e)
        for s in GATE_SUPPORT
        for c in GATE_CONFIDENCE
        for e in GATE_ENTROPY_CHANGE
    ]
    seen = set(out)
    for family, swaps in FAMILIES:
        for gate in gates:
            for rule, margin in RULES:
                s = ModeSettings(family=family, swaps=swaps, rule=rule, margin=margin, **gate)
                if s not in seen:
                    seen.add(s)
                    out.append(s)
    return out


class RecordedScore:
    """A recorded candidate as :func:`grogu.rerank.decide` reads it: its answer and its metrics."""

    __slots__ = ("answer", "variants", "metric", "score")

    def __init__(self, row: dict[str, Any], metric: str) -> None:
        self.answer = row["answer"]
        self.variants = row["variants"]
        self.metric = metric
        self.score = row["variants"].get(metric)


@dataclass(frozen=True)
class Choice:
    """What a setting does on one record: the chosen candidate (its position in the record), how many
    contexts it answered, and whether the gate was in doubt (None: no gate)."""

    candidate: int
    answered: int
    in_doubt: bool | None


def replay(settings: ModeSettings, record: dict[str, Any], grounded_only: bool = False) -> Choice:
    """The pipeline's decision under ``settings`` on one record."""
    s = settings if settings.context_metric != "auto" else settings.for_target(grounded_only)
    texts, top_n = record["texts"], record["top_n"]
    base = list(range(len(texts)))
    contexts = rerank.plan(s, base, top_n)
    where = {tuple(c): i for i, c in enumerate(record["candidates"])}
    try:
        rows = [where[tuple(c)] for c in contexts]
    except KeyError:
        raise ValueError(f"{settings.family!r} tries a context the records do not hold") from None
    scored = [RecordedScore(record["scored"][i], s.context_metric) for i in rows]
    sel = rerank.decide(s, base, contexts, scored, top_n, None, None, texts)
    answered = 1 if sel.doubt is False else len(contexts)
    return Choice(rows[sel.chosen], answered, sel.doubt)


def seconds(record: dict[str, Any], answered: int) -> float:
    """Seconds of a setting's work on a record: the first context answered and forced, and its share of
    the other candidates' seconds (``answered - 1`` of them)."""
    t = record["seconds"]
    others = len(record["candidates"]) - 1
    share = (answered - 1) / others if others else 0.0
    return t["answer_first"] + t["force_first"] + share * t["rest"]


@dataclass
class Outcomes:
    """Each setting's result on each record (``[setting][record]``): right or wrong, seconds (the plain
    answer's seconds are ``plain``), token F1, answer words, whether the context changed, whether in doubt."""

    settings: list[ModeSettings]
    ids: list[str]
    correct: list[list[bool]]
    seconds: list[list[float]]
    plain: list[float]
    f1: list[list[float]]
    words: list[list[int]]
    changed: list[list[bool]]
    in_doubt: list[list[bool | None]]

    def index(self, settings: ModeSettings) -> int:
        return self.settings.index(settings)


def outcomes(
    records: Sequence[dict[str, Any]],
    judge: Callable[[str, list[str]], bool],
    settings: Sequence[ModeSettings] | None = None,
    grounded_only: bool = False,
) -> Outcomes:
    """Every setting (default: :func:`grid`) replayed on every record, judged by ``judge(answer, answers)``."""
    settings = list(grid() if settings is None else settings)
    judged = [[bool(judge(row["answer"], list(rec["answers"]))) for row in rec["scored"]] for rec in records]
    f1s = [[answer_f1(row["answer"], rec["answers"]) for row in rec["scored"]] for rec in records]
    words = [[answer_words(row["answer"]) for row in rec["scored"]] for rec in records]
    out = Outcomes(
        settings, [r["id"] for r in records], [], [], [r["seconds"]["answer_first"] for r in records], [], [], [], []
    )
    for s in settings:
        resolved = s.for_target(grounded_only)
        choices = [replay(resolved, rec, grounded_only) for rec in records]
        out.correct.append([judged[r][c.candidate] for r, c in enumerate(choices)])
        out.seconds.append([seconds(rec, c.answered) for rec, c in zip(records, choices)])
        out.f1.append([f1s[r][c.candidate] for r, c in enumerate(choices)])
        out.words.append([words[r][c.candidate] for r, c in enumerate(choices)])
        out.changed.append([c.candidate != 0 for c in choices])
        out.in_doubt.append([c.in_doubt for c in choices])
    return out


__all__ = ["grid", "replay", "outcomes", "Outcomes", "Choice", "setting_name", "seconds", "KEEP", "SHIPPED"]
