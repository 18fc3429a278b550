"""How a context is scored, and how a rerank plan's candidate contexts are answered.

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

from . import metrics, rerank
from .engine import Generation
from .prompts import Document
from .results import ContextScore, ScoreResult, TokenDetail
from .target import ServerCapabilityError

#: one context to score: a query and the ordered documents given with it (the scorer's unit of engine work)
QueryContext = tuple[str, list[Document]]


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

    # ------------------------------------------------------------------ core
    def _score_contexts(self, contexts: Sequence[QueryContext], details: bool) -> list[ScoreResult]:
        """Score (query, ordered documents) contexts, all in one batched engine pass."""
        if not contexts:
            return []
        grounded, gens = self._generate(contexts)
        return self._results(contexts, grounded, gens, details)

    def _generate(self, contexts: Sequence[QueryContext]) -> tuple[list[list[int]], list[Generation]]:
        """Each context's grounded prompt and its greedy answer (cut at its first line in the short style)."""
        grounded = [self.prompts.grounded_ids(q, docs) for q, docs in contexts]
        gens = self.target.generate(grounded, self.max_new_tokens)
        if self.answer_style == "short":
            gens = [self._first_line(g) for g in gens]
        return grounded, gens

    def _results(
        self, contexts: Sequence[QueryContext], grounded: list[list[int]], gens: list[Generation], details: bool
    ) -> list[ScoreResult]:
        """The contexts' results from their answers: each answer teacher-forced under the ungrounded prompt
        (query only), all in one batch; a grounded-only target teacher-forces none."""
        if self.grounded_only or not gens:  # no teacher forcing: the grounded statistics alone
            return [self._result(g, None, None, details) for g in gens]
        ungrounded = {q: self.prompts.ungrounded_ids(q) for q in dict.fromkeys(q for q, _ in contexts)}
        conts = [g.token_ids if g.token_ids else [g.stop_token_id] for g in gens]
        u_prompts = [ungrounded[q] for q, _ in contexts]
        u_stats = self.target.token_stats(u_prompts, conts)
        return [
            self._result(g, u, metrics.copied_mask(c, gp, up, self.copy_ngram), details)
            for g, u, c, gp, up in zip(gens, u_stats, conts, grounded, u_prompts)
        ]

    def score_plans(self, plans: Sequence[rerank.RerankPlan], return_details: bool = False) -> list[list[ContextScore]]:
        """The scores of each rerank plan's contexts (:meth:`plan_rerank`), as :meth:`rerank` scores them:
        the context mode's lazy teacher forcing included."""
        return self._score_plans(plans, return_details)

    def generate_contexts(self, contexts: Sequence[QueryContext]) -> list[tuple[list[int], Generation]]:
        """Each (query, documents) context's grounded prompt and greedy answer: the first half of
        :meth:`score_generated` (answers do not depend on the batch, so a service draws them in slices)."""
        grounded, gens = self._generate(list(contexts))
        return list(zip(grounded, gens))

    def score_generated(
        self,
        plans: Sequence[rerank.RerankPlan],
        generated: Sequence[tuple[list[int], Generation]],
        return_details: bool = False,
    ) -> list[list[ContextScore]]:
        """:meth:`score_plans` from the plans' answers (:meth:`generate_contexts` of every plan's contexts,
        in order)."""
        contexts = iter(zip([(p.query, docs) for p in plans for docs in p.context_documents()], generated))
        answered = [[(c, g, a) for c, (g, a) in (next(contexts) for _ in p.contexts)] for p in plans]
        return self._score_generated(plans, answered, return_details)

    def _score_plans(self, plans: Sequence[rerank.RerankPlan], details: bool) -> list[list[ContextScore]]:
        """The scores of each rerank plan's contexts, every plan's answers generated in one engine batch.

        Under a gate (:func:`grogu.rerank.gated`) a plan's first candidate, the retriever's own context, is
        answered first; its other candidates are answered, in a second batch, only when that answer is in
        doubt (:func:`grogu.rerank.doubt`). Such a plan's list then holds its first candidate alone.
        Where the context mode compares its candidates on the grounded answers alone
        (:func:`grogu.rerank.grounded_choice`), only the chosen candidate's
        answer is teacher-forced under the ungrounded prompt and scored under the scorer's metric (the one
        result the rerank reports): the choice is the same as with every candidate teacher-forced. The other
        plans' contexts are all teacher-forced."""
        wanted = [p.contexts[:1] if rerank.gated(p.settings, p.contexts) else p.contexts for p in plans]
        answered = self._answer_plans(plans, wanted)
        doubtful = [
            i
            for i, p in enumerate(plans)
            if len(wanted[i]) < len(p.contexts)
            and rerank.doubt(
                p.settings, self._result(answered[i][0][2], None, None, False, "ppl"), p.support_texts(), p.contexts[0]
            )
        ]
        for i, more in zip(
            doubtful, self._answer_plans([plans[i] for i in doubtful], [plans[i].contexts[1:] for i in doubtful])
        ):
            answered[i] += more
        return self._score_generated(plans, answered, details)

    def _score_generated(
        self,
        plans: Sequence[rerank.RerankPlan],
        answered: list[list[tuple[QueryContext, list[int], Generation]]],
        details: bool,
    ) -> list[list[ContextScore]]:
        """The plans' results from their answered contexts (per plan, (context, grounded prompt, answer) of
        its first candidates: all of them, or the first alone where a gate is calm)."""
        rows = [row for a in answered for row in a]
        out: list[ScoreResult | None] = [None] * len(rows)  # None: to be scored under the scorer's metric
        start = 0
        for i, p in enumerate(plans):
            n = len(answered[i])
            if rerank.grounded_choice(p.settings) and n:
                metric = p.settings.context_metric
                first = [self._result(gen, None, None, details, metric) for _, _, gen in answered[i]]
                chosen = rerank.decide(
                    p.settings, p.base, p.contexts, first, p.top_n, p.threshold, p.relevance, p.support_texts()
                ).chosen
                out[start : start + n] = first
                out[start + chosen] = None
            start += n
        todo = [j for j, r in enumerate(out) if r is None]
        scored = self._results(
            [rows[j][0] for j in todo], [rows[j][1] for j in todo], [rows[j][2] for j in todo], details
        )
        for j, r in zip(todo, scored):
            out[j] = r
        results = iter(zip(rows, out))
        return [
            [ContextScore(documents=row[0][1], **vars(r)) for row, r in (next(results) for _ in a)] for a in answered
        ]

    def _answer_plans(
        self, plans: Sequence[rerank.RerankPlan], wanted: Sequence[Sequence[list[int]]]
    ) -> list[list[tuple[QueryContext, list[int], Generation]]]:
        """Each plan's ``wanted`` contexts answered, all in one engine batch: per plan, (context, its
        grounded prompt, its answer) for each."""
        contexts = [(p.query, [p.documents[j] for j in c]) for p, cs in zip(plans, wanted) for c in cs]
        grounded, gens = self._generate(contexts) if contexts else ([], [])
        flat = iter(zip(contexts, grounded, gens))
        return [[next(flat) for _ in cs] for cs in wanted]

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
