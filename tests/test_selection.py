"""The rerank modes' plain logic (grogu.rerank.selection, grogu.rerank.plan/decide), without a model."""

import math
from types import SimpleNamespace

import pytest

from grogu.rerank import ModeSettings, decide, plan, selection, split_settings


def test_rank_scores_by_hand():
    assert selection.rank_scores([0.3, -1.0, 2.0]) == [0.5, 0.0, 1.0]
    # ties share the mean of their ranks (0-based ranks 1 and 2 -> 1.5 of 3)
    assert selection.rank_scores([1.0, 5.0, 5.0, 0.0]) == [1 / 3, 2.5 / 3, 2.5 / 3, 0.0]
    assert selection.rank_scores([7.0]) == [1.0]
    assert selection.rank_scores([]) == []


def test_fuse_by_hand_and_extremes():
    utility, relevance = [-2.0, -0.5, -1.0], [0.9, 0.1, 0.5]  # utility ranks .0 1 .5; relevance 1 0 .5
    assert selection.fuse(utility, relevance, 0.25) == pytest.approx([0.75, 0.25, 0.5])
    assert selection.order_by(selection.fuse(utility, relevance, 0.0)) == [0, 2, 1]  # retrieval order
    assert selection.order_by(selection.fuse(utility, relevance, 1.0)) == [1, 2, 0]  # utility order
    with pytest.raises(ValueError, match="weight"):
        selection.fuse(utility, relevance, float("nan"))
    with pytest.raises(ValueError, match="weight"):
        selection.fuse(utility, relevance, 1.5)
    with pytest.raises(ValueError, match="2 relevance"):
        selection.fuse(utility, relevance[:2], 0.5)


def test_order_by_ties_keep_retrieval_order():
    assert selection.order_by([1.0, 2.0, 2.0, 0.0]) == [1, 2, 0, 3]


def test_argmax_ties_go_to_the_earlier():
    assert selection.argmax([1.0, 2.0, 2.0, 0.0]) == 1
    assert selection.argmax([-3.0]) == 0 and selection.argmax([0.5, 0.5, 0.5]) == 0
    with pytest.raises(ValueError, match="no scores"):
        selection.argmax([])


