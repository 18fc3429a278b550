"""What the GROGU scorer returns: per-context scores, per-document scores, layout choices, the
ungrounded answer's score, and the per-token details behind them; plus the candidate layouts (orders)
of a document list that the context mode compares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # annotations only: the results import no tensor code
    import torch


@dataclass(kw_only=True)
class TokenDetail:
    """Per-token arrays of a grounded answer (float32; entropies in nats). From a grounded-only target
    (a chat API) the ungrounded arrays and the key mask are None, ``tokens`` are the server's token
    strings and ``token_ids`` :data:`~grogu.core.types.UNKNOWN_TOKEN_ID`."""

    tokens: list[str]
    token_ids: list[int]
    grounded_entropy: torch.Tensor
    grounded_logprob: torch.Tensor
    ungrounded_entropy: torch.Tensor | None
    key_mask: torch.Tensor | None
    ungrounded_logprob: torch.Tensor | None = None
    copied: torch.Tensor | None = None


@dataclass(kw_only=True)
class ScoreResult:
    """GROGU of one context.

    score: utility of ``metric`` (= -confidence; higher is more useful). confidence: gamma (nats for
    the entropy variants, a perplexity for the PPL ones). answer: the grounded greedy answer.
    n_tokens / n_key_tokens: answer tokens and key tokens used (an empty answer is scored on its
    end-of-turn token: n_tokens is 0 and n_key_tokens 1). variants: the utility under every metric.
    answer_finished: False when the answer was cut at max_new_tokens.
    """

    score: float
    metric: str
    confidence: float
    answer: str
    n_tokens: int
    n_key_tokens: int
    variants: dict[str, float]
    answer_finished: bool
    details: TokenDetail | None = None


@dataclass(kw_only=True, frozen=True)
class GateVerdict:
    """The context mode's verdict on the retriever's own context, read from the one answer it gives.

    in_doubt: whether that answer is in doubt; then the other candidate contexts were answered (under
    ``gate="doubt"``), and a pipeline may act on it (abstain, retrieve more, escalate). reasons: which
    test put it in doubt, ``"support"``, ``"confidence"`` and/or ``"entropy_change"``. support: the share of
    the answer's words found in its documents. confidence: the answer's mean token probability (1 / its
    perplexity). entropy_change: how much its documents lower the entropy of its key tokens (nats, GROGU's
    ``entropy_change``), where the gate reads it (``gate_entropy_change``), else None.
    candidates: how many candidate contexts were answered. changed: whether another context was chosen.
    answer: the answer the retriever's own context gave (the one the verdict reads).
    """

    in_doubt: bool
    reasons: tuple[str, ...]
    support: float
    confidence: float
    candidates: int
    changed: bool
    answer: str = ""
    entropy_change: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The verdict as plain JSON values (``reasons`` a list), as metadata, spans and the service carry it."""
        return {**{f: getattr(self, f) for f in self.__dataclass_fields__}, "reasons": list(self.reasons)}


@dataclass(kw_only=True)
class DocumentScore(ScoreResult):
    """GROGU of one document used alone as the context; ``index`` is its position in the input.

    From :meth:`UtilityScorer.rerank` in the ``context`` mode, the GROGU fields are those of the chosen
    context (every member shares them; ``context`` holds it, with the answer the LLM gave it). In the
    ``fusion`` mode ``rank_score`` is the fused score the order follows. ``gate``: in the context mode,
    the verdict on the retriever's own context (:class:`GateVerdict`), shared by every kept document.
    """

    index: int
    document: Any
    rank_score: float | None = None
    context: "ContextScore | None" = None
    gate: GateVerdict | None = None


@dataclass(kw_only=True)
class ContextScore(ScoreResult):
    """GROGU of an ordered list of documents used together as one context."""

    documents: list[Any]


@dataclass(kw_only=True)
class LayoutChoice:
    """The best of several orders of the same documents: ``best`` is its index in ``scores``."""

    best: int
    scores: list[ContextScore]

    @property
    def documents(self) -> list[Any]:
        return self.scores[self.best].documents


@dataclass(kw_only=True)
class UngroundedScore:
    """The ungrounded answer y_u and its KeyEntropy under the ungrounded prompt (paper App. C)."""

    answer: str
    confidence: float
    n_tokens: int
    n_key_tokens: int


def long_context_order(docs: Sequence[Any]) -> list[Any]:
    """LlamaIndex's LongContextReorder order for docs given best-first: the best at both ends, the
    weakest in the middle (its algorithm: walk worst to best, alternately prepend and append)."""
    out: list[Any] = []
    for i, d in enumerate(reversed(list(docs))):
        if i % 2 == 0:
            out.insert(0, d)
        else:
            out.append(d)
    return out


def choose_layout(scores: list[ContextScore]) -> LayoutChoice:
    """The most useful layout; ties go to the earlier one."""
    return LayoutChoice(best=max(range(len(scores)), key=lambda i: (scores[i].score, -i)), scores=scores)


def standard_layouts(documents: Sequence[Any]) -> dict[str, list[Any]]:
    """Candidate orders of documents given in retrieval order (best first): as given, reversed, and
    LongContextReorder's (best at both ends). Duplicated orders are dropped."""
    docs = list(documents)
    out: dict[str, list[Any]] = {}
    for name, order in (("given", docs), ("reversed", docs[::-1]), ("long_context", long_context_order(docs))):
        if not any(len(order) == len(o) and all(a is b for a, b in zip(order, o)) for o in out.values()):
            out[name] = order
    return out
