"""UtilityScorer: scores equal the metric on one-at-a-time statistics; ranking, bad input, layouts, async."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from grogu_research.naive import naive_grogu_stats
from grogu_research.testing import tiny_model

from grogu import (
    Document,
    Engine,
    TruncationWarning,
    UtilityScorer,
    metrics,
    rerank,
)
from grogu.rerank import pipeline as rerank_pipeline
from grogu.rerank import selection
from grogu.rerank.scorer import long_context_order, standard_layouts
from grogu.runtime import embedders

QUERY = "Which river flows through the old city of Prague?"
DOCS = [
    "The Vltava is the longest river within the Czech Republic and flows through Prague.",
    Document("Prague is the capital and largest city of the Czech Republic.", title="Prague"),
    {"text": "Bananas are rich in potassium.", "title": "Fruit", "id": 7},
    "",
]


@pytest.fixture(scope="module")
def scorer(tiny_engine):
    return UtilityScorer(tiny_engine, max_new_tokens=10)


def test_scores_match_metric_on_naive_statistics(scorer):
    results = scorer.score(QUERY, DOCS, return_details=True)
    engine = scorer.target
    docs = [
        Document(d) if isinstance(d, str) else d if isinstance(d, Document) else Document(d["text"], d["title"])
        for d in DOCS
    ]
    grounded = [scorer.prompts.grounded_ids(QUERY, [d]) for d in docs]
    ungrounded = scorer.prompts.ungrounded_ids(QUERY)
    ref = naive_grogu_stats(engine.model, grounded, ungrounded, 10, engine.stop_token_ids, engine.pad_token_id)
    for r, n, g in zip(results, ref, grounded):
        assert r.answer == engine.decode(n.token_ids)
        copied = metrics.copied_mask(n.token_ids, g, ungrounded, metrics.COPY_NGRAM)
        for name in metrics.METRICS:
            expected = metrics.compute(
                name,
                n.grounded_entropy,
                n.grounded_logprob,
                n.ungrounded_entropy,
                logp_u=n.ungrounded_logprob,
                copied=copied,
            )
            assert r.variants[name] == pytest.approx(expected.utility, abs=1e-4)
        assert r.score == r.variants["key_entropy"] and r.metric == "key_entropy"
        assert r.n_tokens == len(n.token_ids) and r.details.key_mask.sum() == r.n_key_tokens
    assert [r.index for r in results] == [0, 1, 2, 3] and results[2].document is DOCS[2]


def test_rerank_order_top_n_threshold(scorer):
    scored = scorer.score(QUERY, DOCS)
    ranked = scorer.rerank(QUERY, DOCS, top_n=None, mode="document")  # None: every document
    assert [r.index for r in ranked] == sorted(range(4), key=lambda i: (-scored[i].score, i))
    assert [r.index for r in scorer.rerank(QUERY, DOCS, mode="document")] == [
        r.index for r in ranked[:3]
    ]  # 3 by default
    assert [r.index for r in scorer.rerank(QUERY, DOCS, top_n=2, mode="document")] == [r.index for r in ranked[:2]]
    cut = ranked[1].score
    assert [r.index for r in scorer.rerank(QUERY, DOCS, top_n=None, threshold=cut, mode="document")] == [
        r.index for r in ranked[:2]
    ]
    for bad in (0, -1, True, 2.0, "2"):  # asking for no documents is a mistake, not an empty result
        with pytest.raises(ValueError, match="top_n"):
            scorer.rerank(QUERY, DOCS, top_n=bad, mode="document")


def test_metric_choice(tiny_engine):
    ppl = UtilityScorer(tiny_engine, metric="PPL", max_new_tokens=10).score(QUERY, DOCS[:2])
    base = UtilityScorer(tiny_engine, max_new_tokens=10).score(QUERY, DOCS[:2])
    assert [r.metric for r in ppl] == ["ppl", "ppl"]
    assert [r.score for r in ppl] == [r.variants["ppl"] for r in base]
    with pytest.raises(ValueError, match="unknown metric"):
        UtilityScorer(tiny_engine, metric="rouge")


def test_bad_input(scorer):
    assert scorer.score(QUERY, []) == [] and scorer.rerank(QUERY, [], mode="document") == []
    with pytest.raises(ValueError, match="query is empty"):
        scorer.score("   ", DOCS)
    with pytest.raises(TypeError, match="query must be a str"):
        scorer.score(None, DOCS)
    with pytest.raises(TypeError, match="document 1"):
        scorer.score(QUERY, ["fine", 42])
    with pytest.raises(TypeError, match="list of documents"):
        scorer.score(QUERY, "a single string is not a list")
    empty = scorer.score(QUERY, [""])[0]  # an empty document is scored like any other
    assert empty.n_key_tokens >= 1 and empty.score == empty.score  # not NaN


def test_huge_document_truncated_with_warning(tokenizer):
    engine = Engine(tiny_model("llama", max_position_embeddings=256), tokenizer, device="cpu")
    scorer = UtilityScorer(engine, max_new_tokens=8)
    huge = "word " * 5000
    with pytest.warns(TruncationWarning, match="truncated 1 of 2 document"):
        ctx = scorer.score_context(QUERY, [huge, "short one"])
    assert ctx.n_tokens > 0 and len(ctx.documents) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prompt = scorer.prompts.grounded_ids(QUERY, [Document(huge), Document("short one")])
    assert len(prompt) + 8 <= 256
    assert "short one" in tokenizer.decode(prompt)


def test_layouts(scorer):
    docs = ["alpha text one", "beta text two", "gamma text three", "delta text four"]
    # as llama_index LongContextReorder (sort ascending, alternately prepend/append): [a,b,c,d] -> [b,d,c,a]
    assert long_context_order(docs) == ["beta text two", "delta text four", "gamma text three", "alpha text one"]
    layouts = standard_layouts(docs)
    assert list(layouts) == ["given", "reversed", "long_context"]
    choice = scorer.best_layout(QUERY, list(layouts.values()))
    each = [scorer.score_context(QUERY, order).score for order in layouts.values()]
    assert choice.best == max(range(3), key=lambda i: (each[i], -i))
    assert [s.score for s in choice.scores] == pytest.approx(each, abs=1e-5)
    assert choice.documents == list(layouts.values())[choice.best]


def test_contexts_of_many_queries_in_one_pass(scorer):
    other = "What do bananas contain?"
    contexts = [[DOCS[0], DOCS[1]], [DOCS[2]], []]
    batched = scorer.score_contexts_batch([(QUERY, contexts), (other, contexts[:2])])
    assert [len(b) for b in batched] == [3, 2]
    for query, got in zip((QUERY, other), batched):
        for c, r in zip(contexts, got):
            alone = scorer.score_context(query, c)
            assert r.documents == c and r.answer == alone.answer
            assert r.score == pytest.approx(alone.score, abs=1e-5)
    with pytest.raises(TypeError, match="list of document lists"):
        scorer.score_contexts_batch([(QUERY, "not a list")])
    with pytest.raises(ValueError):
        scorer.score_contexts_batch([(" ", contexts)])


def test_async_equals_sync_and_is_batched(scorer):
    queries = [QUERY, "Who wrote the Odyssey?", "What is potassium?", "When did Prague become a capital?"]
    sync = [scorer.rerank(q, DOCS, top_n=3, mode="document") for q in queries]

    async def main():
        return await asyncio.gather(*(scorer.arerank(q, DOCS, top_n=3, mode="document") for q in queries))

    before = scorer.async_batches_run
    got = asyncio.run(main())
    assert scorer.async_batches_run - before < len(queries)  # concurrent queries shared batches
    for s, a in zip(sync, got):
        assert [r.index for r in s] == [r.index for r in a]
        assert [r.answer for r in s] == [r.answer for r in a]
        assert [r.score for r in a] == pytest.approx([r.score for r in s], abs=1e-5)
        assert all(r.details is None for r in a)
    layout = asyncio.run(scorer.abest_layout(QUERY, [DOCS[:2], DOCS[1::-1]]))
    assert layout.best == scorer.best_layout(QUERY, [DOCS[:2], DOCS[1::-1]]).best


def test_async_error_reaches_only_its_caller(scorer):
    async def main():
        return await asyncio.gather(scorer.ascore(QUERY, DOCS[:1]), scorer.ascore("", DOCS[:1]), return_exceptions=True)

    ok, err = asyncio.run(main())
    assert isinstance(err, ValueError) and len(ok) == 1


def test_ungrounded_appendix_c(scorer):
    u = scorer.ungrounded(QUERY)
    gen = scorer.target.generate([scorer.prompts.ungrounded_ids(QUERY)], 10)[0]
    assert u.answer == gen.text
    assert u.confidence == pytest.approx(metrics.ungrounded_key_entropy(gen.entropy), abs=1e-6)


def test_default_rerank_is_the_context_mode_in_the_given_order(scorer):
    from grogu.core.prompts import as_document

    assert rerank.DEFAULT_MODE == "context"

    def by_hand(relevance):
        """The defaults by hand: the gate on the retriever's context; in doubt, swap_orders candidates from the
        retrieval order, KeyEntropy utility plus the share of the answer's words in the candidate's documents,
        margin 0.3, then the support tie-break."""
        base = selection.order_by(relevance)
        candidates = [[base[i] for i in c] for c in selection.context_candidates(len(DOCS), 2, "swap_orders")]
        scored = scorer.score_contexts(QUERY, [[DOCS[i] for i in c] for c in candidates])
        answers = [s.answer for s in scored]
        texts = [f"{d.title or ''} {d.text}" for d in map(as_document, DOCS)]
        support = selection.support_scores(answers, [" ".join(texts[i] for i in c) for c in candidates])
        # the gate: the retriever's top-2 is kept when at least 0.8 of its answer's words are in its
        # documents and its mean token probability (1 / perplexity) is at least 0.4
        if support[0] >= 0.8 and -1.0 / scored[0].variants["ppl"] >= 0.4:
            return candidates[0]
        chosen = selection.choose_context([s.variants["key_entropy"] + x for s, x in zip(scored, support)], margin=0.3)
        return candidates[selection.prefer_supported(chosen, answers, support)]

    # without relevance the documents are in retrieval order as given: the first is the most relevant
    got = scorer.rerank(QUERY, DOCS, top_n=2)
    assert [r.index for r in got] == by_hand([4.0, 3.0, 2.0, 1.0])
    assert all(r.context is not None and r.answer == got[0].answer for r in got)
    # the gate's verdict on the retriever's top-2, shared by the kept documents, by hand
    first = scorer.score_context(QUERY, DOCS[:2])
    texts = [f"{d.title or ''} {d.text}" for d in map(as_document, DOCS)]
    [support] = selection.support_scores([first.answer], [" ".join(texts[:2])])
    gate = got[0].gate
    assert all(r.gate == gate for r in got)
    assert gate.support == pytest.approx(support) and gate.confidence == pytest.approx(-1 / first.variants["ppl"], 1e-4)
    assert gate.in_doubt == (support < 0.8 or gate.confidence < 0.4)
    assert gate.reasons == tuple(
        n for n, v, m in (("support", support, 0.8), ("confidence", gate.confidence, 0.4)) if v < m
    )
    assert gate.candidates == (6 if gate.in_doubt else 1) and gate.changed == ([r.index for r in got] != [0, 1])
    # the packaged MiniLM's relevance, given, orders the candidates by it
    relevance = embedders.relevance_scores(QUERY, [scorer.prompts.template.render_context([Document(d)]) for d in DOCS])
    assert [r.index for r in scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance)] == by_hand(relevance)
    # given relevance sets the retrieval order (1, 2, 3, 0): the candidates are built from it
    given = [0.1, 0.9, 0.5, 0.2]
    assert [r.index for r in scorer.rerank(QUERY, DOCS, top_n=2, relevance=given)] == by_hand(given)
    assert scorer.rerank(QUERY, []) == []
    with pytest.raises(ValueError, match="relevance"):
        scorer.rerank(QUERY, DOCS, relevance=[1.0])
    with pytest.raises(ValueError, match="threshold"):
        scorer.rerank(QUERY, DOCS, threshold=-1.0)
    with pytest.raises(ValueError, match="mode"):
        scorer.rerank(QUERY, DOCS, mode="best")


def test_context_mode_teacher_forces_only_the_chosen_candidate(scorer):
    """With a context_metric of the grounded answer alone the choice needs no ungrounded statistics: only
    the chosen candidate's answer is teacher-forced, and the result equals scoring every candidate fully."""

    relevance = [0.9, 0.7, 0.5, 0.3]
    candidates = selection.context_candidates(len(DOCS), 2, "swap_orders")
    full = scorer.score_contexts(QUERY, [[DOCS[i] for i in c] for c in candidates], return_details=True)
    forced_rows = []
    real = scorer.target.token_stats

    def counting(prompts, continuations):  # the real teacher forcing, its rows counted
        forced_rows.append(len(prompts))
        return real(prompts, continuations)

    scorer.target.token_stats = counting
    try:
        for metric, margin in (("ppl", 0.0), ("entropy", 0.3), ("ppl", 0.3)):
            for rule in ("confidence", "combined", "confidence_support"):
                settings = rerank.ModeSettings(context_metric=metric, margin=margin, rule=rule, gate="always")
                assert rerank.grounded_choice(settings)
                forced_rows.clear()
                got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=settings, return_details=True)
                assert forced_rows == [1]  # the chosen context only, not all six
                plan = rerank_pipeline.plan(QUERY, DOCS, 2, None, settings, relevance, False)
                sel = rerank.decide(settings, plan.base, plan.contexts, full, 2, None, relevance, plan.support_texts())
                assert [r.index for r in got] == sel.order
                want, ctx = full[sel.chosen], got[0].context
                assert (ctx.answer, ctx.metric, ctx.n_key_tokens) == (want.answer, "key_entropy", want.n_key_tokens)
                # teacher-forced alone rather than in a batch of six: equal to float32 rounding
                assert ctx.score == pytest.approx(want.score, abs=1e-5)
                assert ctx.variants == pytest.approx(want.variants, abs=1e-5)
                assert ctx.details.ungrounded_entropy.tolist() == pytest.approx(
                    want.details.ungrounded_entropy.tolist(), abs=1e-5
                )
                assert got[0].score == pytest.approx(want.score, abs=1e-5)
        # a context_metric that needs the ungrounded statistics: every candidate is teacher-forced
        settings = rerank.ModeSettings(context_metric="key_entropy", rule="confidence", gate="always")
        assert not rerank.grounded_choice(settings)
        forced_rows.clear()
        got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=settings)
        assert forced_rows == [len(candidates)]
        chosen = selection.choose_context([s.variants["key_entropy"] for s in full], settings.margin)
        assert got[0].context.answer == full[chosen].answer  # the support tie-break keeps the chosen answer
        # async: concurrent reranks share one engine batch, and equal the sync ones
        queries = [QUERY, "Who wrote the Odyssey?", "What is potassium?"]
        by_ppl = rerank.ModeSettings(context_metric="ppl", rule="confidence_support", gate="always")
        sync = [scorer.rerank(q, DOCS, top_n=2, relevance=relevance, settings=by_ppl) for q in queries]

        async def main():
            return await asyncio.gather(
                *(scorer.arerank(q, DOCS, top_n=2, relevance=relevance, settings=by_ppl) for q in queries)
            )

        forced_rows.clear()
        before = scorer.async_batches_run
        got = asyncio.run(main())
        assert scorer.async_batches_run - before < len(queries)
        assert sum(forced_rows) == len(queries)  # one chosen context per query
        for s, a in zip(sync, got):
            assert [r.index for r in s] == [r.index for r in a]
            assert a[0].context.answer == s[0].context.answer and a[0].details is None
            assert a[0].score == pytest.approx(s[0].score, abs=1e-5)
    finally:
        del scorer.target.token_stats


