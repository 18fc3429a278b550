"""Replay: a rerank setting on the collected records, decided exactly as the rerank pipeline decides.

For each record and setting, the setting's candidates are taken from the record (they are a subset of the
ones collected), and :func:`grogu.rerank.decide` chooses among them, gate included. The chosen candidate's
recorded answer is the answer the pipeline would give. Its cost is read from the record's seconds: the
retriever's context answered and teacher-forced, plus, where the setting answers other candidates, their
share of the record's other candidates' seconds. The plain pipeline's cost is the first answer alone.

:func:`small_grid` lists the settings tune tries by default (26, each family of them said why);
:func:`grid` lists the full grid (about 1,200), which ``grid="full"`` selects. Each starts with ``keep``
(the retriever's order: nothing changes; the context is still scored and its verdict read), then the
shipped default.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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


def _shipped(**changes: Any) -> ModeSettings:
    return replace(SHIPPED, **changes)


#: the small grid's families: why each is there, and its settings (each a change of the shipped default).
#: With ~50 questions a fold has a handful of discordant questions, so every extra setting adds a chance
#: to win by luck. The small grid asks one question per family, a few answers each, around the default.
SMALL_GRID_FAMILIES: dict[str, tuple[str, list[ModeSettings]]] = {
    "anchors": ("the retriever's order and the shipped default: the two incumbents", [KEEP, SHIPPED]),
    "margin": (
        "how far a candidate must beat the retriever's context: a prompt may reward switching more or less",
        [_shipped(margin=0.0), _shipped(margin=1.0)],
    ),
    "gate": (
        "how often the retriever's context is doubted: the prompt and model change how sure and how "
        "grounded a right answer reads; narrower doubt is also cheaper (the cost cap)",
        [
            _shipped(gate="always"),
            _shipped(gate_support=0.5),
            _shipped(gate_support=1.0),
            _shipped(gate_confidence=0.2),
            _shipped(gate_confidence=0.6),
            _shipped(gate_support=0.5, gate_confidence=0.2),
            _shipped(gate_support=1.0, gate_confidence=0.6),
            _shipped(gate_entropy_change=0.0),
        ],
    ),
    "family": (
        "which contexts are tried: each candidate family with the default gate and rule; fewer candidates cost less",
        [
            _shipped(family="reversed"),
            _shipped(family="swap", swaps=1),
            _shipped(family="swap", swaps=2),
            _shipped(family="swap_reversed", swaps=1),
            _shipped(family="swap_reversed", swaps=2),
            _shipped(family="swap_orders", swaps=1),
        ],
    ),
    "rule": (
        "how the candidate is chosen: confidence alone (no support term), or the answers' agreement",
        [
            _shipped(rule="confidence", margin=0.0),
            _shipped(rule="confidence", margin=0.3),
            _shipped(rule="agreement", margin=0.0),
            _shipped(rule="agreement", margin=0.1),
        ],
    ),
    "always": (
        "every candidate on every question, with a higher bar or fewer candidates: the gate traded for the "
        "margin or the family",
        [
            _shipped(gate="always", margin=1.0),
            _shipped(gate="always", family="swap", swaps=1),
            _shipped(gate="always", family="reversed"),
            _shipped(gate="always", family="swap_reversed", swaps=2, rule="confidence", margin=0.0),
        ],
    ),
}


def small_grid() -> list[ModeSettings]:
    """Tune's default grid: keep, the shipped default, then the families of :data:`SMALL_GRID_FAMILIES`
    (distinct settings, each also in :func:`grid`)."""
    out: list[ModeSettings] = []
    for _, settings in SMALL_GRID_FAMILIES.values():
        out += [s for s in settings if s not in out]
    return out


#: the grids tune takes by name (``grid=``)
GRIDS = {"small": small_grid, "full": grid}


def grid_named(name: str) -> list[ModeSettings]:
    """The grid called ``name``: ``"small"`` (:func:`small_grid`) or ``"full"`` (:func:`grid`)."""
    if name not in GRIDS:
        raise ValueError(f"grid must be one of {tuple(GRIDS)}, got {name!r}")
    return GRIDS[name]()


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
    answer's seconds are ``plain``), token F1, answer words, whether the context changed, whether in doubt.

    ``candidate``: the candidate each setting ends on (a position in the record). ``loglik``: the dense
    judge of that candidate (its ``gold_loglik``), None when the records lack it. ``candidate_correct``
    and ``candidate_loglik`` (``[record][candidate]``): each candidate judged by words and densely."""

    settings: list[ModeSettings]
    ids: list[str]
    correct: list[list[bool]]
    seconds: list[list[float]]
    plain: list[float]
    f1: list[list[float]]
    words: list[list[int]]
    changed: list[list[bool]]
    in_doubt: list[list[bool | None]]
    loglik: list[list[float]] | None = None
    candidate: list[list[int]] = field(default_factory=list)
    candidate_correct: list[list[bool]] = field(default_factory=list)
    candidate_loglik: list[list[float]] | None = None

    @property
    def dense(self) -> bool:
        """Whether the dense judge is there (every record's every candidate holds ``gold_loglik``)."""
        return self.loglik is not None

    def index(self, settings: ModeSettings) -> int:
        return self.settings.index(settings)

    def only(self, settings: Sequence[ModeSettings]) -> "Outcomes":
        """These outcomes for ``settings`` alone (each replayed here), in that order: a smaller grid's
        outcomes without replaying again."""
        at = [self.index(s) for s in settings]

        def rows(table: Any) -> Any:
            return [table[i] for i in at] if table else table  # None, or [] where not filled

        return Outcomes(
            [self.settings[i] for i in at],
            self.ids,
            rows(self.correct),
            rows(self.seconds),
            self.plain,
            rows(self.f1),
            rows(self.words),
            rows(self.changed),
            rows(self.in_doubt),
            rows(self.loglik),
            rows(self.candidate),
            self.candidate_correct,
            self.candidate_loglik,
        )


