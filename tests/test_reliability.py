"""Reliability of the core and the integrations, as a user meets it.

- Bad input of every kind, through UtilityScorer, InfluenceScorer, ΔSePer, ACU, the engine, the
  command line, LlamaIndex's GroguRerank and LangChain's GroguCompressor / GroguRetriever: a clear
  error that names the argument and the value, never a silently empty or shortened result.
- 8 threads and 16 concurrent async callers get what sequential calls get; a cancelled async request
  does not break the ones after it; a forked child can use the async API.
- Processes exit cleanly: scripts using the sync API, threads, the async API and a mix of both
  (tests/reliability_scripts/), 6 runs each (each its own process, forked after the heavy imports
  by run_many.py to keep the cost down) plus one fresh interpreter each, every one with exit status
  0 and no "terminate called" on stderr; and a process that ends with async requests still being
  scored exits cleanly too. (Before grogu's worker thread was joined at exit, async use could end
  in SIGABRT, status 134, after all the work was done.)

Everything runs on tiny random models built from a config and the packaged SmolLM2 tokenizer.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grogu import Document, UtilityScorer, metrics
from grogu.apps.cli import main as cli_main
from grogu.core import checks
from grogu.metrics.acu import ACUScorer
from grogu.metrics.influence import InfluenceScorer
from grogu.metrics.seper import SePerScorer
from grogu.runtime import coalescer

QUERY = "Which river flows through the old city of Prague?"
DOCS = [
    "The Vltava is the longest river within the Czech Republic and flows through Prague.",
    Document("Prague is the capital and largest city of the Czech Republic.", title="Prague"),
    {"text": "Bananas are rich in potassium.", "title": "Fruit"},
    "",
]
TEXTS = [d if isinstance(d, str) else d.text if isinstance(d, Document) else d["text"] for d in DOCS]
QUERIES = [f"Question {i}: which river flows through the old city of Prague?" for i in range(16)]
NAN, INF = float("nan"), float("inf")
TOKENS = 8

SCRIPTS = os.path.join(os.path.dirname(__file__), "reliability_scripts")
RUNS_PER_SCRIPT = 6


@pytest.fixture(scope="module")
def scorer(tiny_engine):
    return UtilityScorer(tiny_engine, max_new_tokens=TOKENS)


def _same(a, b, abs_tol=1e-5):
    """Two lists of DocumentScore agree: same documents, answers and token counts; scores to float32
    rounding (async batches may pad differently)."""
    assert [r.index for r in a] == [r.index for r in b]
    assert [r.answer for r in a] == [r.answer for r in b]
    assert [r.n_tokens for r in a] == [r.n_tokens for r in b]
    assert [r.score for r in a] == pytest.approx([r.score for r in b], abs=abs_tol)


# ---------------------------------------------------------------------------------------- bad settings
BAD_COUNTS = [0, -1, True, False, 2.5, 2.0, "3", None, NAN]
BAD_REALS = [NAN, INF, -INF, True, "0.1", None]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        *[({"alpha": v}, "alpha") for v in [*BAD_REALS, -0.1]],
        *[({"top_k_frac": v}, "top_k_frac") for v in [*BAD_REALS, 0, 0.0, -0.5, 1.5]],
        *[({"max_new_tokens": v}, "max_new_tokens") for v in BAD_COUNTS if v is not None],
        *[({"copy_ngram": v}, "copy_ngram") for v in BAD_COUNTS],
        ({"answer_style": "medium"}, "answer_style"),
        ({"metric": "bleu"}, "metric"),
    ],
)
def test_scorer_rejects_bad_settings(tiny_engine, kwargs, name):
    with pytest.raises(ValueError, match=name) as err:
        UtilityScorer(tiny_engine, **kwargs)
    assert repr(next(iter(kwargs.values()))) in str(err.value) or name == "metric"


def test_rerank_rejects_top_n_and_threshold_that_would_return_nothing(scorer):
    for top_n in (0, -1, True, 1.0, "2"):
        with pytest.raises(ValueError, match=f"top_n must be a positive int or None.*got {top_n!r}"):
            scorer.rerank(QUERY, DOCS, top_n=top_n, mode="document")
        with pytest.raises(ValueError, match="top_n"):
            asyncio.run(scorer.arerank(QUERY, DOCS, top_n=top_n, mode="document"))
    for threshold in (NAN, INF, -INF, True, "high"):
        with pytest.raises(ValueError, match="threshold must be a finite number"):
            scorer.rerank(QUERY, DOCS, threshold=threshold, mode="document")
        with pytest.raises(ValueError, match="threshold"):
            asyncio.run(scorer.arerank(QUERY, DOCS, threshold=threshold, mode="document"))
    # the valid extremes still work and keep every document
    ranked = scorer.rerank(QUERY, DOCS, top_n=len(DOCS) + 5, threshold=-1e9, mode="document")
    assert sorted(r.index for r in ranked) == list(range(len(DOCS)))


def test_scorer_bad_inputs_are_clear_and_nothing_is_dropped(scorer):
    for query, error in ((None, TypeError), (3, TypeError), ("", ValueError), ("  \n", ValueError)):
        with pytest.raises(error, match="query"):
            scorer.score(query, DOCS)
        with pytest.raises(error, match="query"):
            asyncio.run(scorer.ascore(query, DOCS))
    for documents, match in (
        ("one string", "list of documents"),
        (None, "list of documents"),
        (["ok", None], "document 1"),
        (["ok", 3], "document 1"),
        ([{"title": "no text"}], "document 0"),
        ([{"text": "x", "title": 5}], "document 0"),
    ):
        with pytest.raises(TypeError, match=match):
            scorer.score(QUERY, documents)
        with pytest.raises(TypeError, match=match):
            asyncio.run(scorer.ascore(QUERY, documents))
    for items in ("query", [("q",)], [("q", ["d"], "extra")], ["not a pair"]):
        with pytest.raises(TypeError, match="items"):
            scorer.score_batch(items)
    # documents given as a generator are all scored (the input is read once), the empty one included
    expected = scorer.score(QUERY, DOCS)
    assert len(expected) == len(DOCS) and expected[3].document == ""
    _same(scorer.score(QUERY, (d for d in DOCS)), expected)
    _same(asyncio.run(scorer.ascore(QUERY, (d for d in DOCS))), expected)
    got = scorer.score_contexts(QUERY, [(d for d in DOCS[:2]), iter(DOCS[2:])])
    assert [c.documents for c in got] == [DOCS[:2], DOCS[2:]]


def test_engine_and_metrics_reject_bad_settings(tiny_engine):
    prompt = [tiny_engine.encode("Hello there")]
    for n in (0, -3, True, 1.5, NAN):
        with pytest.raises(ValueError, match="max_new_tokens"):
            tiny_engine.generate(prompt, n)
    for t in (0, -1.0, NAN, INF, True, "1"):
        with pytest.raises(ValueError, match="temperature"):
            tiny_engine.generate(prompt, 4, temperature=t)
    with pytest.raises(TypeError, match="seed"):
        tiny_engine.generate(prompt, 4, temperature=1.0, seed="7")
    h = [0.5, 0.2, 0.9]
    for alpha in (NAN, -1, INF):
        with pytest.raises(ValueError, match="alpha"):
            metrics.compute("key_entropy", h, [-0.1] * 3, h, alpha=alpha)
    for frac in (NAN, 0, 1.01, True):
        with pytest.raises(ValueError, match="top_k_frac"):
            metrics.compute("key_entropy", h, [-0.1] * 3, h, top_k_frac=frac)
    with pytest.raises(ValueError, match="quantile"):
        metrics.quantile_key_mask(h, h, NAN)


def test_checks_name_the_argument_and_the_value():
    with pytest.raises(ValueError, match=r"n_samples must be a positive int, got True"):
        checks.check_positive_int("n_samples", True)
    with pytest.raises(ValueError, match=r"tau must be in \[0, 1\], got nan|tau must be a finite number, got nan"):
        checks.check_probability("tau", NAN)
    with pytest.raises(ValueError, match=r"lasso_alpha must be > 0, got 0"):
        checks.check_positive_float("lasso_alpha", 0)
    assert checks.check_top_n(None) is None and checks.check_threshold(None) is None
    assert checks.check_threshold(-2) == -2.0 and isinstance(checks.check_alpha(0), float)
    # compatibility: the checks are still importable from the scorer module
    from grogu.rerank.scorer import check_documents, check_query

    assert check_query("  q ") == "q" and check_documents(["a"])[0].text == "a"


# ------------------------------------------------------------------------ influence, ΔSePer, ACU
@pytest.fixture(scope="module")
def influence(tiny_engine):
    return InfluenceScorer(tiny_engine, max_new_tokens=TOKENS)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        *[({"max_new_tokens": v}, "max_new_tokens") for v in BAD_COUNTS],
        *[({"n_ablations": v}, "n_ablations") for v in BAD_COUNTS if v is not None],  # None: the method's default
        *[({"lasso_alpha": v}, "lasso_alpha") for v in [*BAD_REALS, 0, -1]],
        ({"method": "sampled"}, "method"),
    ],
)
def test_influence_rejects_bad_settings(tiny_engine, kwargs, name):
    with pytest.raises(ValueError, match=name):
        InfluenceScorer(tiny_engine, **kwargs)


def test_influence_bad_inputs(influence):
    with pytest.raises(TypeError, match="seed"):
        InfluenceScorer(influence.target, seed=1.5)
    with pytest.raises(ValueError, match="query"):
        influence.score("  ", DOCS)
    with pytest.raises(TypeError, match="document 2"):
        influence.score(QUERY, ["a", "b", 7])
    with pytest.raises(TypeError, match="answer"):
        influence.score(QUERY, DOCS, answer=3)
    with pytest.raises(TypeError, match="items"):
        influence.score_batch([(QUERY,)])
    with pytest.raises(ValueError, match="query"):
        asyncio.run(influence.ascore("", DOCS))
    # every document gets a score, in input order, also from a generator and from a (query, docs) pair
    full = influence.score(QUERY, DOCS[:3])
    assert len(full.scores) == 3 and all(math.isfinite(s) for s in full.scores)
    assert influence.score(QUERY, (d for d in DOCS[:3])).scores == pytest.approx(full.scores, abs=1e-6)
    assert influence.score_batch([(QUERY, DOCS[:3])])[0].scores == pytest.approx(full.scores, abs=1e-6)


def _kernel(premises, hypotheses):
    return [((len(p) * 7 + len(h) * 3) % 10) / 10 for p, h in zip(premises, hypotheses)]


def test_seper_rejects_bad_settings_and_kernels(tiny_engine):
    bad = [
        *[({"n_samples": v}, "n_samples") for v in BAD_COUNTS],
        *[({"temperature": v}, "temperature") for v in [*BAD_REALS, 0, -0.5]],
        *[({"tau": v}, "tau") for v in [*BAD_REALS, -0.1, 1.5]],
        *[({"max_new_tokens": v}, "max_new_tokens") for v in BAD_COUNTS],
    ]
    for kwargs, name in bad:
        with pytest.raises(ValueError, match=name):
            SePerScorer(tiny_engine, entailment=_kernel, **kwargs)
    with pytest.raises(TypeError, match="seed"):
        SePerScorer(tiny_engine, entailment=_kernel, seed="0")
    with pytest.raises(TypeError, match="entailment"):
        SePerScorer(tiny_engine, entailment=3)
    seper = SePerScorer(tiny_engine, entailment=_kernel, n_samples=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="query"):
        seper.score("", ["doc"], ["Prague"])
    with pytest.raises(ValueError, match="reference answer 0 is empty"):
        seper.score(QUERY, ["doc"], [" "])
    results = seper.score(QUERY, DOCS, ["Vltava"])
    assert len(results) == len(DOCS) and all(math.isfinite(r.delta_soft) for r in results)
    # a kernel that returns NaN, a value outside [0, 1] or too few values is an error, not a NaN score
    for broken in (lambda p, h: [NAN] * len(p), lambda p, h: [1.5] * len(p), lambda p, h: [0.5]):
        with pytest.raises(ValueError, match="entailment kernel"):
            SePerScorer(tiny_engine, entailment=broken, n_samples=2, max_new_tokens=4).score(QUERY, ["d"], ["x"])


def test_acu_bad_inputs(tiny_engine):
    with pytest.raises(TypeError, match="labels"):
        ACUScorer(tiny_engine, labels="True")  # a string is not a list of label words
    with pytest.raises(ValueError, match="two distinct"):
        ACUScorer(tiny_engine, labels=["True", "True"])
    with pytest.raises(ValueError, match="label 1"):
        ACUScorer(tiny_engine, labels=["True", " "])
    with pytest.raises(ValueError, match=r"prompt_with must contain.*\{evidence\} missing"):
        ACUScorer(tiny_engine, prompt_with="Claim: {claim}. True or False?")
    with pytest.raises(TypeError, match="prompt_without"):
        ACUScorer(tiny_engine, prompt_without=None)
    scorer = ACUScorer(tiny_engine)
    with pytest.raises(TypeError, match="items"):
        scorer.score_batch("claim")
    with pytest.raises(TypeError, match=r"items\[0\]"):
        scorer.score_batch([("claim", "evidence")])
    with pytest.raises(ValueError, match="unknown stance"):
        scorer.score("Prague is in Czechia.", "It is.", "MAYBE")
    results = scorer.score_batch([("Prague is in Czechia.", "Prague is the Czech capital.", "SUPPORTS")] * 3)
    assert len(results) == 3 and all(-1 <= r.acu <= 1 for r in results)


def test_cli_rejects_bad_options_before_loading_a_model(capsys):
    for argv, text in (
        (["rerank", "--example", "--top-n", "0"], "top_n must be a positive int"),
        (["rerank", "--example", "--threshold", "nan"], "threshold must be a finite number"),
        (["rerank", "--example", "--alpha", "nan"], "alpha must be a finite number"),
        (["score", "--example", "--top-k-frac", "0"], "must be in (0, 1]"),
        (["score", "--example", "--batch-queries", "0"], "must be a positive int"),
        (["score", "--example", "--max-new-tokens", "x"], "not an int"),
        (["seper", "--query", "q", "--docs", "d", "--reference", "r", "--nli", "n", "--tau", "2"], "must be in [0, 1]"),
        (["influence", "--query", "q", "--docs", "d", "--ablations", "0"], "must be a positive int"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli_main(argv)
        assert exit_info.value.code == 2
        assert text in capsys.readouterr().err


# -------------------------------------------------------------------------------------- integrations
@pytest.fixture(scope="module")
def pair(tiny_engine):
    """The target LLM of the integrations: the tiny model's engine (shared, as a user would share it)."""
    return tiny_engine


