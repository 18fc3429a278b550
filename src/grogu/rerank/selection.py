"""How GROGU utility becomes the documents a pipeline hands its LLM: the rerank modes' plain logic.

Every function here works on plain lists (documents are indices in retrieval order, best first), so a
mode can be tested without a model and replayed on recorded scores (``benchmarks/pipeline_accuracy.py``).

Modes (``UtilityScorer.rerank(mode=...)`` and the integrations):

- ``"document"``: each document scored alone, sorted by utility (the paper's per-document GROGU).
- ``"fusion"``: each document scored alone; its utility rank fused with its retrieval rank, so that a
  weak utility signal cannot push a strongly relevant document out (weight on utility: ``weight``).
- ``"context"``: a few candidate contexts of ``top_n`` documents built from the retrieval order (the
  retriever's own top-n first), each scored as one whole context; the most useful one is returned if it
  beats the retriever's own by ``margin``, else the retriever's.
- ``"prune"``: each document scored alone, and also no document at all (the prompt with an empty
  context); documents that leave the LLM less sure than the question alone are dropped (paper App. C),
  the rest keep the retrieval order.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import string
from collections import Counter
from typing import Sequence

from ..core.checks import check_choice, check_float

#: how the context mode chooses among its candidates (see :func:`selection_scores`)
SELECTION_RULES = ("confidence", "agreement", "combined", "confidence_support")
#: candidate families of the context mode (see :func:`context_candidates`)
CANDIDATE_FAMILIES = ("swap", "drop", "all", "orders", "reversed", "swap_reversed", "swap_orders", "keep")
#: when the context mode tries other candidates: on every query, or only when the retriever's own
#: context is in doubt (see :func:`doubtful`)
GATES = ("always", "doubt")


def check_unit(name: str, value: object) -> float:
    """A finite number in [0, 1]."""
    return check_float(name, value, minimum=0.0, maximum=1.0)


def rank_scores(values: Sequence[float]) -> list[float]:
    """Each value's rank as a score in [0, 1]: 1 for the largest, 0 for the smallest, ties share the
    mean of their ranks; a single value (or all equal) scores 1."""
    n = len(values)
    if n == 0:
        return []
    if n == 1:
        return [1.0]
    order = sorted(range(n), key=lambda i: values[i])
    ranks = [0.0] * n
    i = 0
    while i < n:
        j = i
        while j + 1 < n and values[order[j + 1]] == values[order[i]]:
            j += 1
        for t in range(i, j + 1):
            ranks[order[t]] = (i + j) / 2
        i = j + 1
    return [r / (n - 1) for r in ranks]


def fuse(utility: Sequence[float], relevance: Sequence[float], weight: float) -> list[float]:
    """Rank fusion: ``weight`` × utility rank score + (1 − weight) × relevance rank score, each in
    [0, 1] per query (:func:`rank_scores`). Rank-based, so no scale of either score matters."""
    if len(utility) != len(relevance):
        raise ValueError(f"{len(utility)} utilities but {len(relevance)} relevance scores")
    weight = check_unit("weight", weight)
    u, r = rank_scores(utility), rank_scores(relevance)
    return [weight * a + (1 - weight) * b for a, b in zip(u, r)]


def order_by(scores: Sequence[float]) -> list[int]:
    """Indices sorted by score, best first; ties keep the earlier (retrieval) position first."""
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def argmax(scores: Sequence[float]) -> int:
    """Index of the highest score; ties go to the earlier position."""
    if len(scores) == 0:
        raise ValueError("argmax of no scores")
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def context_candidates(n_docs: int, top_n: int, family: str = "swap", swaps: int = 2) -> list[list[int]]:
    """Candidate contexts (lists of indices into the retrieval order), the retriever's own top-n first.

    - ``swap``: the top-n, then the top-n with its last member replaced by each of the next ``swaps``
      documents (prompts share all but the last document, so the engine encodes them once).
    - ``drop``: every n-subset of the top n+1 in retrieval order (each top-n member dropped in turn).
    - ``all``: every n-subset of all documents in retrieval order.
    - ``orders``: the top-n as given, reversed, and in LongContextReorder's order.
    - ``reversed``: the top-n as given, then reversed (one more candidate: the cheapest order change).
    - ``swap_reversed``: the ``swap`` candidates, then the top-n reversed (small LLMs read the end of
      their context most: another order of the same documents can change the answer).
    - ``swap_orders``: each ``swap`` candidate as given, then each reversed.
    - ``keep``: the top-n alone. Nothing changes; the context is still scored and the gate's verdict read.
    Duplicates are dropped; with ``top_n`` or fewer documents, every candidate holds all of them.
    """
    if family not in CANDIDATE_FAMILIES:
        raise ValueError(f"family must be one of {CANDIDATE_FAMILIES}, got {family!r}")
    if n_docs <= 0:
        return []
    n = min(top_n, n_docs)
    base = list(range(n))
    swapped = [base] + [base[:-1] + [j] for j in range(n, min(n_docs, n + swaps))]
    if family == "swap":
        out = swapped
    elif family == "keep":
        out = [base]
    elif family == "swap_reversed":
        out = swapped + [base[::-1]]
    elif family == "swap_orders":
        out = swapped + [c[::-1] for c in swapped]
    elif family == "reversed":
        out = [base, base[::-1]]
    elif family == "drop":
        out = [list(c) for c in itertools.combinations(range(min(n_docs, n + 1)), n)]
    elif family == "all":
        out = [list(c) for c in itertools.combinations(range(n_docs), n)]
    else:
        from ..core.results import long_context_order

        out = [base, base[::-1], long_context_order(base)]
    seen: set[tuple[int, ...]] = set()
    unique: list[list[int]] = []
    for c in out:
        if tuple(c) not in seen:
            seen.add(tuple(c))
            unique.append(c)
    return unique


def candidate_count(n_docs: int, top_n: int, family: str = "swap", swaps: int = 2) -> int:
    """How many candidates :func:`context_candidates` returns, computed without building them (a
    binomial for ``all`` and ``drop``): the size of a rerank is known before anything is enumerated."""
    if family not in CANDIDATE_FAMILIES:
        raise ValueError(f"family must be one of {CANDIDATE_FAMILIES}, got {family!r}")
    if n_docs <= 0:
        return 0
    n = min(top_n, n_docs)
    swapped = 1 + max(0, min(n_docs, n + swaps) - n)  # the swapped candidates are distinct, never reversed ones
    if family == "swap":
        return swapped
    if family == "keep":
        return 1
    if family == "swap_reversed":
        return swapped + (n > 1)
    if family == "swap_orders":
        return swapped * (2 if n > 1 else 1)
    if family == "reversed":
        return 1 + (n > 1)
    if family == "drop":
        return math.comb(min(n_docs, n + 1), n)
    if family == "all":
        return math.comb(n_docs, n)
    return len(context_candidates(n, n, "orders"))  # three orders of n documents at most


def choose_context(scores: Sequence[float], margin: float = 0.0) -> int:
    """The candidate to use: the best-scoring one if it beats candidate 0 (the retriever's own context)
    by more than ``margin``, else 0. Ties go to the earlier candidate."""
    if not scores:
        raise ValueError("no candidate contexts")
    best = argmax(scores)
    return best if scores[best] > scores[0] + margin else 0


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def answer_tokens(text: str) -> list[str]:
    """An answer's words as answer-matching compares them (SQuAD's normalisation): lower case, no
    punctuation, no articles."""
    return list(_words(text))


@functools.lru_cache(maxsize=4096)
def _words(text: str) -> tuple[str, ...]:
    """:func:`answer_tokens`, remembered: a replay reads the same documents and answers many times."""
    return tuple(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


@functools.lru_cache(maxsize=1024)
def _word_set(text: str) -> frozenset[str]:
    return frozenset(_words(text))


def token_f1(a: Sequence[str], b: Sequence[str]) -> float:
    """F1 of two bags of words (SQuAD's answer F1); two empty answers agree fully."""
    if not a or not b:
        return float(not a and not b)
    common = sum((Counter(a) & Counter(b)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def agreement_scores(answers: Sequence[str]) -> list[float]:
    """Each candidate's agreement with the others: the mean token F1 of its answer with every other
    candidate's answer, in [0, 1] (self-consistency without sampling: the candidates are the samples).
    A single candidate agrees fully."""
    toks = [answer_tokens(a) for a in answers]
    n = len(toks)
    if n <= 1:
        return [1.0] * n
    f1 = [[token_f1(toks[i], toks[j]) if i < j else 0.0 for j in range(n)] for i in range(n)]
    return [sum(f1[min(i, j)][max(i, j)] for j in range(n) if j != i) / (n - 1) for i in range(n)]


def support_scores(answers: Sequence[str], contexts: Sequence[str]) -> list[float]:
    """For each candidate, the share of its answer's words that occur in its own documents' text, in
    [0, 1]: an answer the LLM gives from memory is not supported by the documents it was given."""
    if len(answers) != len(contexts):
        raise ValueError(f"{len(answers)} answers but {len(contexts)} contexts")
    out = []
    for answer, text in zip(answers, contexts):
        words = _words(answer)
        present = _word_set(text)
        out.append(sum(w in present for w in words) / len(words) if words else 0.0)
    return out


def selection_scores(
    rule: str,
    utilities: Sequence[float],
    answers: Sequence[str],
    metric: str,
    confidence_weight: float,
    support: Sequence[float] | None = None,
    support_weight: float = 1.0,
) -> list[float]:
    """Each candidate context's score under a selection rule (higher is better):

    - ``"confidence"``: its GROGU utility (how sure the LLM is of the answer it gives from it);
    - ``"agreement"``: how much its answer agrees with the other candidates' answers
      (:func:`agreement_scores`, in [0, 1]); no model confidence at all;
    - ``"combined"``: ``(1 - w) * agreement + w * confidence``, with the confidence on the bounded [0, 1]
      scale of :func:`grogu.metrics.scales.probability` (``w`` = ``confidence_weight``);
    - ``"confidence_support"``: ``utility + support_weight * support``, ``support`` the share of its
      answer's words found in its own documents (:func:`support_scores`, in [0, 1]): a confident answer
      the documents do not hold counts less.
    """
    rule = check_choice("rule", rule, SELECTION_RULES)
    if len(utilities) != len(answers):
        raise ValueError(f"{len(utilities)} utilities but {len(answers)} answers")
    if rule == "confidence":
        return [float(u) for u in utilities]
    if rule == "confidence_support":
        if support is None or len(support) != len(utilities):
            raise ValueError(
                "rule 'confidence_support' needs each candidate's support (grogu.rerank.selection.support_scores "
                "of its answer in its own documents' text)"
            )
        weight = check_float("support_weight", support_weight, minimum=0.0)
        return [float(u) + weight * float(x) for u, x in zip(utilities, support)]
    agreement = agreement_scores(answers)
    if rule == "agreement":
        return agreement
    from ..metrics.scales import probability

    w = check_unit("confidence_weight", confidence_weight)
    return [(1 - w) * a + w * probability(metric, u) for a, u in zip(agreement, utilities)]


def prefer_supported(chosen: int, answers: Sequence[str], support: Sequence[float]) -> int:
    """Among the candidates that give the chosen candidate's answer (the same words), the one whose own
    documents support that answer best (:func:`support_scores`); ties keep ``chosen``, then the earlier.
    The answer is unchanged; the documents handed over (and credited with it) are the ones that hold it."""
    same = [i for i, a in enumerate(answers) if answer_tokens(a) == answer_tokens(answers[chosen])]
    return max(same, key=lambda i: (support[i], i == chosen, -i))


def doubtful(
    support: float,
    confidence: float,
    min_support: float,
    min_confidence: float,
    entropy_change: float | None = None,
    min_entropy_change: float | None = None,
) -> bool:
    """Whether the retriever's own context is in doubt, judged on the one answer it gives.

    ``support``: the share of the answer's words found in its documents (:func:`support_scores`).
    ``confidence``: the answer's mean token probability, exp(mean log-probability), in [0, 1].
    ``entropy_change``: how much its documents lower the entropy of the answer's key tokens (nats: GROGU's
    ``entropy_change`` utility, mean H_u − H_g), read only where ``min_entropy_change`` is given.
    In doubt when any is below its minimum (:func:`doubt_reasons`). A refusal ("The context does
    not say ...") is rarely held by the documents, so it has low support.
    """
    return bool(doubt_reasons(support, confidence, min_support, min_confidence, entropy_change, min_entropy_change))


def doubt_reasons(
    support: float,
    confidence: float,
    min_support: float,
    min_confidence: float,
    entropy_change: float | None = None,
    min_entropy_change: float | None = None,
) -> tuple[str, ...]:
    """Which of :func:`doubtful`'s tests fail: ``"support"``, ``"confidence"``, ``"entropy_change"``, or none."""
    tests = [("support", support, min_support), ("confidence", confidence, min_confidence)]
    if min_entropy_change is not None:
        if entropy_change is None:
            raise ValueError("min_entropy_change is given but no entropy change was read")
        tests.append(("entropy_change", entropy_change, min_entropy_change))
    return tuple(name for name, value, floor in tests if value < floor)


def kept_relative_to_none(utilities: Sequence[float], none_utility: float, margin: float = 0.0) -> list[bool]:
    """For each document, whether it leaves the LLM at least as sure as no document at all (utility
    >= the no-document utility − ``margin``)."""
    return [u >= none_utility - margin for u in utilities]


__all__ = [
    "argmax",
    "CANDIDATE_FAMILIES",
    "rank_scores",
    "fuse",
    "order_by",
    "context_candidates",
    "choose_context",
    "kept_relative_to_none",
    "SELECTION_RULES",
    "answer_tokens",
    "token_f1",
    "agreement_scores",
    "support_scores",
    "selection_scores",
    "prefer_supported",
    "GATES",
    "doubtful",
    "doubt_reasons",
]
