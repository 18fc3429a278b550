"""The evaluation harness (grogu_research.experiments): statistics by hand, and every experiment run end to end on a
handful of real items with a tiny random model, its summary recomputed from the per-item JSON."""

from __future__ import annotations

import json
import math
import os

import pytest
from grogu_research.experiments import common
from grogu_research.testing import with_shared_data

TOKENS = 4  # answer tokens of the tiny model: enough to exercise key tokens, fast


# ---------------------------------------------------------------- pure functions, by hand
def test_answer_checks():
    assert common.normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert common.is_correct("It was the Denver Broncos, in 2016.", ["Denver Broncos"])
    assert not common.is_correct("In the 1990s.", ["1990"])  # whole words only
    assert common.is_correct("Six-time Grammy winner", ["Six"]) and common.is_correct("It is U.S.-based", ["U.S."])
    assert common.holds_answer("Popular in the 1990s.", ["1990"])  # the strict test for distractors
    assert common.holds_answer("see U.S. history", ["U.S."]) and not common.holds_answer("a cat", ["dog"])
    assert (
        common.exact_match("the Broncos.", ["Broncos"]) == 1.0 and common.exact_match("Broncos won", ["Broncos"]) == 0.0
    )


def test_token_f1_and_rouge_l_by_hand():
    assert common.token_f1("the cat sat", "cat sat down") == pytest.approx(2 * 1 * (2 / 3) / (1 + 2 / 3))
    # LCS of x y z w / x z w v is x z w: p = r = 3/4
    assert common.rouge_l("x y z w", "x z w v") == pytest.approx(0.75)
    assert common.rouge_l("x y", "z") == 0.0 and common.token_f1("", "") == 1.0
    assert common.best_over(common.token_f1, "stanley hall", ["G. Stanley Hall", "Stanley Hall"]) == 1.0


def test_kendall_tau_by_hand():
    pref = [0.5, -0.2, 0.1, 0.3, 0.0, -1.0]
    outcome = [1, -1, -1, 1, 1, 0]  # C: 0, 1, 3; D: 2; pairs 4 (no preference) and 5 (tie) count in neither
    assert common.kendall_tau(pref, outcome) == {"C": 3, "D": 1, "tau": 0.5}
    assert math.isnan(common.kendall_tau([1.0], [0])["tau"])


def test_sign_test_by_hand():
    x = [True] * 7 + [False] + [True, False]
    y = [False] * 7 + [True] + [True, False]  # n10 = 7, n01 = 1, two concordant pairs ignored
    res = common.sign_test(x, y)
    assert (res["n10"], res["n01"]) == (7, 1)
    by_hand = 2 * sum(math.comb(8, k) for k in range(7, 9)) / 2**8
    assert res["p"] == pytest.approx(by_hand) and by_hand == pytest.approx(18 / 256)
    assert common.sign_test([True, False], [True, False])["p"] == 1.0
    lo, hi = common.proportion_ci(0.0, 60)  # Clopper-Pearson with no success: [0, 1 - 0.025 ** (1 / 60)]
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 60))


def test_statistics_and_plots_without_the_eval_extra_are_a_clear_error(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "scipy.stats", None)  # what an install without the eval extra sees
    with pytest.raises(ImportError, match=r'statistics needs .*scipy.*pip install "grogu\[eval\]"'):
        common.sign_test([True], [False])
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = {"experiment": "x"}
    with pytest.raises(ImportError, match=r'plots needs .*matplotlib.*pip install "grogu\[eval\]"'):
        common.finish(result, str(tmp_path), True, "### x", lambda r, path: None)


def test_win_counts_and_binary_scores_by_hand():
    assert common.win_counts([3, 1, 2, 5], [1, 1, 4, 0]) == {"wins": 2, "ties": 1, "losses": 1, "n": 4, "rate": 2.5 / 4}
    res = common.binary_scores([True, True, False, False, True], [True, False, True, False, True])
    assert (res["tp"], res["fp"], res["fn"]) == (2, 1, 1)
    assert res["accuracy"] == pytest.approx(3 / 5) and res["f1"] == pytest.approx(4 / 6)


