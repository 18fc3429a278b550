"""How a context is scored: the engine work of every scorer call and of the rerank pipeline.

A context is a query and its ordered documents. Its grounded answer is generated greedily (and cut
at its first line in the short answer style). The same answer is teacher-forced under the ungrounded
prompt (the query alone). A metric of :mod:`grogu.metrics` turns both sets of statistics into a result.

:class:`ContextScoring` holds this work for :class:`grogu.UtilityScorer`, which adds the public API.
It reads the scorer's ``target``, ``prompts``, ``metric`` and answer settings.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import torch

from ..core.results import ScoreResult, TokenDetail
from ..core.target import ServerCapabilityError
from ..metrics import grogu as metrics
from ..runtime.engine import Generation
from .pipeline import Answered, QueryContext


class ContextScoring:
    """The scoring work behind :class:`grogu.UtilityScorer` (see the module docstring)."""

    target: Any
    prompts: Any
    metric: str
    alpha: float
    top_k_frac: float
    copy_ngram: int
    max_new_tokens: int
    answer_style: str
    grounded_only: bool

    # ------------------------------------------------------------------ engine work
    def _score_contexts(self, contexts: Sequence[QueryContext], details: bool) -> list[ScoreResult]:
        """Score (query, ordered documents) contexts, all in one batched engine pass."""
        answers = self.answer_contexts(contexts)
        return self.force_answers([(c, g, a) for c, (g, a) in zip(contexts, answers)], details)

    def answer_contexts(self, contexts: Sequence[QueryContext]) -> list[tuple[list[int], Generation]]:
        """Each context's grounded prompt (token ids) and greedy answer, in one engine batch; the answer is
        cut at its first line in the short style. An answer does not depend on the batch it was drawn in."""
        if not contexts:
            return []
        grounded = [self.prompts.grounded_ids(q, docs) for q, docs in contexts]
        gens = self.target.generate(grounded, self.max_new_tokens)
        if self.answer_style == "short":
            gens = [self._first_line(g) for g in gens]
        return list(zip(grounded, gens))

    def force_answers(self, rows: Sequence[Answered], details: bool) -> list[ScoreResult]:
        """Answered contexts' results under the scorer's metric: each answer teacher-forced under the
        ungrounded prompt (query only), all in one batch. A grounded-only target teacher-forces none."""
        if self.grounded_only or not rows:  # no teacher forcing: the grounded statistics alone
            return [self._result(gen, None, None, details) for _, _, gen in rows]
        ungrounded = {q: self.prompts.ungrounded_ids(q) for q in dict.fromkeys(q for (q, _), _, _ in rows)}
        conts = [gen.token_ids if gen.token_ids else [gen.stop_token_id] for _, _, gen in rows]
        u_prompts = [ungrounded[q] for (q, _), _, _ in rows]
        u_stats = self.target.token_stats(u_prompts, conts)
        return [
            self._result(gen, u, metrics.copied_mask(c, gp, up, self.copy_ngram), details)
            for (_, gp, gen), u, c, up in zip(rows, u_stats, conts, u_prompts)
        ]

    def grounded_score(self, gen: Generation, metric: str, details: bool = False) -> ScoreResult:
        """An answer's result from its grounded statistics alone, under a grounded ``metric``
        (:data:`grogu.metrics.GROUNDED_METRICS`): no engine work."""
        return self._result(gen, None, None, details, metric)

    def _first_line(self, gen: Generation) -> Generation:
        """The answer cut before its first line break, or after its first sentence end ('.', '!' or
        '?' followed by a space), once it has some text. Greedy decoding is causal, so this is exactly
        the answer a decoder stopping there would give; the cut token becomes the stop token."""
        # each token's text as it reads after the tokens before it (SentencePiece drops a leading
        # space when a token is decoded alone); a chat API returns those texts itself
        if gen.tokens is not None:
            pieces = list(gen.tokens)
        else:
            prefixes = [""] + [self.target.tokenizer.decode(gen.token_ids[: i + 1]) for i in range(len(gen.token_ids))]
            pieces = [
                b[len(a) :] if b.startswith(a) else self.target.tokenizer.decode([t])
                for a, b, t in zip(prefixes, prefixes[1:], gen.token_ids)
            ]
        seen_text, cut = False, None
        for i, piece in enumerate(pieces):
            if seen_text and "\n" in piece:
                cut = i
                break
            if seen_text and piece[:1].isspace() and _sentence_end("".join(pieces[:i])):
                cut = i
                break
            seen_text = seen_text or bool(piece.strip())
        if cut is None:
            return gen
        text = "".join(pieces[:cut]).strip() if gen.tokens is not None else self.target.decode(gen.token_ids[:cut])
        return Generation(
            token_ids=gen.token_ids[:cut],
            entropy=gen.entropy[:cut],
            logprob=gen.logprob[:cut],
            stop_token_id=gen.token_ids[cut],
            stop_entropy=float(gen.entropy[cut]),
            stop_logprob=float(gen.logprob[cut]),
            text=text,
            tokens=None if gen.tokens is None else gen.tokens[:cut],
        )

    def _answer_stats(self, gen: Generation) -> tuple[list[int], list[str] | None, torch.Tensor, torch.Tensor]:
        """(token ids, token texts or None, entropies, log-probabilities) scored for an answer: its tokens,
        or for an empty answer the end-of-turn token the model chose."""
        if gen.token_ids:
            return gen.token_ids, gen.tokens, gen.entropy, gen.logprob
        if gen.stop_entropy is None or gen.stop_logprob is None:
            raise ServerCapabilityError(
                f"{self.target!r} gave an empty answer (its end-of-turn token first) and returned no "
                "log-probability of that token, so the answer has no statistics to score (a chat API reports "
                "the text tokens it generates only). Check the prompt (template=), or score through a "
                "completions API (api='vllm' or 'llama-cpp'), which teacher-forces the end-of-turn token"
            )
        return (
            [gen.stop_token_id],
            None if gen.tokens is None else [""],
            torch.tensor([gen.stop_entropy], dtype=torch.float32),
            torch.tensor([gen.stop_logprob], dtype=torch.float32),
        )

    def _result(
        self, gen: Generation, u: Any, copied: torch.Tensor | None, details: bool, metric: str | None = None
    ) -> ScoreResult:
        """One context's result under ``metric`` (default: the scorer's); ``u`` (the ungrounded statistics)
        None for an answer not teacher-forced (a grounded-only target), whose result holds the grounded
        metrics only."""
        h_u, lp_u = (u.entropy, u.logprob) if u is not None else (None, None)
        ids, tokens, h_g, lp_g = self._answer_stats(gen)
        names = metrics.METRICS if u is not None else metrics.GROUNDED_METRICS
        values = {
            name: metrics.compute(name, h_g, lp_g, h_u, self.alpha, self.top_k_frac, logp_u=lp_u, copied=copied)
            for name in names
        }
        metric = metric or self.metric
        chosen = values[metric]
        detail = None
        if details:
            detail = TokenDetail(
                tokens=list(tokens) if tokens is not None else self.target.tokenizer.convert_ids_to_tokens(ids),
                token_ids=list(ids),
                grounded_entropy=h_g,
                grounded_logprob=lp_g,
                ungrounded_entropy=h_u,
                key_mask=None if h_u is None else metrics.key_token_mask(h_g, h_u, self.alpha, self.top_k_frac),
                ungrounded_logprob=lp_u,
                copied=copied,
            )
        return ScoreResult(
            score=chosen.utility,
            metric=metric,
            confidence=chosen.confidence,
            answer=gen.text,
            n_tokens=len(gen.token_ids),
            n_key_tokens=chosen.n_key_tokens,
            variants={k: v.utility for k, v in values.items()},
            answer_finished=gen.finished,
            details=detail,
        )


_INITIALS = re.compile(r"(?:^|\s)(?:[A-Za-z]\.)+$|(?:^|\s)(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|No)\.$")


def _sentence_end(text: str) -> bool:
    """True when ``text`` ends a sentence: '.', '!' or '?' at the end, not a '.' of initials/abbreviations."""
    text = text.rstrip()
    if not text.endswith((".", "!", "?")):
        return False
    return not (text.endswith(".") and _INITIALS.search(text))