def outcomes(
    records: Sequence[dict[str, Any]],
    judge: Callable[[str, list[str]], bool],
    settings: Sequence[ModeSettings] | None = None,
    grounded_only: bool = False,
) -> Outcomes:
    """Every setting (default: :func:`small_grid`) replayed on every record, judged by
    ``judge(answer, answers)``, and densely where every candidate holds ``gold_loglik``."""
    settings = list(small_grid() if settings is None else settings)
    judged = [[bool(judge(row["answer"], list(rec["answers"]))) for row in rec["scored"]] for rec in records]
    f1s = [[answer_f1(row["answer"], rec["answers"]) for row in rec["scored"]] for rec in records]
    words = [[answer_words(row["answer"]) for row in rec["scored"]] for rec in records]
    dense = [[row.get("gold_loglik") for row in rec["scored"]] for rec in records]
    dense_ok = all(v is not None for rec in dense for v in rec)
    out = Outcomes(
        settings, [r["id"] for r in records], [], [], [r["seconds"]["answer_first"] for r in records], [], [], [], []
    )
    out.candidate_correct = judged
    out.candidate_loglik = [[float(v) for v in rec] for rec in dense] if dense_ok else None
    out.loglik = [] if dense_ok else None
    for s in settings:
        resolved = s.for_target(grounded_only)
        choices = [replay(resolved, rec, grounded_only) for rec in records]
        out.correct.append([judged[r][c.candidate] for r, c in enumerate(choices)])
        out.seconds.append([seconds(rec, c.answered) for rec, c in zip(records, choices)])
        out.f1.append([f1s[r][c.candidate] for r, c in enumerate(choices)])
        out.words.append([words[r][c.candidate] for r, c in enumerate(choices)])
        out.changed.append([c.candidate != 0 for c in choices])
        out.in_doubt.append([c.in_doubt for c in choices])
        out.candidate.append([c.candidate for c in choices])
        if out.loglik is not None:
            out.loglik.append([out.candidate_loglik[r][c.candidate] for r, c in enumerate(choices)])
    return out


__all__ = [
    "grid",
    "small_grid",
    "grid_named",
    "GRIDS",
    "SMALL_GRID_FAMILIES",
    "replay",
    "outcomes",
    "Outcomes",
    "Choice",
    "setting_name",
    "seconds",
    "KEEP",
    "SHIPPED",
]