def test_context_candidates_families():
    assert selection.context_candidates(5, 3, "swap") == [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
    assert selection.context_candidates(5, 3, "swap", swaps=1) == [[0, 1, 2], [0, 1, 3]]
    assert selection.context_candidates(5, 3, "drop") == [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]
    assert len(selection.context_candidates(5, 3, "all")) == 10
    assert selection.context_candidates(5, 3, "orders") == [[0, 1, 2], [2, 1, 0], [0, 2, 1]]
    assert selection.context_candidates(5, 3, "swap_reversed") == [[0, 1, 2], [0, 1, 3], [0, 1, 4], [2, 1, 0]]
    assert selection.context_candidates(5, 3, "reversed") == [[0, 1, 2], [2, 1, 0]]
    assert selection.context_candidates(1, 3, "reversed") == [[0]]
    assert selection.context_candidates(5, 3, "swap_orders") == [
        [0, 1, 2],
        [0, 1, 3],
        [0, 1, 4],
        [2, 1, 0],
        [3, 1, 0],
        [4, 1, 0],
    ]
    assert selection.context_candidates(4, 3, "swap_orders", swaps=1) == [[0, 1, 2], [0, 1, 3], [2, 1, 0], [3, 1, 0]]
    assert selection.context_candidates(2, 3, "swap_reversed") == [[0, 1], [1, 0]]
    assert selection.context_candidates(1, 3, "swap_orders") == [[0]]
    assert selection.context_candidates(2, 3, "swap") == [[0, 1]]  # fewer documents than top_n
    assert selection.context_candidates(0, 3, "swap") == []
    with pytest.raises(ValueError, match="family"):
        selection.context_candidates(5, 3, "best")


def test_choose_context_needs_to_beat_the_retrievers_context_by_the_margin():
    assert selection.choose_context([-1.0, -0.5, -0.8]) == 1
    assert selection.choose_context([-1.0, -0.5, -0.8], margin=0.5) == 0  # -0.5 is not > -1.0 + 0.5
    assert selection.choose_context([-1.0, -0.5, -0.8], margin=0.4) == 1
    assert selection.choose_context([-1.0, -1.0]) == 0  # a tie keeps the retriever's
    with pytest.raises(ValueError):
        selection.choose_context([])


def test_kept_relative_to_none():
    assert selection.kept_relative_to_none([-0.5, -2.0, -1.0], -1.0) == [True, False, True]
    assert selection.kept_relative_to_none([-0.5, -2.0, -1.0], -1.0, margin=1.0) == [True, True, True]


def _scores(*values, answers=None):
    answers = answers or [f"answer {chr(97 + i)}" for i in range(len(values))]
    # a scored context carries every grounded metric; the gate's verdict reads its perplexity (here 2)
    return [
        SimpleNamespace(score=v, answer=a, metric="entropy", variants={"entropy": v, "ppl": -2.0})
        for v, a in zip(values, answers)
    ]


def test_plan_and_decide_each_mode():
    base = [0, 1, 2, 3, 4]
    ctx = ModeSettings(
        mode="context", family="swap", swaps=2, context_metric="entropy", margin=0.0, rule="confidence", gate="always"
    )
    contexts = plan(ctx, base, 3)
    assert contexts == [[0, 1, 2], [0, 1, 3], [0, 1, 4]]
    sel = decide(ctx, base, contexts, _scores(-1.0, -0.2, -0.4), 3, None, None)
    assert sel.order == [0, 1, 3] and sel.chosen == 1 and sel.context.score == -0.2
    # the retrieval order comes from the relevance order, not the input order
    assert plan(ctx, [4, 2, 0, 1, 3], 2) == [[4, 2], [4, 0], [4, 1]]

    doc = ModeSettings(mode="document")
    assert plan(doc, [0, 1, 2], 2) == [[0], [1], [2]]
    assert decide(doc, [0, 1, 2], plan(doc, [0, 1, 2], 2), _scores(-2.0, -0.5, -1.0), 2, None, None).order == [1, 2]
    assert decide(doc, [0, 1, 2], [[0], [1], [2]], _scores(-2.0, -0.5, -1.0), None, -1.5, None).order == [1, 2]

    fusion = ModeSettings(mode="fusion", weight=0.25)
    sel = decide(fusion, [0, 1, 2], [[0], [1], [2]], _scores(-2.0, -0.5, -1.0), 3, None, [0.9, 0.1, 0.5])
    assert sel.order == [0, 2, 1] and sel.fused == pytest.approx([0.75, 0.25, 0.5])
    with pytest.raises(ValueError, match="relevance"):
        decide(fusion, [0, 1, 2], [[0], [1], [2]], _scores(-2.0, -0.5, -1.0), 3, None, None)

    prune = ModeSettings(mode="prune")
    assert plan(prune, [2, 0, 1], 3) == [[0], [1], [2], []]
    sel = decide(prune, [2, 0, 1], plan(prune, [2, 0, 1], 3), _scores(-0.5, -2.0, -1.0, -1.0), 3, None, None)
    assert sel.order == [2, 0] and sel.none.score == -1.0  # kept ones in retrieval order


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"mode": "best"}, "mode"),
        ({"weight": math.nan}, "weight"),
        ({"weight": -0.1}, "weight"),
        ({"weight": True}, "weight"),
        ({"family": "x"}, "family"),
        ({"swaps": -1}, "swaps"),
        ({"margin": math.inf}, "margin"),
        ({"margin": -0.1}, "margin"),
        ({"margin": "0.1"}, "margin"),
        ({"rule": "vote"}, "rule"),
        ({"confidence_weight": 2.0}, "confidence_weight"),
        ({"confidence_weight": math.nan}, "confidence_weight"),
        ({"supported": 1}, "supported"),
        ({"context_metric": "bleu"}, "context_metric: unknown metric 'bleu'.*or 'auto'"),
        ({"context_metric": 3}, "context_metric"),
        ({"support_weight": -1.0}, "support_weight"),
        ({"support_weight": math.nan}, "support_weight"),
        ({"support_weight": "1"}, "support_weight"),
    ],
)
def test_mode_settings_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ModeSettings(**kwargs)