def _count_engine_calls(scorer):
    """Wrap the target's generate and token_stats so each call's batch size is recorded (undo: del the
    attributes); returns (generated, forced), the two lists of sizes."""
    generated, forced = [], []
    real_generate, real_stats = scorer.target.generate, scorer.target.token_stats

    def counting_generate(prompts, *args, **kwargs):
        generated.append(len(prompts))
        return real_generate(prompts, *args, **kwargs)

    def counting_stats(prompts, continuations):
        forced.append(len(prompts))
        return real_stats(prompts, continuations)

    scorer.target.generate, scorer.target.token_stats = counting_generate, counting_stats
    return generated, forced


def test_gate_answers_the_retrievers_context_first(scorer):
    """gate='doubt': the retriever's own context is answered first; when its answer is not in doubt that is
    the whole rerank (one context generated and teacher-forced, its score as score_context gives it); when it
    is, the other candidates are answered too and the result equals the ungated context mode."""

    relevance = [0.9, 0.7, 0.5, 0.3]
    generated, forced = _count_engine_calls(scorer)
    try:
        # never in doubt (both thresholds 0): the retriever's top-2 alone
        calm = rerank.ModeSettings(gate="doubt", gate_support=0.0, gate_confidence=0.0)
        got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=calm)
        assert generated == [1] and forced == [1]
        assert [r.index for r in got] == [0, 1]
        alone = scorer.score_context(QUERY, DOCS[:2])
        assert got[0].answer == alone.answer and got[0].score == pytest.approx(alone.score, abs=1e-5)
        # always in doubt (a mean token probability below 1): two batches, then the ungated choice
        for rule, metric in (("confidence_support", "key_entropy"), ("confidence", "ppl")):
            generated.clear()
            doubtful = rerank.ModeSettings(
                gate="doubt", gate_support=1.0, gate_confidence=1.0, rule=rule, context_metric=metric
            )
            always = rerank.ModeSettings(rule=rule, context_metric=metric)
            got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=doubtful)
            n = len(selection.context_candidates(len(DOCS), 2, "swap_orders"))
            assert generated == [1, n - 1]
            want = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=always)
            assert [r.index for r in got] == [r.index for r in want]
            assert got[0].answer == want[0].answer and got[0].score == pytest.approx(want[0].score, abs=1e-5)
        # async: gated and ungated queries coalesced, each equal to its sync call
        settings = [
            calm,
            rerank.ModeSettings(gate="doubt", gate_support=1.0, gate_confidence=1.0),
            rerank.ModeSettings(),
        ]
        sync = [scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=s) for s in settings]

        async def main():
            return await asyncio.gather(
                *(scorer.arerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=s) for s in settings)
            )

        for s, a in zip(sync, asyncio.run(main())):
            assert [r.index for r in s] == [r.index for r in a]
            assert a[0].answer == s[0].answer and a[0].score == pytest.approx(s[0].score, abs=1e-5)
    finally:
        del scorer.target.generate, scorer.target.token_stats