def test_llamaindex_rerank_bad_inputs(pair, scorer):
    pytest.importorskip("llama_index.postprocessor.grogu")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.postprocessor.grogu import GroguRerank

    for kwargs, name in [
        *[({"top_n": v}, "top_n") for v in (0, -2, True, 1.5)],
        *[({"threshold": v}, "threshold") for v in (NAN, INF, -INF, True, "high")],
        *[({"max_new_tokens": v}, "max_new_tokens") for v in (0, True, 2.5)],
        ({"famly": "orders"}, "famly"),  # an unknown name: a typo of family
        ({"on_error": "ignore"}, "on_error"),
        ({"metric": "bleu"}, "metric"),
    ]:
        with pytest.raises(ValueError, match=name):
            GroguRerank(model=pair, **kwargs)
    nodes = [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 - i / 10) for i, t in enumerate(TEXTS)]
    rerank = GroguRerank(model=pair, max_new_tokens=TOKENS, mode="document", top_n=None)  # None: keep all
    for query in ("", "   "):
        with pytest.raises(ValueError, match="query is empty"):
            rerank.postprocess_nodes(nodes, query_bundle=QueryBundle(query))
    with pytest.raises(TypeError, match="node 1"):
        rerank.postprocess_nodes([nodes[0], "text"], query_bundle=QueryBundle(QUERY))
    # nothing dropped: all nodes back, scored as the core scores them
    kept = rerank.postprocess_nodes(nodes, query_bundle=QueryBundle(QUERY))
    assert sorted(n.node.node_id for n in kept) == [n.node.node_id for n in nodes]
    core = {f"n{r.index}": r.score for r in scorer.score(QUERY, TEXTS)}
    assert [n.score for n in kept] == pytest.approx([core[n.node.node_id] for n in kept], abs=1e-5)