def test_mode_settings_build_from_a_base_and_changes():
    base = ModeSettings(family="drop", margin=0.2)
    built = ModeSettings.build(base, swaps=4, margin=None)  # None: not given, the base's value stays
    assert built == ModeSettings(family="drop", margin=0.2, swaps=4)
    assert ModeSettings.build({"mode": "fusion", "weight": 0.3}) == ModeSettings(mode="fusion", weight=0.3)
    assert ModeSettings.build(None) == ModeSettings()
    assert ModeSettings.build(built.as_dict()) == built  # as_dict round-trips
    assert ModeSettings.from_arguments(None, {"query": "q", "family": "orders", "swaps": None}) == ModeSettings(
        family="orders"
    )
    with pytest.raises(TypeError, match=r"unknown rerank setting\(s\) \['famly'\].*'family'"):
        ModeSettings.build(famly="drop")
    with pytest.raises(TypeError, match="ModeSettings"):
        ModeSettings.build("context")
    with pytest.raises(ValueError, match="swaps"):
        ModeSettings.build(base, swaps=-2)
    with pytest.raises(AttributeError):
        built.swaps = 1  # frozen: shared safely
    assert ModeSettings(weight=1).weight == 1.0 and isinstance(ModeSettings(weight=1).weight, float)


def test_threshold_needs_a_per_document_mode():
    ModeSettings(mode="document").check_threshold(-1.0)
    ModeSettings().check_threshold(None)
    with pytest.raises(ValueError, match="threshold applies to per-document utilities"):
        ModeSettings().check_threshold(-1.0)


def test_split_settings():
    assert split_settings({"mode": "fusion", "top_n": 3, "weight": 0.5}) == (
        {"mode": "fusion", "weight": 0.5},
        {"top_n": 3},
    )


def test_check_relevance():
    from grogu.core.checks import check_relevance

    assert check_relevance([1, 0.5], 2) == [1.0, 0.5]
    for bad, match in (
        ([1.0], "one score per document"),
        ("ab", "one score per document"),
        ([1.0, math.nan], "finite"),
        ([1.0, True], "finite"),
    ):
        with pytest.raises(ValueError, match=match):
            check_relevance(bad, 2)


def test_answer_tokens_and_token_f1_by_hand():
    assert selection.answer_tokens("The Eiffel Tower, in Paris!") == ["eiffel", "tower", "in", "paris"]
    # "paris france" vs "in paris": 1 common word; precision 1/2, recall 1/2 -> F1 0.5
    assert selection.token_f1(["paris", "france"], ["in", "paris"]) == pytest.approx(0.5)
    # bags, not sets: ["a","a","b"] vs ["a","b","b"] share a,b -> 2/3 each way
    assert selection.token_f1(["x", "x", "y"], ["x", "y", "y"]) == pytest.approx(2 / 3)
    assert (
        selection.token_f1([], []) == 1.0
        and selection.token_f1(["x"], []) == 0.0
        and selection.token_f1(["x"], ["y"]) == 0.0
    )


def test_agreement_scores_by_hand():
    answers = ["Canberra", "The capital is Canberra.", "Sydney"]
    # F1: (0,1) = 2*(1*1/3)/(1+1/3) = 0.5 ("capital is canberra" vs "canberra"); (0,2) = 0; (1,2) = 0
    assert selection.agreement_scores(answers) == pytest.approx([0.25, 0.25, 0.0])
    assert selection.agreement_scores(["a b", "a b", "a b"]) == [1.0, 1.0, 1.0]
    assert selection.agreement_scores(["only one"]) == [1.0] and selection.agreement_scores([]) == []


