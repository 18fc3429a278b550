"""What the audit can read from one scored context, without a gold answer.

Each signal is a number per context; higher means the set-up served the LLM better. The audit averages
one of them per set-up (its headline, ``signal=``) and reports the means of all of them beside it.
All of them are read from the one answer the LLM gives from the context, so they cost nothing extra.

None of them measures correctness. They measure how sure the LLM is of its answer, and how much of
that answer its documents hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ...core.checks import check_choice
from ...rerank import selection
from ...rerank.settings import DEFAULT_GATE_CONFIDENCE, DEFAULT_GATE_SUPPORT, DEFAULT_SUPPORT_WEIGHT


@dataclass(frozen=True)
class Signal:
    """One signal: its ``name``, its ``unit`` (a few words) and what it measures in one plain line."""

    name: str
    unit: str
    meaning: str
    read: Callable[[dict[str, float]], float]


def _confidence(ctx: Any) -> float:
    """The answer's mean token probability, 1 / its perplexity (the ppl variant's utility is −perplexity)."""
    ppl = (getattr(ctx, "variants", None) or {}).get("ppl")
    return float("nan") if ppl is None or ppl == 0 else -1.0 / float(ppl)


def readings(ctx: Any, texts: Sequence[str]) -> dict[str, float]:
    """The raw readings of a scored context (a :class:`grogu.ContextScore`) given its documents' texts:
    its ``utility`` under the scorer's metric, the answer's ``confidence`` and its ``support`` (the share of
    its words found in the documents; 0 with no document)."""
    [support] = selection.support_scores([ctx.answer], [" ".join(texts)]) if texts else [0.0]
    return {"utility": float(ctx.score), "confidence": _confidence(ctx), "support": float(support)}


SIGNALS: dict[str, Signal] = {
    s.name: s
    for s in (
        Signal(
            "utility",
            "GROGU utility (nats for KeyEntropy)",
            "how sure the LLM is of its answer (−its entropy on the answer's key tokens)",
            lambda r: r["utility"],
        ),
        Signal("confidence", "probability, 0–1", "the answer's mean token probability", lambda r: r["confidence"]),
        Signal(
            "support", "share, 0–1", "the share of the answer's words found in its documents", lambda r: r["support"]
        ),
        Signal(
            "confidence_support",
            "utility + share",
            "the reranker's rule: utility plus the share of the answer's words in its documents",
            lambda r: r["utility"] + DEFAULT_SUPPORT_WEIGHT * r["support"],
        ),
        Signal(
            "settled",
            "share of queries, 0–1",
            f"1 where the reranker would not doubt the answer (support ≥ {DEFAULT_GATE_SUPPORT}, "
            f"confidence ≥ {DEFAULT_GATE_CONFIDENCE}), else 0",
            lambda r: float(
                not selection.doubtful(r["support"], r["confidence"], DEFAULT_GATE_SUPPORT, DEFAULT_GATE_CONFIDENCE)
            ),
        ),
    )
}

#: the audit's headline signal (chosen on tuning splits: docs/benchmarks.md, "Which signal the audit reports")
DEFAULT_SIGNAL = "confidence_support"


def signal_values(reading: dict[str, float]) -> dict[str, float]:
    """Every signal's value for one context's readings (:func:`readings`)."""
    return {name: float(s.read(reading)) for name, s in SIGNALS.items()}


def check_signal(name: str) -> str:
    """``name`` if it is a signal's name (a ValueError naming the choices otherwise)."""
    return check_choice("signal", name, tuple(SIGNALS))