def test_lexical_kernel_drops_the_question():
    from grogu_research.experiments.seper import LexicalEntailment

    k = LexicalEntailment("token-f1")
    k.query = "Who founded it?"
    # without the question: {stanley, hall} vs {g, stanley, hall} -> p = 1, r = 2/3
    assert k(["Who founded it? Stanley Hall"], ["Who founded it? G. Stanley Hall"]) == pytest.approx([0.8])
    assert LexicalEntailment("rouge-l")(["x y z w"], ["x z w v"]) == pytest.approx([0.75])
    with pytest.raises(ValueError):
        LexicalEntailment("nli")


def test_minilm_retriever_and_hard_negatives():
    import numpy as np
    from grogu_research.experiments.negatives import hard_negatives

    from grogu.rerank.retrieval import BM25Retriever, DenseRetriever

    texts = [
        "Paris is the capital of France.",
        "Bananas are yellow fruit.",
        "The capital of Italy is Rome.",
        "France borders Spain and Italy.",
    ]
    dense = DenseRetriever(texts, cache=False)
    scores = dense.scores("What is the capital of France?")
    assert int(np.argmax(scores)) == 0
    emb = dense.encode(["What is the capital of France?", texts[2]])
    assert dense.pair_scores(["What is the capital of France?"], [texts[2]])[0] == pytest.approx(
        float(emb[0] @ emb[1]), abs=1e-5
    )
    # gold (0) excluded, paragraphs holding the answer "Paris" excluded, the rest in score order
    ranked = [int(i) for i in np.argsort(-scores, kind="stable") if int(i) != 0]
    assert hard_negatives(scores, texts, ["Paris"], {0}, 2) == ranked[:2]
    bm25 = BM25Retriever(texts)
    assert bm25.score_ids("capital of Italy", [2, 1]) == pytest.approx(list(bm25.scores("capital of Italy")[[2, 1]]))


def test_cli_registry_and_command_line():
    from grogu_research.cli import COMMANDS, build_parser
    from grogu_research.experiments.cli import command_line, options

    assert "eval" in COMMANDS
    args = build_parser().parse_args(["eval", "layout", "--model", "a", "--model", "b", "--limit", "3"])
    opts = options(args)
    assert opts["model"] == ["a", "b"] and opts["limit"] == 3 and opts["retriever"] == "bm25"
    assert opts["out_dir"] == os.path.join("runs", "eval", "layout")
    cmd = command_line("layout", opts)
    assert cmd.startswith("grogu-research eval layout --model a --model b --limit 3") and "--retriever bm25" in cmd
    assert "nli" not in options(build_parser().parse_args(["eval", "winrate"]))