def test_support_scores_by_hand():
    contexts = ["Sydney is the largest city. Platypus live in rivers.", "Canberra is the capital of Australia."]
    assert selection.support_scores(["Canberra", "Canberra"], contexts) == [0.0, 1.0]
    # "capital city canberra": capital and canberra occur in the second context, city does not
    assert selection.support_scores(["the capital city, Canberra"], contexts[1:]) == [pytest.approx(2 / 3)]
    assert selection.support_scores([""], ["text"]) == [0.0]
    with pytest.raises(ValueError, match="2 answers but 1 contexts"):
        selection.support_scores(["a", "b"], ["x"])


def test_selection_rules_by_hand():
    utilities, answers = [-1.0, -0.2, -0.6], ["Sydney", "Canberra", "Canberra city"]
    assert selection.selection_scores("confidence", utilities, answers, "entropy", 0.5) == utilities
    # agreement: F1(Sydney, .) = 0; F1(Canberra, Canberra city) = 2 * (1 * 1/2) / (1 + 1/2) = 2/3
    assert selection.selection_scores("agreement", utilities, answers, "entropy", 0.5) == pytest.approx(
        [0, 1 / 3, 1 / 3]
    )
    # combined: (1 - w) * agreement + w * exp(utility) (the entropy family's bounded scale)
    w = 0.25
    want = [(1 - w) * a + w * math.exp(u) for a, u in zip([0, 1 / 3, 1 / 3], utilities)]
    assert selection.selection_scores("combined", utilities, answers, "entropy", w) == pytest.approx(want)
    with pytest.raises(ValueError, match="rule"):
        selection.selection_scores("vote", utilities, answers, "entropy", 0.5)
    with pytest.raises(ValueError, match="confidence_weight"):
        selection.selection_scores("combined", utilities, answers, "entropy", 1.5)
    # confidence_support: utility + weight * support
    support = [1.0, 0.0, 0.5]
    assert selection.selection_scores(
        "confidence_support", utilities, answers, "entropy", 0.5, support
    ) == pytest.approx([0.0, -0.2, -0.1])
    assert selection.selection_scores(
        "confidence_support", utilities, answers, "entropy", 0.5, support, 0.4
    ) == pytest.approx([-0.6, -0.2, -0.4])
    with pytest.raises(ValueError, match="support"):
        selection.selection_scores("confidence_support", utilities, answers, "entropy", 0.5)
    with pytest.raises(ValueError, match="support_weight"):
        selection.selection_scores("confidence_support", utilities, answers, "entropy", 0.5, support, float("nan"))


def test_prefer_supported_keeps_the_answer_and_moves_to_the_documents_that_hold_it():
    # DESIGN.md's example: [Sydney, platypus] and [Sydney, Canberra] both answer "Canberra"
    answers, support = ["Canberra", "Canberra.", "Sydney"], [0.0, 1.0, 1.0]
    assert selection.prefer_supported(0, answers, support) == 1
    assert selection.prefer_supported(2, answers, support) == 2  # no other candidate gives "Sydney"
    assert selection.prefer_supported(1, answers, [1.0, 1.0, 0.0]) == 1  # a tie keeps the chosen one