def test_langchain_bad_inputs(pair, scorer):
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document as LCDocument
    from langchain_core.runnables import RunnableLambda
    from langchain_grogu import GroguCompressor, GroguRetriever
    from pydantic import ValidationError

    bad = [
        *[({"top_n": v}, "top_n") for v in (0, -2, True, 1.5, NAN)],
        *[({"threshold": v}, "threshold") for v in (NAN, INF, -INF, True, "high")],
        *[({"alpha": v}, "alpha") for v in (NAN, INF, -0.1, True)],
        *[({"top_k_frac": v}, "top_k_frac") for v in (0, NAN, 1.5, True)],
        *[({"max_new_tokens": v}, "max_new_tokens") for v in (0, True, 2.5)],
        ({"metric": "bleu"}, "metric"),
    ]
    docs = [LCDocument(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)]
    base = RunnableLambda(lambda query: docs)
    for kwargs, name in bad:
        for make in (
            lambda **kw: GroguCompressor(model=pair, **kw),
            lambda **kw: GroguRetriever(base_retriever=base, model=pair, **kw),
        ):
            with pytest.raises(ValidationError, match=name) as err:  # a ValidationError is a ValueError
                make(**kwargs)
            assert isinstance(err.value, ValueError)
    compressor = GroguCompressor(model=pair, top_n=None, max_new_tokens=TOKENS, mode="document")
    with pytest.raises(TypeError, match="query must be a str"):
        compressor.compress_documents(docs, None)
    with pytest.raises(TypeError, match="document 1"):
        compressor.compress_documents([docs[0], "raw text"], QUERY)
    with pytest.raises(ValueError, match="query is empty"):
        compressor.compress_documents(docs, " ")
    # nothing dropped: top_n=None keeps every document, scored as the core scores them
    kept = compressor.compress_documents(docs, QUERY)
    assert sorted(d.id for d in kept) == [d.id for d in docs]
    core = {f"d{r.index}": r.score for r in scorer.score(QUERY, TEXTS)}
    assert [d.metadata["grogu"]["score"] for d in kept] == pytest.approx([core[d.id] for d in kept], abs=1e-5)
    retriever = GroguRetriever(base_retriever=base, model=pair, top_n=None, max_new_tokens=TOKENS, mode="document")
    assert [d.id for d in retriever.invoke(QUERY)] == [d.id for d in kept]
    with pytest.raises(ValueError, match="query is empty"):
        retriever.invoke("  ")