# ---------------------------------------------------------------- experiments on real data, tiny model
def _run(name: str, tmp_path, **kw) -> tuple[dict, dict]:
    from grogu_research.experiments import run

    result = with_shared_data(run, name, out_dir=str(tmp_path / name), **kw)
    for kind in ("json", "md", "png"):
        path = tmp_path / name / f"{name}.{kind}"
        assert path.exists() and path.stat().st_size > 0, path
    with open(tmp_path / name / f"{name}.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["n"] == result["n"] and saved["experiment"] == name
    assert (tmp_path / name / f"{name}.md").read_text().startswith("### ")
    return result, saved


def test_winrate(tiny_engine, tmp_path):
    from grogu_research.experiments.negatives import BM25Retriever
    from grogu_research.experiments.winrate import METRICS, OTHERS

    from grogu import UtilityScorer

    result, saved = _run("winrate", tmp_path, model=tiny_engine, limit=4, max_new_tokens=TOKENS, batch=3)
    assert saved["n"] == 4
    paragraphs, _ = common.squad_data()
    texts = [p["text"] for p in paragraphs]
    bm25 = BM25Retriever(texts)
    for it in saved["items"]:
        ids = it["paragraph_ids"]
        assert len({ids["gold"], ids["distractor"], ids["random"]}) == 3
        for d in OTHERS:  # no answer string, normalised or raw
            assert not any(a.lower() in it["texts"][d].lower() for a in it["answers"])
            assert not common.holds_answer(it["texts"][d], it["answers"])
        # the distractor is BM25's best paragraph among those that are not gold and hold no answer
        scores = bm25.scores(it["question"])
        better = [i for i in range(len(texts)) if scores[i] > scores[ids["distractor"]]]
        assert all(i == ids["gold"] or common.holds_answer(texts[i], it["answers"]) for i in better)
    # win-rates and sign tests recomputed from the per-item JSON
    for o in OTHERS:
        for m in METRICS:
            g = [it["utility"]["gold"][m] for it in saved["items"]]
            x = [it["utility"][o][m] for it in saved["items"]]
            wins = sum(a > b for a, b in zip(g, x)) + 0.5 * sum(a == b for a, b in zip(g, x))
            assert saved["summary"]["win_rate"][o][m]["rate"] == pytest.approx(wins / 4)
        wk = [it["utility"]["gold"]["key_entropy"] > it["utility"][o]["key_entropy"] for it in saved["items"]]
        we = [it["utility"]["gold"]["entropy"] > it["utility"][o]["entropy"] for it in saved["items"]]
        n10 = sum(a and not b for a, b in zip(wk, we))
        n01 = sum(b and not a for a, b in zip(wk, we))
        from scipy.stats import binomtest

        p = binomtest(n10, n10 + n01).pvalue if n10 + n01 else 1.0
        assert saved["summary"]["sign_test"][o]["key_entropy vs entropy"]["p"] == pytest.approx(p)
    # batched over questions = the public per-query API
    it = saved["items"][0]
    direct = UtilityScorer(tiny_engine, max_new_tokens=TOKENS).score(
        it["question"], [it["texts"][d] for d in ("gold", *OTHERS)]
    )
    for d, r in zip(("gold", *OTHERS), direct):
        assert r.answer == it["answer"][d]
        for m, v in r.variants.items():
            assert it["utility"][d][m] == pytest.approx(v, abs=1e-4)
    assert "KeyEntropy" in result["markdown"] and "90.7 / 95.8" in result["markdown"]


@pytest.mark.slow
def test_noise(tiny_engine, tmp_path):
    from grogu_research.experiments.noise import CONTEXTS, METRICS

    _, saved = _run("noise", tmp_path, model=tiny_engine, limit=3, max_new_tokens=TOKENS, batch=2)
    paragraphs, _ = common.squad_data()
    items = saved["items"]
    for it in items:
        r, t = it["paragraph_ids"]["random"], it["paragraph_ids"]["retrieved"]
        assert len(r) == len(t) == 5 and r[it["gold_position"]] == t[it["gold_position"]]
        gold = r[it["gold_position"]]
        for pid in [*r, *t]:
            assert pid == gold or not common.holds_answer(paragraphs[pid]["text"], it["answers"])
    outcome = [int(it["correct"]["random"]) - int(it["correct"]["retrieved"]) for it in items]
    for m in METRICS:
        pref = [it["utility"]["random"][m] - it["utility"]["retrieved"][m] for it in items]
        c = sum(p * o > 0 for p, o in zip(pref, outcome))
        d = sum(p * o < 0 for p, o in zip(pref, outcome))
        got = saved["summary"]["metrics"][m]
        assert (got["C"], got["D"]) == (c, d)
        assert got["tau"] == (pytest.approx((c - d) / (c + d)) if c + d else None)
        predicted = [p >= 0 for p in pref] + [p <= 0 for p in pref]
        actual = [it["correct"][x] for x in CONTEXTS for it in items]
        assert got["classifier"]["accuracy"] == pytest.approx(sum(a == b for a, b in zip(predicted, actual)) / 6)
    acc = saved["summary"]["accuracy"]
    assert acc["random"] == pytest.approx(sum(it["correct"]["random"] for it in items) / 3)


def test_layout_two_models(tiny_engine, tokenizer, tmp_path):
    from grogu_research.experiments.layout import LAYOUTS
    from grogu_research.testing import tiny_model

    from grogu import Engine

    other = Engine(tiny_model("qwen2", seed=3), tokenizer, device="cpu")
    _, saved = _run("layout", tmp_path, model=[tiny_engine, other], limit=2, max_new_tokens=TOKENS)
    keys = saved["models"]
    assert len(keys) == 2
    for it in saved["items"]:
        for name, pos in LAYOUTS.items():
            ids = it["paragraph_ids"][name]
            assert len(ids) == 10 and ids[pos] == it["paragraph_ids"]["first"][0]
        for key in keys:
            rec = it["models"][key]
            best = max(LAYOUTS, key=lambda n: (rec["utility"][n]["key_entropy"], -list(LAYOUTS).index(n)))
            assert rec["choice"]["key_entropy"] == best
    a, b = keys
    s = saved["summary"][a]
    cross = sum(it["models"][a]["correct"][it["models"][b]["choice"]["key_entropy"]] for it in saved["items"]) / 2
    assert s["other_choice"][b] == pytest.approx(cross)
    assert s["random_expected"] == pytest.approx(sum(s["fixed"].values()) / 3)


def test_seper(tiny_engine, tmp_path):
    from scipy.stats import pearsonr

    _, saved = _run("seper", tmp_path, model=tiny_engine, limit=2, samples=2, paragraphs=4, max_new_tokens=TOKENS)
    assert "lexical token-f1" in saved["config"]["kernel"]
    pairs = [p for it in saved["items"] for p in it["paragraphs"]]
    for it in saved["items"]:
        support = [p for p in it["paragraphs"] if p["supporting"]]
        assert len(support) == it["n_steps"] and len(it["paragraphs"]) == max(4, it["n_steps"])
        assert sum(p["gt"] for p in it["paragraphs"]) == pytest.approx(1.0)
        for p in it["paragraphs"]:
            assert p["dseper_soft"] == pytest.approx(p["p_soft_with"] - p["p_soft_without"])
            assert p["d_f1"] == pytest.approx(
                p["f1"] - common.best_over(common.token_f1, it["ungrounded_answer"], it["references"])
            )
    got = saved["summary"]["pearson"]["entropy"]["pooled"]["r"]
    assert got == pytest.approx(pearsonr([p["entropy"] for p in pairs], [p["gt"] for p in pairs]).statistic)


def test_acu(tiny_engine, tmp_path):
    from grogu.metrics.acu import ACUScorer

    _, saved = _run("acu", tmp_path, model=tiny_engine, limit=5, batch=3)
    items = saved["items"]
    s = saved["summary"]["all"]
    assert s["mean_sufficient"] == pytest.approx(sum(it["acu_sufficient"] for it in items) / 5)
    assert s["sufficient_higher"] == pytest.approx(
        sum(it["acu_sufficient"] > it["acu_insufficient"] for it in items) / 5
    )
    assert saved["summary"]["SUPPORTS"]["n"] + saved["summary"]["REFUTES"]["n"] == 5
    k = sum(it["acu_sufficient"] > it["acu_insufficient"] for it in items)
    assert s["sign_test_p"] == pytest.approx(
        common.sign_test([True] * k + [False] * (5 - k), [False] * k + [True] * (5 - k))["p"]
    )
    it = items[0]
    direct = ACUScorer(tiny_engine).score(it["claim"], it["insufficient_evidence"], "NOT ENOUGH")
    assert direct.acu == pytest.approx(it["acu_insufficient"], abs=1e-5)
    assert "<span" not in it["sufficient_evidence"] and "[[" not in it["sufficient_evidence"]


def test_cli_eval(tokenizer, tmp_path, capsys):
    from grogu_research.cli import main
    from grogu_research.testing import tiny_model

    model_dir = tmp_path / "tiny"
    tiny_model("llama", seed=1).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    out = tmp_path / "out"
    rc = with_shared_data(
        main, ["eval", "acu", "--model", str(model_dir), "--device", "cpu", "--limit", "2", "--out", str(out)]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "mean ACU" in printed and "grogu-research eval acu --model" in printed
    saved = json.loads((out / "acu.json").read_text())
    assert saved["n"] == 2 and saved["config"]["command"].endswith("--file fever_sufficient_facts.jsonl")
    assert (out / "acu.png").stat().st_size > 0


def test_seper_with_an_nli_model(tiny_engine, tmp_path):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from grogu.runtime.models import embedded_embedder_path

    nli_dir = tmp_path / "nli"
    tok = AutoTokenizer.from_pretrained(embedded_embedder_path())
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    BertForSequenceClassification(cfg).eval().save_pretrained(nli_dir)
    tok.save_pretrained(nli_dir)
    _, saved = _run(
        "seper", tmp_path, model=tiny_engine, limit=1, samples=2, paragraphs=3, max_new_tokens=TOKENS, nli=str(nli_dir)
    )
    assert saved["config"]["kernel"] == f"NLI model {nli_dir}"
    for p in saved["items"][0]["paragraphs"]:  # a real (random) classifier: beliefs strictly inside (0, 1)
        assert 0 < p["p_soft_with"] < 1 and 0 < p["p_soft_without"] < 1