def test_decide_context_mode_with_each_rule_and_the_support_tie_break():
    base, texts = [0, 1, 2, 3], ["Sydney is big.", "Platypus swim.", "Canberra is the capital.", "Koalas."]
    contexts = [[0, 1], [0, 2], [0, 3]]
    scored = _scores(-0.1, -0.9, -0.5, answers=["Canberra", "Canberra", "Perth"])
    E = {"context_metric": "entropy", "margin": 0.0, "rule": "confidence", "gate": "always"}
    confident = decide(ModeSettings(**E), base, contexts, scored, 2, None, None, texts)
    # the retriever's context is the surest, but its documents do not hold "Canberra": the candidate
    # with the same answer whose documents do is handed over instead
    assert confident.chosen == 1 and confident.order == [0, 2] and confident.rule_scores == [-0.1, -0.9, -0.5]
    no_support = decide(ModeSettings(supported=False, **E), base, contexts, scored, 2, None, None, texts)
    assert no_support.chosen == 0
    agree = decide(
        ModeSettings(supported=False, **{**E, "rule": "agreement"}), base, contexts, scored, 2, None, None, texts
    )
    assert agree.chosen == 0 and agree.rule_scores == [0.5, 0.5, 0.0]
    margin = decide(
        ModeSettings(rule="agreement", margin=0.6, context_metric="entropy", gate="always"),
        base,
        contexts,
        _scores(-0.1, -0.9, -0.5, answers=["Perth", "Canberra", "Canberra"]),
        2,
        None,
        None,
        texts,
    )
    assert margin.chosen == 0  # 0.5 does not beat 0.0 by more than 0.6
    # confidence_support: the surest answer ("Canberra" from [0, 1], support 0) against the supported ones:
    # [0, 2] holds "Canberra" (-0.9 + 1 = 0.1), [0, 3] does not hold "Perth" (-0.5 + 0 = -0.5)
    S_ = {"rule": "confidence_support", "context_metric": "entropy", "supported": False, "gate": "always"}
    sup = decide(ModeSettings(margin=0.1, **S_), base, contexts, scored, 2, None, None, texts)
    assert sup.rule_scores == pytest.approx([-0.1, 0.1, -0.5]) and sup.chosen == 1 and sup.order == [0, 2]
    assert decide(ModeSettings(margin=0.3, **S_), base, contexts, scored, 2, None, None, texts).chosen == 0
    assert (
        decide(ModeSettings(margin=0.1, support_weight=0.5, **S_), base, contexts, scored, 2, None, None, texts).chosen
        == 0
    )  # -0.9 + 0.5 = -0.4 < -0.1
    with pytest.raises(ValueError, match="texts"):
        decide(ModeSettings(**S_), base, contexts, scored, 2, None, None, None)


def test_every_setting_is_a_keyword_of_rerank():
    """rerank's settings are declared once (ModeSettings' fields) and still visible in its signature: the
    in-process and the service client's rerank and arerank take them as ``**overrides:
    Unpack[ModeOverrides]``, a TypedDict made from those fields; an unknown name is a TypeError."""
    import inspect

    from grogu import UtilityScorer
    from grogu.apps.serve import RemoteScorer
    from grogu.rerank import ModeOverrides

    assert tuple(ModeOverrides.__annotations__) == ModeSettings.names()
    assert ModeOverrides.__total__ is False
    for fn in (UtilityScorer.rerank, UtilityScorer.arerank, RemoteScorer.rerank, RemoteScorer.arerank):
        params = inspect.signature(fn).parameters
        overrides = params["overrides"]
        assert overrides.kind is inspect.Parameter.VAR_KEYWORD
        assert "Unpack[" in str(overrides.annotation) and "ModeOverrides" in str(overrides.annotation)
        assert params["settings"].default is None
        assert not set(ModeSettings.names()) & set(params)  # no setting retyped as its own parameter
    with pytest.raises(TypeError, match="unknown rerank setting"):
        ModeSettings.build(None, gate_threshold=0.5)