# ----------------------------------------------------------------------------------------- concurrency
def test_eight_threads_equal_sequential(scorer):
    queries = QUERIES[:8]
    sequential = [scorer.score(q, DOCS) for q in queries]
    barrier = threading.Barrier(len(queries))

    def work(q):
        barrier.wait()
        return scorer.score(q, DOCS)

    with ThreadPoolExecutor(len(queries)) as pool:
        threaded = list(pool.map(work, queries))
    for a, b in zip(threaded, sequential):
        _same(a, b, abs_tol=1e-6)


def test_sixteen_async_callers_equal_sequential(scorer):
    sequential = [scorer.score(q, DOCS) for q in QUERIES]

    async def main():
        return await asyncio.gather(*(scorer.ascore(q, DOCS) for q in QUERIES))

    before = scorer.async_batches_run
    concurrent = asyncio.run(main())
    assert scorer.async_batches_run - before < len(QUERIES)  # coalesced into shared engine batches
    for a, b in zip(concurrent, sequential):
        _same(a, b)


def test_async_integrations_equal_sequential(pair):
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document as LCDocument
    from langchain_grogu import GroguCompressor

    docs = [LCDocument(page_content=t, id=f"d{i}") for i, t in enumerate(TEXTS)]
    compressor = GroguCompressor(model=pair, top_n=2, max_new_tokens=TOKENS, mode="document")
    sequential = [compressor.compress_documents(docs, q) for q in QUERIES]

    async def main():
        return await asyncio.gather(*(compressor.acompress_documents(docs, q) for q in QUERIES))

    for a, b in zip(asyncio.run(main()), sequential):
        assert [d.id for d in a] == [d.id for d in b]
        assert [d.metadata["grogu"]["score"] for d in a] == pytest.approx(
            [d.metadata["grogu"]["score"] for d in b], abs=1e-5
        )


