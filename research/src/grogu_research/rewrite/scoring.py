"""Scoring the candidate rewrites: each one's top-k passages as one context for the turn's original
question, GROGU batched over rewrites and turns."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from grogu.core.checks import check_positive_int
from grogu.rerank.retrieval import Retriever, as_retriever, retrieve_all
from grogu.rerank.selection import argmax
from grogu_research.rewrite.candidates import text_key
from grogu_research.rewrite.pairs import PreferencePair, best_and_worst
from grogu_research.rewrite.turns import DEFAULT_INSTRUCTION, Turn, rewrite_prompt

if TYPE_CHECKING:  # pragma: no cover
    from grogu.rerank.scorer import UtilityScorer

DEFAULT_K = 10


@dataclass
class ScoredRewrite:
    """One candidate rewrite: its GROGU ``score`` (utility of its top-k as one context for the original
    question), the ``passages`` it retrieved, and the target LLM's grounded ``answer``."""

    rewrite: str
    score: float
    passages: list[str]
    answer: str
    is_original: bool


@dataclass
class TurnResult:
    """All scored rewrites of a turn (original question first) and the chosen/rejected indices."""

    turn: Turn
    prompt: str
    rewrites: list[ScoredRewrite]
    n_raw_candidates: int
    generated: bool

    @property
    def choice(self) -> tuple[int, int] | None:
        return best_and_worst([r.score for r in self.rewrites])

    @property
    def best_index(self) -> int:
        """Index of the highest-GROGU rewrite (ties: the earlier one, so the original question on a tie)."""
        return argmax([r.score for r in self.rewrites])

    @property
    def best(self) -> ScoredRewrite:
        """The highest-GROGU rewrite (ties: the earlier one, so the original question on a tie)."""
        return self.rewrites[self.best_index]

    @property
    def no_pair_reason(self) -> str | None:
        if len(self.rewrites) < 2:
            return "single_candidate"
        return "zero_gap" if self.choice is None else None

    def pair(self, turn_index: int) -> PreferencePair | None:
        choice = self.choice
        if choice is None:
            return None
        b, w = (self.rewrites[i] for i in choice)
        return PreferencePair(turn_index, self.prompt, b.rewrite, w.rewrite, b.score, w.score)


def score_contexts_many(scorer: "UtilityScorer", jobs: Sequence[tuple[str, list[list[str]]]]) -> list[list[Any]]:
    """:class:`~grogu.rerank.scorer.ContextScore` of every context of every (query, contexts) job, all in one
    batched engine pass (:meth:`~grogu.rerank.scorer.UtilityScorer.score_contexts_batch`)."""
    return scorer.score_contexts_batch(jobs) if jobs else []


def score_turns(
    scorer: "UtilityScorer",
    turns: Sequence[Turn],
    candidates: Sequence[Sequence[str]],
    retriever: Retriever,
    k: int = DEFAULT_K,
    *,
    turns_per_batch: int = 8,
    instruction: str = DEFAULT_INSTRUCTION,
    progress: bool = False,
) -> list[TurnResult]:
    """Retrieve top-k for each candidate rewrite and score the passages as one context for the turn's
    original question. Rewrites of a turn that retrieve the same passages in the same order share one
    engine context (equal contexts get equal scores)."""
    k = check_positive_int("k", k)
    retriever = as_retriever(retriever)
    results: list[TurnResult] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(turns), desc="turns", unit="turn", file=sys.stderr)
    for start in range(0, len(turns), max(1, turns_per_batch)):
        chunk = list(range(start, min(len(turns), start + max(1, turns_per_batch))))
        per_turn = []
        for i in chunk:
            rewrites = list(candidates[i])
            retrieved = retrieve_all(retriever, rewrites, k)
            unique = list(dict.fromkeys(tuple(r) for r in retrieved))
            per_turn.append((rewrites, retrieved, unique))
        scored = score_contexts_many(
            scorer, [(turns[i].question, [list(u) for u in unique]) for i, (_, _, unique) in zip(chunk, per_turn)]
        )
        for i, (rewrites, retrieved, unique), scores in zip(chunk, per_turn, scored):
            by_ctx = dict(zip(unique, scores))
            turn = turns[i]
            results.append(
                TurnResult(
                    turn=turn,
                    prompt=rewrite_prompt(turn, instruction),
                    rewrites=[
                        ScoredRewrite(
                            rewrite=r,
                            score=by_ctx[tuple(p)].score,
                            passages=p,
                            answer=by_ctx[tuple(p)].answer,
                            is_original=text_key(r) == text_key(turn.question),
                        )
                        for r, p in zip(rewrites, retrieved)
                    ],
                    n_raw_candidates=len(rewrites),
                    generated=False,
                )
            )
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return results


__all__ = ["ScoredRewrite", "TurnResult", "score_contexts_many", "score_turns", "DEFAULT_K"]