def test_the_context_metric_is_read_from_the_variants():
    """The candidates are compared by context_metric's utility (each scored context carries every metric's
    utility in ``variants``), whatever metric the scorer reports as ``score``."""
    base, contexts = [0, 1, 2], [[0, 1], [0, 2]]
    scored = [
        SimpleNamespace(score=-1.0, metric="key_entropy", answer="a", variants={"ppl": -3.0, "key_entropy": -1.0}),
        SimpleNamespace(score=-2.0, metric="key_entropy", answer="b", variants={"ppl": -1.5, "key_entropy": -2.0}),
    ]
    C = {"family": "swap", "rule": "confidence", "gate": "always"}
    by_ppl = decide(ModeSettings(context_metric="ppl", **C), base, contexts, scored, 2, None, None)
    assert by_ppl.chosen == 1 and by_ppl.rule_scores == [-3.0, -1.5]
    assert decide(ModeSettings(context_metric="key_entropy", **C), base, contexts, scored, 2, None, None).chosen == 0
    assert (
        decide(ModeSettings(context_metric="ppl", margin=2.0, **C), base, contexts, scored, 2, None, None).chosen == 0
    )
    with pytest.raises(ValueError, match="context_metric='entropy', which this target does not give"):
        decide(ModeSettings(context_metric="entropy", **C), base, contexts, scored, 2, None, None)
    # the default, 'auto', is the target's default metric: key_entropy, or ppl on a grounded-only target
    assert ModeSettings().context_metric == "auto" and ModeSettings(context_metric=" Auto").context_metric == "auto"
    assert ModeSettings(context_metric="KeyEntropy").context_metric == "key_entropy"
    assert ModeSettings().for_target(False).context_metric == "key_entropy"
    assert ModeSettings().for_target(True).context_metric == "ppl"
    assert ModeSettings(context_metric="entropy").for_target(False).context_metric == "entropy"
    with pytest.raises(ValueError, match="auto"):
        decide(ModeSettings(**C), base, contexts, scored, 2, None, None)
    with pytest.raises(ValueError, match="metric"):
        ModeSettings(context_metric="bleu")


def test_gate_keeps_the_retrievers_context_unless_in_doubt():
    """gate='doubt' by hand: the first candidate's answer has support 1 (every word in its documents) and a
    mean token probability of 1 / perplexity; in doubt when either is below its threshold. Not in doubt:
    the retriever's context, scored alone, is kept; in doubt: the rule chooses among all candidates."""
    from grogu.rerank.selection import doubtful

    assert doubtful(0.5, 0.9, 0.6, 0.3) and doubtful(0.9, 0.2, 0.6, 0.3) and not doubtful(0.6, 0.3, 0.6, 0.3)
    base, contexts = [0, 1, 2], [[0, 1], [0, 2]]
    texts = ["Paris is in France", "Rome is big", "Paris Paris"]
    first = SimpleNamespace(answer="Paris", variants={"ppl": -2.0, "key_entropy": -1.0})  # probability 0.5
    other = SimpleNamespace(answer="Rome", variants={"ppl": -1.0, "key_entropy": -0.1})
    G = {"family": "swap", "rule": "confidence", "context_metric": "key_entropy", "gate": "doubt"}
    calm = decide(
        ModeSettings(gate_support=1.0, gate_confidence=0.5, **G), base, contexts, [first], 2, None, None, texts
    )
    assert (calm.chosen, calm.order, calm.candidates, calm.doubt) == (0, [0, 1], [[0, 1]], False)
    unsure = decide(
        ModeSettings(gate_support=1.0, gate_confidence=0.6, **G), base, contexts, [first, other], 2, None, None, texts
    )
    assert (unsure.chosen, unsure.order, unsure.doubt) == (1, [0, 2], True)
    unsupported = SimpleNamespace(answer="Paris or Lyon", variants=first.variants)  # support 1/3
    assert (
        decide(
            ModeSettings(gate_support=0.5, gate_confidence=0.0, **G),
            base,
            contexts,
            [unsupported, other],
            2,
            None,
            None,
            texts,
        ).doubt
        is True
    )
    with pytest.raises(ValueError, match="2 candidate contexts but 1 scores"):
        decide(ModeSettings(gate_support=1.0, gate_confidence=0.6, **G), base, contexts, [first], 2, None, None, texts)
    with pytest.raises(ValueError, match="texts"):
        decide(ModeSettings(**G), base, contexts, [first, other], 2, None, None, None)
    assert (
        decide(ModeSettings(**{**G, "gate": "always"}), base, contexts, [first, other], 2, None, None, texts).doubt
        is None
    )
    for bad in ({"gate": "sometimes"}, {"gate_support": 1.5}, {"gate_confidence": float("nan")}):
        with pytest.raises(ValueError):
            ModeSettings(**bad)