def test_cancelled_and_failing_requests_do_not_break_the_others(scorer):
    expected = scorer.score(QUERY, DOCS)

    async def cancel_some():
        tasks = [asyncio.ensure_future(scorer.ascore(q, DOCS)) for q in QUERIES[:6]]
        await asyncio.sleep(0)  # every task has submitted its request; two of them are then cancelled
        tasks[1].cancel()
        tasks[4].cancel()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(scorer.ascore(QUERY, DOCS * 8), timeout=1e-4)
        # (a cancelled request used to stop the worker: the rest of its batch, and every later request, hung)
        return await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), timeout=120)

    results = asyncio.run(cancel_some())
    assert isinstance(results[1], asyncio.CancelledError) and isinstance(results[4], asyncio.CancelledError)
    assert all(isinstance(r, list) and len(r) == len(DOCS) for i, r in enumerate(results) if i not in (1, 4))

    async def mixed_good_and_bad():
        return await asyncio.gather(
            scorer.ascore(QUERY, DOCS),
            scorer.ascore("", DOCS),
            scorer.ascore(QUERY, ["ok", 3]),
            scorer.ascore(QUERY, DOCS),
            return_exceptions=True,
        )

    ok1, empty, bad_doc, ok2 = asyncio.run(mixed_good_and_bad())
    assert isinstance(empty, ValueError) and isinstance(bad_doc, TypeError)
    _same(ok1, expected)
    _same(ok2, expected)
    # and the worker still serves requests afterwards
    _same(asyncio.run(asyncio.wait_for(scorer.ascore(QUERY, DOCS), timeout=120)), expected)


