"""grogu.apps.audit: the paired statistics against hand-computed cases, the aggregates on hand-built input,
the audit's scores against the scorer's one-at-a-time scores (tiny real model), the command line, the
framework adapters, and the HTML report rendered in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import warnings

import pytest
from grogu_research import testing

import grogu
from grogu.apps.audit import (
    Observation,
    Setup,
    audit,
    bootstrap_interval,
    compare,
    document_table,
    exact_sign_test,
    from_influence_logs,
    from_retriever,
    rank_curve,
    read_setup,
    sign_flip_p_value,
    write_report,
)
from grogu.apps.audit.setups import document
from grogu.apps.audit.signals import SIGNALS, readings, signal_values
from grogu.apps.audit.stats import MIN_QUERIES, holm, judge, queries_needed, verdict
from grogu.core.results import ContextScore
from grogu.observe.influence_record import DOCUMENT_FIELDS, RECORD_FIELDS
from grogu.rerank.selection import support_scores

# one worker builds this module's scorers once (--dist loadgroup)
pytestmark = pytest.mark.xdist_group("audit")

N = 4  # answer tokens of the tiny model
TOL = 1e-4
DOCS = {
    "canberra": "Canberra is the capital city of Australia.",
    "sydney": "Sydney is the largest city in Australia.",
    "banana": "Bananas are yellow and grow in tropical climates.",
    "everest": "Mount Everest is the highest mountain on Earth.",
}
Q1, Q2 = "What is the capital of Australia?", "What is the highest mountain?"


def _setups() -> list[Setup]:
    d = {k: document({"id": k, "text": t}) for k, t in DOCS.items()}
    good = Setup("good", {Q1: [d["canberra"], d["sydney"]], Q2: [d["everest"], d["banana"]]})
    bad = Setup("bad", {Q1: [d["banana"], d["sydney"]], Q2: [d["everest"], d["banana"]]})  # Q2: the same context
    return [good, bad]


# ------------------------------------------------------------------ statistics
def test_sign_flip_p_value_is_exact_on_a_hand_computed_case():
    # 8 sign patterns of (1, 2, 3); |mean| >= 2 only for all + and all -: p = 2/8
    assert sign_flip_p_value([1.0, 2.0, 3.0]) == (0.25, True)
    # (1, -1): every pattern has |mean| >= 0
    assert sign_flip_p_value([1.0, -1.0]) == (1.0, True)
    p, exact = sign_flip_p_value([1.0] * 20, resamples=2000)
    assert not exact and p == pytest.approx(1 / 2001)  # only 2 of 2**20 patterns reach |mean| 1: none drawn


def test_bootstrap_interval_matches_the_exact_resampling_distribution():
    # resample means of (0, 0, 3) are K ~ Binomial(3, 1/3): P = 8/27, 12/27, 6/27, 1/27 at 0, 1, 2, 3;
    # the 2.5% quantile is 0 and the 97.5% quantile 3 (P(K <= 2) = 26/27 < 0.975)
    assert bootstrap_interval([0.0, 0.0, 3.0], resamples=20000, seed=1) == (0.0, 3.0)
    assert bootstrap_interval([0.7] * 5) == pytest.approx((0.7, 0.7))
    assert bootstrap_interval([1.0, 2.0], seed=3) == bootstrap_interval([1.0, 2.0], seed=3)  # seeded


def test_compare_and_sign_test():
    c = compare("a", "b", [1.0, 2.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0])
    assert (c.n, c.wins, c.losses) == (4, 3, 1)
    assert c.mean_diff == pytest.approx(1.25)
    assert c.low <= c.mean_diff <= c.high
    # diffs (1, 2, 3, -1), sum 5: |sum| >= 5 for (1, 2, 3, ±1), (-1, 2, 3, 1) and their negatives: 6 of 16
    assert c.p_value == pytest.approx(6 / 16)
    assert exact_sign_test(5, 0) == pytest.approx(2 / 32)
    assert exact_sign_test(3, 3) == 1.0 and exact_sign_test(0, 0) == 1.0
    with pytest.raises(ValueError, match="differ in length"):
        compare("a", "b", [1.0], [1.0, 2.0])


# ------------------------------------------------------------------ aggregates
def test_holm_adjusts_p_values_by_hand():
    # sorted: 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04, raised to the running 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []


def test_queries_needed_by_hand():
    # ((z_0.975 + z_0.8) * sd / d)^2 = (2.80158 * 1 / 0.5)^2 = 31.4 -> 32
    assert queries_needed(0.5, 1.0) == 32
    assert queries_needed(-0.5, 1.0) == 32  # the sign does not matter
    assert queries_needed(5.0, 1.0) == MIN_QUERIES  # never below the minimum
    assert queries_needed(0.0, 1.0) is None and queries_needed(0.5, float("nan")) is None


def _judged(columns: dict, alpha: float = 0.05):
    names = sorted(columns, key=lambda n: -sum(columns[n]))
    pairs = [compare(a, b, columns[a], columns[b], resamples=500) for i, a in enumerate(names) for b in names[i + 1 :]]
    return judge(pairs, alpha=alpha), {n: sum(v) / len(v) for n, v in columns.items()}


def test_verdict_names_a_best_set_up_only_when_it_beats_every_other():
    noise = [0.1, -0.1, 0.05, -0.05, 0.2, -0.2, 0.1, -0.1, 0.05, -0.05, 0.2, -0.2]  # sums to 0
    cols = {"a": [2.0 + x for x in noise], "b": [0.0] * 12, "c": [0.01 + x / 2 for x in noise[::-1]]}
    judged, means = _judged(cols)
    by = {(c.a, c.b): c for c in judged}
    # a against b or c: 12 of 12 queries higher, exact sign-flip p = 2 / 4096, times 3 (Holm's first step)
    assert by[("a", "b")].p_value == pytest.approx(2 / 4096) and by[("a", "b")].p_adjusted == pytest.approx(6 / 4096)
    assert by[("a", "b")].differs and by[("a", "c")].differs and not by[("c", "b")].differs  # c's mean is higher
    v = verdict(list(cols), means, judged)
    assert v["best"] == "a" and v["top"] == ["a"] and v["headline"].startswith("a beats every other set-up")
    assert v["needed"]["a"] in ("b", "c") and v["needed"]["b"] in ("b", "c")  # the one pair left open


def test_verdict_groups_set_ups_it_cannot_tell_apart():
    noise = [0.1, -0.1, 0.05, -0.05, 0.2, -0.2, 0.1, -0.1, 0.05, -0.05, 0.2, -0.2]
    cols = {"a": [2.0 + x for x in noise], "b": [2.0 - x for x in noise], "c": [0.0] * 12}
    judged, means = _judged(cols)
    v = verdict(list(cols), means, judged)
    assert v["best"] is None and sorted(v["top"]) == ["a", "b"] and sorted(v["beats"]) == [("a", "c"), ("b", "c")]
    assert " tie; " in v["headline"] and "beats c: +2 [" in v["headline"] and "12 of 12 queries" in v["headline"]


def test_verdict_says_when_queries_are_too_few_or_nothing_differs():
    cols = {"a": [1.0] * 6, "b": [0.0] * 6}  # every query agrees, but 6 queries
    judged, means = _judged(cols)
    assert not judged[0].differs  # p = 2/64 < 0.05, yet below MIN_QUERIES
    assert verdict(list(cols), means, judged)["headline"].startswith("Too few queries")
    flat = [0.3, -0.3] * 6
    judged, means = _judged({"a": flat, "b": [0.0] * 12})
    v = verdict(["a", "b"], means, judged)
    assert v["beats"] == [] and v["headline"].startswith("No set-up differs")
    # a pair whose p-value passes but whose interval touches 0 is not called a difference
    c = compare("a", "b", [1.0] * 12, [0.0] * 12, resamples=100)
    from dataclasses import replace

    [j] = judge([replace(c, low=0.0)])
    assert j.p_adjusted < 0.05 and not j.differs


def test_signals_read_from_one_scored_context_by_hand():
    ctx = ContextScore(
        score=-1.2,
        metric="key_entropy",
        confidence=1.2,
        answer="Canberra is the capital.",
        n_tokens=5,
        n_key_tokens=2,
        variants={"key_entropy": -1.2, "ppl": -2.0},
        answer_finished=True,
        documents=[DOCS["canberra"]],
    )
    # answer words (articles dropped): canberra, is, capital; all in the document: support 1
    r = readings(ctx, [DOCS["canberra"]])
    assert r == {"utility": -1.2, "confidence": 0.5, "support": 1.0}
    v = signal_values(r)
    assert v == {
        "utility": -1.2,
        "confidence": 0.5,
        "support": 1.0,
        "confidence_support": pytest.approx(-0.2),
        "settled": 1.0,
    }
    # with the Sydney paragraph only "is" is found: 1 of 3 words, below the gate's 0.8: not settled
    v = signal_values(readings(ctx, [DOCS["sydney"]]))
    assert v["support"] == pytest.approx(1 / 3) and v["settled"] == 0.0
    assert signal_values(readings(ctx, []))["support"] == 0.0 and set(SIGNALS) == set(v)


def _obs(key, query, setup, rank, value, utility=None):
    return Observation(
        key=key, text=f"text {key}", title=None, query=query, setup=setup, rank=rank, value=value, utility=utility
    )


def test_document_table_and_rank_curve_on_hand_built_observations():
    obs = [
        _obs("A", "q1", "s", 1, 0.5),
        _obs("A", "q2", "s", 2, -0.1),
        _obs("A", "q3", "t", 1, 0.2),
        _obs("B", "q1", "s", 2, -0.3),
        _obs("B", "q2", "s", 1, -0.1),
        _obs("C", "q3", "t", 2, 0.0),
    ]
    # D: one query seen by two set-ups is one query, not two (its value alone is the same under both)
    more = [_obs("D", "q1", "s", 1, -0.4), _obs("D", "q1", "t", 3, -0.4), _obs("D", "q2", "s", 1, -0.2)]
    rows = {r["key"]: r for r in document_table(obs + more, min_count=2)}
    a, b, c, d = rows["A"], rows["B"], rows["C"], rows["D"]
    assert [r["key"] for r in document_table(obs + more)] == ["A", "D", "B", "C"]  # most queries, then retrievals
    assert (a["n_retrieved"], a["n_queries"], a["setups"], a["n_positive"], a["n_negative"]) == (3, 3, ["s", "t"], 2, 1)
    assert a["mean_value"] == pytest.approx(0.2) and a["mean_rank"] == pytest.approx(4 / 3)
    # A's interval: bootstrap of (0.5, -0.1, 0.2) spans 0, so A is not flagged either way
    assert a["low"] < 0 < a["high"] and not a["never_positive"] and not a["negative"]
    assert b["mean_value"] == pytest.approx(-0.2) and b["never_positive"] and b["negative"]
    assert b["high"] == pytest.approx(-0.1) and b["low"] == pytest.approx(-0.3)  # resampled means of (-0.3, -0.1)
    assert (d["n_retrieved"], d["n_queries"], d["n_negative"]) == (3, 2, 2) and d["mean_value"] == pytest.approx(-0.3)
    # below min_count queries: no interval and no flag
    assert c["low"] is None and not c["never_positive"] and not c["negative"]
    curve = rank_curve(obs)
    assert curve["s"] == [
        {"rank": 1, "n": 2, "mean_value": pytest.approx(0.2), "useful_share": 0.5},
        {"rank": 2, "n": 2, "mean_value": pytest.approx(-0.2), "useful_share": 0.0},
    ]
    assert curve["t"][1] == {"rank": 2, "n": 1, "mean_value": 0.0, "useful_share": 0.0}


def _record(query, docs, error=None, setup="x"):
    rec = {k: None for k in RECORD_FIELDS}
    rec.update(
        event="grogu_influence",
        framework="langchain",
        query=query,
        metadata={"setup": setup},
        error=error,
        documents=[
            {
                **{k: None for k in DOCUMENT_FIELDS},
                "index": i,
                "id": ident,
                "page_content": text,
                "metadata": {},
                "influence": infl,
                "utility": util,
            }
            for i, (ident, text, infl, util) in enumerate(docs)
        ],
    )
    return rec


def test_aggregates_from_influence_log_records(tmp_path):
    recs = [
        _record("q1", [("d1", "one", 0.4, -1.0), ("d2", "two", 0.0, -2.0)]),
        _record("q2", [("d2", "two", -0.1, None), ("d1", "one", 0.2, -1.5)], setup="y"),
        _record("q3", [("d1", "one", 9.0, None)], error="RuntimeError: failed"),
    ]
    path = tmp_path / "influence.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = from_influence_logs([str(path)], setup_field="setup")
    assert (out["n_records"], out["n_observations"]) == (3, 4)  # the failed record adds nothing
    rows = {r["key"]: r for r in out["documents"]}
    assert rows["d1"]["mean_value"] == pytest.approx(0.3) and rows["d1"]["mean_utility"] == pytest.approx(-1.25)
    assert rows["d1"]["mean_rank"] == pytest.approx(1.5) and rows["d2"]["never_positive"]
    assert set(out["rank_curve"]) == {"x", "y"}
    html, js = write_report(out, str(tmp_path / "report"))
    page = open(html, encoding="utf-8").read()
    assert 'id="chart-rank"' in page and "two" in page and json.load(open(js))["n_records"] == 3


# ------------------------------------------------------------------ the audit on a tiny real model
@pytest.fixture(scope="module")
def scorer(tiny_engine):
    return grogu.UtilityScorer(tiny_engine, max_new_tokens=N)


@pytest.fixture(scope="module")
def result(scorer):
    return audit(scorer, _setups(), batch_size=3, progress=False, resamples=500)


def test_audit_scores_equal_the_scorers_one_at_a_time(scorer, result):
    # distinct contexts: 2 queries x (no document + 4 distinct documents alone... ) counted by hand:
    # Q1: [], [canberra, sydney], [banana, sydney], canberra, sydney, banana; Q2: [], [everest, banana], everest, banana
    assert result.timing["contexts"] == 10
    for row in result.queries:
        q = row["query"]
        none = scorer.score_context(q, []).score
        assert row["none"] == pytest.approx(none, abs=TOL)
        for name, s in row["setups"].items():
            texts = [d["text"] for d in s["documents"]]
            one = scorer.score_context(q, texts)
            assert s["utility"] == pytest.approx(one.score, abs=TOL) and s["answer"] == one.answer
            [support] = support_scores([one.answer], [" ".join(texts)])
            # the default headline: utility + the share of the answer's words in its documents
            assert s["signals"]["support"] == support and s["signals"]["utility"] == s["utility"]
            assert s["value"] == s["signals"]["confidence_support"] == pytest.approx(s["utility"] + support)
            for d in s["documents"]:
                assert d["usefulness"] == pytest.approx(scorer.score_context(q, [d["text"]]).score - none, abs=TOL)
    good = [r["setups"]["good"]["utility"] for r in result.queries]
    values = [r["setups"]["good"]["value"] for r in result.queries]
    assert result.setups["good"]["mean_utility"] == pytest.approx(sum(good) / 2)
    assert result.setups["good"]["mean"] == pytest.approx(sum(values) / 2)
    # no document: support 0, so the baseline's headline is its utility
    assert result.baseline["mean"] == pytest.approx(sum(r["none"] for r in result.queries) / 2)
    assert [c.b for c in result.against_none] == ["no documents"] * 2
    [c] = result.comparisons
    sign = 1 if c.a == "good" else -1
    bad_values = [r["setups"]["bad"]["value"] for r in result.queries]
    assert c.mean_diff == pytest.approx(sign * (sum(values) - sum(bad_values)) / 2)
    assert result.queries[1]["setups"]["good"]["utility"] == result.queries[1]["setups"]["bad"]["utility"]
    assert result.ranking()[0] == c.a


def test_audit_aggregates_documents(result):
    rows = {r["key"]: r for r in result.documents}
    assert rows["banana"]["n_retrieved"] == 3 and rows["banana"]["setups"] == ["bad", "good"]
    assert rows["sydney"]["mean_rank"] == 2.0 and rows["canberra"]["n_retrieved"] == 1
    uses = {
        r["query"]: d["usefulness"]
        for r in result.queries
        for s in r["setups"].values()
        for d in s["documents"]
        if d["key"] == "banana"
    }
    assert rows["banana"]["mean_value"] == pytest.approx(sum(uses.values()) / 2)  # over its 2 queries
    assert rows["banana"]["n_queries"] == 2 and rows["banana"]["n_retrieved"] == 3
    assert [p["rank"] for p in result.rank_curve["good"]] == [1, 2]


def test_audit_reads_set_up_files_and_restricts_queries(tmp_path, scorer):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        json.dumps({"query": Q1, "documents": [DOCS["canberra"]]})
        + "\n"
        + json.dumps({"query": Q2, "documents": [{"text": DOCS["everest"], "title": "Everest"}]})
        + "\n"
    )
    b.write_text(json.dumps({"query": Q1, "documents": [DOCS["banana"]]}) + "\n")
    setups = [read_setup(str(a)), read_setup(str(b), "other")]
    assert [s.name for s in setups] == ["a", "other"] and setups[0].runs[Q2][0]["title"] == "Everest"
    r = audit(scorer, setups, documents=False, progress=False, resamples=200)
    # Q1 with no document (the baseline, always scored), with canberra and with banana
    assert [q["query"] for q in r.queries] == [Q1] and r.timing["contexts"] == 3 and r.documents == []
    with pytest.raises(ValueError, match="no query was run by every set-up"):
        audit(scorer, setups, queries=[Q2], progress=False)
    with pytest.raises(ValueError, match="names must differ"):
        audit(scorer, [setups[0], setups[0]], progress=False)


def test_from_retriever_reads_langchain_and_llama_index():
    from langchain_core.documents import Document as LCDocument
    from langchain_core.retrievers import BaseRetriever

    class Fixed(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            return [
                LCDocument(page_content=DOCS["sydney"], id="s1", metadata={"title": "Sydney"}),
                LCDocument(page_content=DOCS["banana"]),
            ]

    s = from_retriever("lc", Fixed(), [Q1], top_k=1)
    assert s.runs[Q1] == [{"key": "s1", "text": DOCS["sydney"], "title": "Sydney"}]

    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode

    nodes = [TextNode(text=t, id_=k) for k, t in DOCS.items()]
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    s = from_retriever("li", index, [Q1, Q2], top_k=2)
    assert all(len(d) == 2 and {x["key"] for x in d} <= set(DOCS) for d in s.runs.values())
    assert all(x["text"] == DOCS[x["key"]] for d in s.runs.values() for x in d)
    with pytest.raises(TypeError, match="neither a LlamaIndex"):
        from_retriever("x", object(), [Q1])


def test_cli_reports_bad_set_ups_before_loading_a_model(tmp_path, capsys):
    """Bad input is a one-line error naming the file and line, found before any model loads (the model
    named here does not exist, so reaching the loading would be another error)."""
    from grogu.apps.cli import main

    good, other, bad = tmp_path / "good.jsonl", tmp_path / "other.jsonl", tmp_path / "bad.jsonl"
    good.write_text(json.dumps({"query": Q1, "documents": [DOCS["canberra"]]}) + "\n")
    other.write_text(json.dumps({"query": Q2, "documents": [DOCS["banana"]]}) + "\n")
    bad.write_text(json.dumps({"query": Q1, "documents": []}) + "\n" + '{"query": "x", "documents": [}\n')
    nowhere = str(tmp_path / "no-such-model")
    cases = {
        "bad.jsonl:2: not valid JSON": [f"--setup=a={good}", f"--setup=b={bad}"],
        "set-up names must differ": [f"--setup=a={good}", f"--setup=a={good}"],
        "no query was run by every set-up": [f"--setup=a={good}", f"--setup=b={other}"],
    }
    for message, setups in cases.items():
        with pytest.raises(SystemExit) as exit_:
            main(["audit", *setups, "--model", nowhere, "--out", str(tmp_path / "out"), "--quiet"])
        assert message in str(exit_.value.code) and "\n" not in str(exit_.value.code), exit_.value.code
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"query": Q1}) + "\n" + "{oops\n")
    with pytest.raises(SystemExit, match="queries.jsonl:2: not valid JSON"):
        main(["audit", f"--setup=a={good}", "--queries", str(queries), "--model", nowhere, "--quiet"])
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ command line and report
@pytest.fixture(scope="module")
def cli_report(tmp_path_factory):
    from grogu.apps.cli import main

    root = tmp_path_factory.mktemp("audit-cli")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = testing.save_tiny_model(str(root / "tiny"))
    paths = []
    for s in _setups():
        path = root / f"{s.name}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"query": q, "documents": [{"text": d["text"], "id": d["key"]} for d in docs]}) + "\n"
                for q, docs in s.runs.items()
            )
        )
        paths.append(f"{s.name}={path}")
    out = root / "report"
    assert (
        main(
            [
                "audit",
                *[f"--setup={p}" for p in paths],
                "--model",
                model,
                "--device",
                "cpu",
                "--max-new-tokens",
                str(N),
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    return out


def test_cli_writes_report_and_summary(cli_report):
    summary = json.load(open(cli_report / "summary.json"))
    assert set(summary["setups"]) == {"good", "bad"} and len(summary["queries"]) == 2
    assert summary["timing"]["contexts"] == 10 and len(summary["comparisons"]) == 1
    assert {d["key"] for d in summary["documents"]} == set(DOCS)
    page = (cli_report / "report.html").read_text()
    assert len(re.findall(r'<img class="chart"[^>]*src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)) == 4
    assert "http://" not in page and "https://" not in page  # opens without a network


def _chromium() -> str | None:
    return next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="session")
def chromium():
    """A headless browser (Debian's chromium). No test installs it: .ci/run does, for CI. Elsewhere the
    test skips without one; under CI a missing browser is a failure."""
    found = _chromium()
    if found is None:
        message = "no headless browser: install Debian's chromium (apt-get install chromium), as .ci/run does"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _browser(binary: str, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1200,1800",
        "--virtual-time-budget=3000",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(chromium, cli_report):
    url = (cli_report / "report.html").resolve().as_uri()
    dom = _browser(chromium, "--dump-dom", url).stdout
    # the page's script writes each chart's decoded width, and each table's rows, once loaded
    widths = [int(w) for w in re.findall(r'class="chart"[^>]*data-natural-width="(\d+)"', dom)]
    assert len(widths) == 4 and min(widths) > 200, widths
    rows = dict(re.findall(r'<table id="([\w-]+)"[^>]*data-rows="(\d+)"', dom))
    # two set-ups and the no-document baseline; banana, the one document seen for both queries, is listed
    assert int(rows["setups"]) == 3 and int(rows["comparisons"]) == 1
    assert int(rows.get("most-useful", 0)) + int(rows.get("least-useful", 0)) == 1
    assert len(re.findall(r'<details class="query"', dom)) == 2
    shot = cli_report / "shot.png"
    _browser(chromium, f"--screenshot={shot}", url)
    from PIL import Image, ImageStat

    img = Image.open(shot).convert("L")
    assert img.size == (1200, 1800)
    assert ImageStat.Stat(img).stddev[0] > 10 and len(img.getcolors(maxcolors=1 << 16) or []) > 50  # not blank