def test_the_defaults_are_pinned():
    """The rerank defaults, as chosen on the tuning splits and documented (README, 'Which rerank mode'): a
    change to any of them must change this test too."""
    from grogu import rerank

    assert (rerank.DEFAULT_MODE, rerank.DEFAULT_FAMILY, rerank.DEFAULT_RULE) == (
        "context",
        "swap_orders",
        "confidence_support",
    )
    assert (rerank.DEFAULT_MARGIN, rerank.DEFAULT_SUPPORT_WEIGHT, rerank.DEFAULT_CONTEXT_METRIC) == (0.3, 1.0, "auto")
    assert (rerank.DEFAULT_GATE, rerank.DEFAULT_GATE_SUPPORT, rerank.DEFAULT_GATE_CONFIDENCE) == ("doubt", 0.8, 0.4)
    defaults = ModeSettings()
    assert (defaults.mode, defaults.family, defaults.rule, defaults.margin, defaults.support_weight) == (
        "context",
        "swap_orders",
        "confidence_support",
        0.3,
        1.0,
    )
    assert (defaults.gate, defaults.gate_support, defaults.gate_confidence, defaults.supported) == (
        "doubt",
        0.8,
        0.4,
        True,
    )


def test_candidate_count_is_computed_before_anything_is_built():
    """The size of a context-mode rerank, by arithmetic, equals what context_candidates builds."""
    import math
    import time

    for family in selection.CANDIDATE_FAMILIES:
        for n_docs in range(0, 9):
            for top_n in range(1, 10):
                for swaps in range(0, 4):
                    built = selection.context_candidates(n_docs, top_n, family, swaps)
                    assert selection.candidate_count(n_docs, top_n, family, swaps) == len(built), (
                        family,
                        n_docs,
                        top_n,
                        swaps,
                    )
    t0 = time.perf_counter()
    assert selection.candidate_count(22, 11, "all") == math.comb(22, 11) == 705_432
    assert selection.candidate_count(200, 100, "all") == math.comb(200, 100)  # no enumeration: instant
    assert time.perf_counter() - t0 < 0.1


def test_the_entropy_change_test_by_hand():
    """The gate's entropy-change test: the documents' change of the answer's key-token entropy (GROGU's
    entropy_change utility), below its floor, is a reason of its own; without a floor it is not read; a floor
    with no reading is an error."""
    from grogu.rerank.selection import doubt_reasons

    assert doubt_reasons(0.9, 0.9, 0.8, 0.4, -0.2, 0.0) == ("entropy_change",)
    assert doubt_reasons(0.5, 0.9, 0.8, 0.4, 0.6, 0.0) == ("support",)
    assert doubt_reasons(0.9, 0.9, 0.8, 0.4, None, None) == ()
    with pytest.raises(ValueError, match="entropy change"):
        doubt_reasons(0.9, 0.9, 0.8, 0.4, None, 0.0)
    texts = ["Paris is in France", "Rome is big", "Paris Paris"]
    first = SimpleNamespace(answer="Paris", variants={"ppl": -1.0, "key_entropy": -1.0, "entropy_change": 0.3})
    G = {"family": "swap", "rule": "confidence", "context_metric": "key_entropy", "gate": "doubt"}
    for floor, in_doubt in ((0.2, False), (0.4, True)):
        s = ModeSettings(gate_support=0.0, gate_confidence=0.0, gate_entropy_change=floor, **G)
        got = decide(s, [0, 1, 2], [[0, 1], [0, 2]], [first] if not in_doubt else [first, first], 2, None, None, texts)
        assert got.doubt == in_doubt and got.gate.entropy_change == pytest.approx(0.3)
        assert got.gate.reasons == (("entropy_change",) if in_doubt else ())
    grounded = SimpleNamespace(answer="Paris", variants={"ppl": -1.0})  # a grounded-only result
    with pytest.raises(ValueError, match="teacher-force"):
        decide(
            ModeSettings(gate_entropy_change=0.0, **G), [0, 1, 2], [[0, 1], [0, 2]], [grounded], 2, None, None, texts
        )