def test_worker_runs_tasks_in_order_and_reports_errors():
    order = []
    futures = [coalescer.submit(order.append, i) for i in range(5)]
    failing = coalescer.submit(lambda: 1 / 0)
    assert [f.result(timeout=30) for f in futures] == [None] * 5 and order == list(range(5))
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=30)
    names = {t.name: t.daemon for t in threading.enumerate()}
    assert names.get("grogu-worker") is False  # not a daemon: joined at exit, never killed mid-work


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_can_use_the_async_api(scorer):
    expected = scorer.score(QUERY, DOCS)
    asyncio.run(scorer.ascore(QUERY, DOCS))  # the worker thread is running in the parent
    pid = os.fork()
    if pid == 0:  # child: the worker does not exist here and must start afresh
        status = 1
        try:
            import torch

            torch.set_num_threads(1)  # no OpenMP team in a forked child
            got = asyncio.run(asyncio.wait_for(scorer.ascore(QUERY, DOCS), timeout=60))
            status = 0 if [r.answer for r in got] == [r.answer for r in expected] else 2
        finally:
            os._exit(status)
    deadline = time.monotonic() + 120
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish its async request in 120 s")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0


# ------------------------------------------------------------------------------------- clean exits
@pytest.fixture(scope="module")
def saved_tokenizer(tokenizer, tmp_path_factory):
    """The packaged SmolLM2 tokenizer saved as tokenizer.json: each script loads it in a fraction of
    the seconds the GGUF takes, which keeps 80 process starts affordable."""
    path = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(path)
    return str(path)