def test_the_entropy_change_gate_forces_the_first_answer_once(scorer):
    """gate_entropy_change: the first answer is teacher-forced without its documents before the gate, once; the
    verdict reads its entropy_change utility (as score_context gives it); in doubt below the floor."""
    relevance = [0.9, 0.7, 0.5, 0.3]
    first = scorer.score_context(QUERY, DOCS[:2])
    change = first.variants["entropy_change"]
    generated, forced = _count_engine_calls(scorer)
    try:
        # calm on support and confidence; the entropy change's floor decides
        calm = rerank.ModeSettings(gate_support=0.0, gate_confidence=0.0, gate_entropy_change=change - 0.01)
        got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=calm)
        assert generated == [1] and forced == [1]  # the first answer forced once, for the gate and the result
        assert [r.index for r in got] == [0, 1] and got[0].details is None
        assert got[0].gate.entropy_change == pytest.approx(change, abs=1e-5) and not got[0].gate.in_doubt
        assert got[0].score == pytest.approx(first.score, abs=1e-5)
        generated.clear(), forced.clear()
        doubtful = rerank.ModeSettings(gate_support=0.0, gate_confidence=0.0, gate_entropy_change=change + 0.01)
        got = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=doubtful)
        n = len(selection.context_candidates(len(DOCS), 2, "swap_orders"))
        assert generated == [1, n - 1] and got[0].gate.reasons == ("entropy_change",) and got[0].gate.in_doubt
        want = scorer.rerank(QUERY, DOCS, top_n=2, relevance=relevance, settings=rerank.ModeSettings(gate="always"))
        assert [r.index for r in got] == [r.index for r in want]
        assert got[0].answer == want[0].answer and got[0].score == pytest.approx(want[0].score, abs=1e-5)
    finally:
        del scorer.target.generate, scorer.target.token_stats
    # a target that cannot teacher-force never reads it; a floor is a finite number
    assert rerank.ModeSettings(gate_entropy_change=0.5).for_target(True).gate_entropy_change is None
    for bad in (float("nan"), "x", float("inf")):
        with pytest.raises(ValueError, match="gate_entropy_change"):
            rerank.ModeSettings(gate_entropy_change=bad)