def _script_env(saved_tokenizer: str) -> dict:
    return {
        **os.environ,
        "GROGU_RELIABILITY_TOKENIZER": saved_tokenizer,
        "GROGU_RELIABILITY_MODEL": "tiny",
        "OMP_NUM_THREADS": os.environ.get("GROGU_RELIABILITY_THREADS", "1"),
    }


def _clean(code: int, out: str, err: str) -> bool:
    return code == 0 and "ok" in out.split() and "terminate called" not in err


def _runs(script: str, env: dict, out_dir: str) -> list[tuple[str, int, str, str]]:
    """(run, exit status, stdout, stderr) of one fresh ``python SCRIPT`` and of RUNS_PER_SCRIPT runs
    forked by run_many.py (one process each, ending through the normal interpreter exit)."""
    fresh = subprocess.run([sys.executable, script], cwd=SCRIPTS, env=env, capture_output=True, text=True, timeout=300)
    runs = [("fresh", fresh.returncode, fresh.stdout, fresh.stderr)]
    many = subprocess.run(
        [sys.executable, "run_many.py", script, str(RUNS_PER_SCRIPT), out_dir],
        cwd=SCRIPTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert many.returncode == 0, f"run_many.py failed: {many.stderr[-2000:]}"
    for line in many.stdout.split("\n"):
        if line.strip():
            run, code = line.split()
            with open(os.path.join(out_dir, run + ".out")) as out, open(os.path.join(out_dir, run + ".err")) as err:
                runs.append((run, int(code), out.read(), err.read()))
    assert len(runs) == RUNS_PER_SCRIPT + 1, many.stdout
    return runs


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    # heavy, all four: test_exit_with_requests_in_flight checks a clean exit on every CI run
    [pytest.param(s, marks=pytest.mark.heavy) for s in ("sync_script.py", "threaded_script.py", "async_script.py")]
    + [pytest.param("mixed_script.py", marks=pytest.mark.heavy)],
)
def test_scripts_exit_cleanly(script, saved_tokenizer, tmp_path):
    """Each script (sync, threaded, async, mixed) run 6 times, each run its own process, plus once
    as a fresh ``python SCRIPT``; the runs one after another (one test per script, so parallel test
    workers share them out). Every run must print "ok" and exit with status 0, with no C++
    "terminate called" on stderr. GROGU_RELIABILITY_THREADS sets the scripts' torch threads (default 1,
    as the rest of the suite runs)."""
    runs = _runs(script, _script_env(saved_tokenizer), str(tmp_path / script))
    failed = [(run, code, err[-1500:]) for run, code, out, err in runs if not _clean(code, out, err)]
    assert not failed, "runs that did not exit cleanly ([(run, exit status, stderr)]): " + repr(failed)


@pytest.mark.slow
def test_exit_with_requests_in_flight(saved_tokenizer):
    """A process that ends while async requests are being scored exits cleanly (status 0, no error on
    stderr): the worker finishes the batch in flight at exit instead of being killed inside torch."""
    proc = subprocess.run(
        [sys.executable, "inflight_script.py"],
        cwd=SCRIPTS,
        env=_script_env(saved_tokenizer),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (proc.returncode, proc.stdout.split()) == (0, ["ok"]), proc.stderr[-2000:]
    assert not any(text in proc.stderr for text in ("Traceback", "Exception", "terminate called")), proc.stderr
