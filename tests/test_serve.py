"""The scoring service (grogu serve on Ray Serve) and its clients, against in-process results.

One local Ray and one Serve application of the tiny model (saved to a folder, so the replica loads
exactly the weights the in-process reference loads) serve every test of this module; a LlamaIndex
query engine and a LangChain chain use it through GroguRerank / GroguRetriever and the influence
handlers. Nothing is mocked."""

from __future__ import annotations

import asyncio
import socket
import warnings

import pytest

pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from grogu_research import testing  # noqa: E402

import grogu  # noqa: E402
from grogu.apps.serve import (  # noqa: E402
    RemoteACUScorer,
    RemoteInfluenceScorer,
    RemoteScorer,
    RemoteSePerScorer,
    ServiceAuthError,
    ServiceUnavailable,
    ServiceValueError,
)
from grogu.metrics.acu import ACUScorer  # noqa: E402
from grogu.metrics.influence import InfluenceScorer  # noqa: E402

# Ray Serve: not in the fast subset (-m "not slow"); one Ray cluster, so every test here runs on one xdist worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

TOKEN = "test-token"
N = 8  # answer tokens: keeps the tiny model fast
TOL = 1e-4
QUERY = "What is the capital city of Australia?"
DOCS = [
    "Canberra is the capital city of Australia, chosen in 1908 as a compromise between Sydney and Melbourne.",
    {"text": "Sydney is the largest city in Australia.", "title": "Sydney", "source": "wiki", "id": 7},
    "Bananas are yellow and grow in tropical climates.",
    grogu.Document("Melbourne was the seat of government until 1927.", "Melbourne", {"rank": 3}),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return testing.save_tiny_model(str(tmp_path_factory.mktemp("tiny-llama")))


@pytest.fixture(scope="module")
def nli_dir(tmp_path_factory):
    """A tiny NLI classifier (2-layer BERT, random weights) on the packaged MiniLM's tokenizer."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from grogu.runtime.models import embedded_embedder_path

    path = str(tmp_path_factory.mktemp("tiny-nli"))
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
    BertForSequenceClassification(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


#: the service's limits in these tests (small, so that each can be crossed cheaply)
LIMITS = dict(
    max_docs=12,
    max_doc_chars=400,
    max_query_chars=200,
    max_template_chars=600,
    max_request_chars=3000,
    max_new_tokens=100,
    max_rerank_contexts=24,
    max_samples=10,
    max_ablations=40,
    max_acu_items=20,
    max_request_tokens=4_000,
    max_body_bytes=64_000,
    body_timeout_s=2.0,
)
MAX_BATCH_TOKENS = 64  # generation budget of one engine call: 8 contexts of N tokens
HEADER_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def service(model_dir, nli_dir):
    """One local Ray (2 CPUs) and one application of the tiny model, with a token and small limits,
    behind Ray Serve's proxy configured as grogu serve configures it."""
    from grogu.apps.serve.service import ServeConfig

    config = ServeConfig(
        model=model_dir,
        device="cpu",
        token=TOKEN,
        max_batch_size=8,
        batch_wait_s=0.05,
        nli=nli_dir,
        max_batch_tokens=MAX_BATCH_TOKENS,
        stats_pids=True,
        **LIMITS,
    )
    with testing.local_service(config, header_timeout_s=HEADER_TIMEOUT_S) as url:
        yield url


@pytest.fixture(scope="module")
def local(model_dir):
    return grogu.UtilityScorer(model_dir, device="cpu", max_new_tokens=N)


@pytest.fixture(scope="module")
def remote(service):
    return RemoteScorer(service, token=TOKEN, max_new_tokens=N)


def same(a, b, docs=None):
    """Remote and in-process results agree: answers, token counts, scores and variants within TOL."""
    assert a.answer == b.answer and a.n_tokens == b.n_tokens and a.n_key_tokens == b.n_key_tokens
    assert a.score == pytest.approx(b.score, abs=TOL) and a.confidence == pytest.approx(b.confidence, abs=TOL)
    assert a.variants == pytest.approx(b.variants, abs=TOL) and a.metric == b.metric


# ---------------------------------------------------------------------------------------------- equality
def test_score_and_batch_equal_in_process(remote, local):
    got, want = remote.score(QUERY, DOCS), local.score(QUERY, DOCS)
    assert [r.index for r in got] == [0, 1, 2, 3]
    for a, b in zip(got, want):
        same(a, b)
        assert a.document is DOCS[a.index]  # the caller's own objects, metadata included, never sent
    batch = remote.score_batch([(QUERY, DOCS[:2]), ("Who lived in Melbourne?", DOCS[2:])])
    for rows, (q, docs) in zip(batch, [(QUERY, DOCS[:2]), ("Who lived in Melbourne?", DOCS[2:])]):
        for a, b in zip(rows, local.score(q, docs)):
            same(a, b)
    detailed = remote.score(QUERY, DOCS[:1], return_details=True)[0].details
    ref = local.score(QUERY, DOCS[:1], return_details=True)[0].details
    assert detailed.token_ids == ref.token_ids and detailed.tokens == ref.tokens
    assert detailed.grounded_entropy.tolist() == pytest.approx(ref.grounded_entropy.tolist(), abs=TOL)
    assert detailed.key_mask.tolist() == ref.key_mask.tolist()


def test_audit_through_the_service_equals_in_process(remote, local):
    """grogu.apps.audit with the service's client: the same contexts, utilities and answers as in process."""
    from grogu.apps.audit import Setup, audit
    from grogu.apps.audit.setups import document

    texts = [d if isinstance(d, str) else d.text if isinstance(d, grogu.Document) else d["text"] for d in DOCS]
    docs = [document(t) for t in texts]
    setups = [Setup("first", {QUERY: docs[:2]}), Setup("last", {QUERY: docs[2:]})]
    got, want = (audit(s, setups, progress=False, resamples=100) for s in (remote, local))
    assert got.timing["contexts"] == want.timing["contexts"] == 7  # no document, 2 contexts, 4 documents alone
    for name in ("first", "last"):
        a, b = got.queries[0]["setups"][name], want.queries[0]["setups"][name]
        assert a["answer"] == b["answer"] and a["utility"] == pytest.approx(b["utility"], abs=TOL)
        assert [d["usefulness"] for d in a["documents"]] == pytest.approx(
            [d["usefulness"] for d in b["documents"]], abs=TOL
        )


def test_contexts_layout_and_ungrounded_equal_in_process(remote, local):
    contexts = [DOCS[:2], DOCS[2:], [DOCS[3], DOCS[0]]]
    for a, b in zip(remote.score_contexts(QUERY, contexts), local.score_contexts(QUERY, contexts)):
        same(a, b)
        assert a.documents == b.documents
    layouts = list(grogu.standard_layouts(DOCS[:3]).values())
    got, want = remote.best_layout(QUERY, layouts), local.best_layout(QUERY, layouts)
    assert got.best == want.best and got.documents == want.documents
    u, v = remote.ungrounded(QUERY), local.ungrounded(QUERY)
    assert u.answer == v.answer and u.confidence == pytest.approx(v.confidence, abs=TOL)


@pytest.mark.parametrize(
    "mode,kwargs",
    [
        ("context", {"top_n": 2}),
        ("document", {"top_n": 3, "threshold": -50.0}),
        ("fusion", {"top_n": 3, "relevance": [0.9, 0.8, 0.1, 0.5], "weight": 0.5}),
        ("prune", {}),
    ],
)
def test_rerank_modes_equal_in_process(remote, local, mode, kwargs):
    got, want = remote.rerank(QUERY, DOCS, mode=mode, **kwargs), local.rerank(QUERY, DOCS, mode=mode, **kwargs)
    assert [r.index for r in got] == [r.index for r in want]
    for a, b in zip(got, want):
        same(a, b)
        assert a.document is DOCS[a.index]
        assert (a.rank_score is None) == (b.rank_score is None)
        if b.rank_score is not None:
            assert a.rank_score == pytest.approx(b.rank_score, abs=TOL)
    if mode == "context":
        assert got[0].context is got[-1].context and got[0].context.answer == want[0].context.answer
        assert got[0].context.documents == [DOCS[r.index] for r in got]


def test_rerank_gate_runs_in_the_service_as_in_process(service, remote, local):
    """/rerank runs the library's rerank pipeline: calm, it answers the retriever's context alone (one
    answer call, one teacher-forcing call); in doubt, the other candidates too. The verdict equals the
    in-process one, field by field."""
    for gate, candidates in (
        ({"gate_support": 0.0, "gate_confidence": 0.0}, 1),
        ({"gate_support": 1.0, "gate_confidence": 1.0}, 6),
    ):
        before = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"]
        got = remote.rerank(QUERY, DOCS, top_n=2, **gate)
        calls = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"] - before
        want = local.rerank(QUERY, DOCS, top_n=2, **gate)
        assert [r.index for r in got] == [r.index for r in want]
        assert got[0].gate.in_doubt == (candidates > 1) and got[0].gate.candidates == candidates
        assert got[0].gate.reasons == want[0].gate.reasons and got[0].gate.changed == want[0].gate.changed
        assert got[0].gate.support == pytest.approx(want[0].gate.support)
        assert got[0].gate.confidence == pytest.approx(want[0].gate.confidence, abs=1e-4)
        if candidates == 1:
            assert calls == 2  # the retriever's context answered, then its answer teacher-forced
        else:
            assert calls >= 3  # the first answer, the other five, then the teacher forcing


def test_a_tuned_settings_file_reranks_in_the_service_as_in_process(remote, local, tmp_path):
    """A grogu tune file given to the client (settings=PATH): its settings travel in the request and the
    service decides as the library does with them. ``family="keep"`` (the retriever's order) too."""
    from grogu.rerank.tuned import TunedSettings, prompt_hash

    for settings in (
        grogu.ModeSettings(family="swap_reversed", gate="always", rule="confidence", margin=0.0),
        grogu.ModeSettings(family="keep"),
    ):
        path = tmp_path / f"{settings.family}.json"
        TunedSettings(settings, remote.model_name, prompt_hash(local.template), 2, N, "tuned").save(path)
        got = remote.rerank(QUERY, DOCS, top_n=2, settings=str(path))
        want = local.rerank(QUERY, DOCS, top_n=2, settings=settings)
        assert [r.index for r in got] == [r.index for r in want]
        assert got[0].context.answer == want[0].context.answer and got[0].gate.changed == want[0].gate.changed
    assert [r.index for r in got] == [0, 1] and got[0].gate.candidates == 1


def test_concurrent_async_requests_share_engine_batches(service, remote, local):
    queries = [f"{QUERY} ({i})" for i in range(8)]

    async def run():
        return await asyncio.gather(*(remote.ascore(q, DOCS[:2]) for q in queries))

    before = httpx.get(f"{service}/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()["batch_sizes"]
    results = asyncio.run(run())
    after = httpx.get(f"{service}/stats", headers={"Authorization": f"Bearer {TOKEN}"}).json()["batch_sizes"]
    for q, rows in zip(queries, results):
        for a, b in zip(rows, local.score(q, DOCS[:2])):
            same(a, b)
    new = {int(k): v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}
    assert sum(k * v for k, v in new.items()) == 8  # every request in exactly one batch
    assert max(new) > 1  # concurrent requests were gathered into one engine batch


def test_influence_and_acu_equal_in_process(service, model_dir, local):
    remote = RemoteInfluenceScorer(service, token=TOKEN, max_new_tokens=N)
    reference = InfluenceScorer(local.target, max_new_tokens=N)
    got, want = remote.score(QUERY, DOCS[:3]), reference.score(QUERY, DOCS[:3])
    assert got.answer == want.answer and got.single_answers == want.single_answers
    assert got.leave_one_out_answers == want.leave_one_out_answers
    assert got.scores == pytest.approx(want.scores, abs=TOL) and got.method == "exact"
    given = remote.score(QUERY, DOCS[:2], answer="Canberra")
    assert given.answer == "Canberra"
    assert given.scores == pytest.approx(reference.score(QUERY, DOCS[:2], answer="Canberra").scores, abs=TOL)
    forward = RemoteInfluenceScorer(service, token=TOKEN, max_new_tokens=N, method="leave_one_out_logprob")
    got = forward.score(QUERY, DOCS[:3], answer="Canberra")
    want = InfluenceScorer(local.target, max_new_tokens=N, method="leave_one_out_logprob").score(
        QUERY, DOCS[:3], answer="Canberra"
    )
    assert forward.forward_only and got.method == want.method and got.embedder is None
    assert got.scores == pytest.approx(want.scores, abs=TOL)
    assert got.forward.logprobs == pytest.approx(want.forward.logprobs, abs=TOL)
    items = [
        ("Canberra is the capital of Australia.", "Canberra was chosen in 1908.", "SUPPORTS"),
        ("Sydney is the capital of Australia.", "Canberra is the capital.", "REFUTES"),
    ]
    for a, b in zip(
        RemoteACUScorer(service, token=TOKEN).score_batch(items), ACUScorer(local.target).score_batch(items)
    ):
        assert a.raised == b.raised and a.acu == pytest.approx(b.acu, abs=TOL)
        assert a.p_with == pytest.approx(b.p_with, abs=TOL)


def test_seper_equals_in_process(service, nli_dir, local):
    from grogu.metrics.seper import NLIEntailment, SePerScorer

    remote = RemoteSePerScorer(service, token=TOKEN, n_samples=4, max_new_tokens=N)
    reference = SePerScorer(local.target, entailment=NLIEntailment(nli_dir), n_samples=4, max_new_tokens=N)
    for a, b in zip(remote.score(QUERY, DOCS[:2], ["Canberra"]), reference.score(QUERY, DOCS[:2], ["Canberra"])):
        assert a.samples_with == b.samples_with and a.samples_without == b.samples_without
        assert a.delta_soft == pytest.approx(b.delta_soft, abs=TOL) and a.delta_hard == pytest.approx(
            b.delta_hard, abs=TOL
        )
    a = remote.score_context(QUERY, DOCS[:2], "Canberra")
    b = reference.score_context(QUERY, DOCS[:2], ["Canberra"])
    assert a.samples_with == b.samples_with and a.p_soft_with == pytest.approx(b.p_soft_with, abs=TOL)


# ---------------------------------------------------------------------------------------------- bad requests
def test_bad_requests_get_status_and_message(service, remote, local):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"query": QUERY, "documents": ["a document"], "max_new_tokens": N}

    def post(path, json=None, headers=auth, **kw):
        return httpx.post(f"{service}{path}", json=json, headers=headers, timeout=60, **kw)

    r = post("/score", body, headers={})
    assert r.status_code == 401 and "bearer token" in r.json()["detail"]
    assert r.headers["www-authenticate"] == "Bearer"
    assert post("/score", body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    with pytest.raises(ServiceAuthError, match="bearer token"):
        RemoteScorer(service, token="wrong").score(QUERY, ["x"])
    assert httpx.get(f"{service}/health").json() == {"status": "ok"}  # liveness needs no token

    r = post("/score", {**body, "documents": ["d"] * 13})
    assert r.status_code == 413 and "13 documents" in r.json()["detail"] and "--max-docs" in r.json()["detail"]
    r = post("/score", {**body, "documents": ["x" * 401]})
    assert r.status_code == 413 and "401 characters" in r.json()["detail"]
    with pytest.raises(ServiceValueError, match="at most 400"):
        remote.score(QUERY, ["y" * 500])

    r = post("/score", {**body, "query": 5})
    assert r.status_code == 422 and "query" in r.json()["detail"]
    r = post("/score", {**body, "max_new_tokens": "many"})
    assert r.status_code == 422 and "max_new_tokens" in r.json()["detail"]
    r = post("/score", {**body, "metirc": "ppl"})  # a misspelt setting is not ignored
    assert r.status_code == 422 and "metirc" in r.json()["detail"]
    r = post("/score", {**body, "metric": "nope"})  # grogu's own checks, their own message
    assert r.status_code == 422 and "nope" in r.json()["detail"] and r.json()["error"] == "ValueError"
    r = post("/score", {**body, "query": "   "})
    assert r.status_code == 422 and "query is empty" in r.json()["detail"]
    r = post("/score", content=b'{"query": "x", "documents": [', headers={**auth, "content-type": "application/json"})
    assert r.status_code == 400 and "malformed JSON" in r.json()["detail"]
    r = post("/rerank", {**body, "mode": "context", "threshold": 1.0})
    assert r.status_code == 422 and "threshold" in r.json()["detail"]
    r = post("/seper", {"query": QUERY, "documents": ["d"], "references": [""]})
    assert r.status_code == 422 and "reference answer 0 is empty" in r.json()["detail"]
    with pytest.raises(ValueError, match="mode must be one of"):  # checked here, before any request
        remote.rerank(QUERY, ["d"], mode="bogus")
    with pytest.raises(TypeError):
        remote.score(QUERY, [3])
    r = post("/acu", {"items": [{"claim": "c", "evidence": "e", "stance": 5}]})
    assert r.status_code == 422 and "stance" in r.json()["detail"]
    r = post("/acu", {"items": [{"claim": "c", "evidence": "e", "stance": "maybe"}]})
    assert r.status_code == 422 and "unknown stance" in r.json()["detail"]

    # the replica is still serving, with the in-process answer and score
    [got], [want] = remote.score(QUERY, DOCS[:1]), local.score(QUERY, DOCS[:1])
    assert got.answer == want.answer and got.score == pytest.approx(want.score, abs=TOL)
    assert remote.health()


def test_client_retries_then_fails_clearly():
    scorer = RemoteScorer(f"http://127.0.0.1:{_free_port()}", retries=2, backoff=0.01, timeout=2)
    with pytest.raises(ServiceUnavailable, match="unreachable after 3 attempts"):
        scorer.score(QUERY, ["d"])
    assert scorer.transport.retried == 2
    with pytest.raises(ValueError, match="http"):
        RemoteScorer("localhost:8000")


def test_cpu_linear_reaches_the_replicas_engine(model_dir):
    """``grogu serve --cpu-linear default`` (ServeConfig.cpu_linear): the replica's engine runs PyTorch's own
    linear kernels, which keep a long-running replica's memory flat (docs/benchmarks.md)."""
    import dataclasses

    from grogu.apps.cli.arguments import build_parser
    from grogu.apps.serve.cli import config_kwargs
    from grogu.apps.serve.config import ServeConfig
    from grogu.apps.serve.replica_work import ReplicaWork

    kwargs = config_kwargs(build_parser().parse_args(["serve", "--cpu-linear", "default"]))
    assert kwargs["cpu_linear"] == "default" and ServeConfig().cpu_linear == "auto"
    work = ReplicaWork(dataclasses.asdict(ServeConfig(model=model_dir, device="cpu", cpu_linear="default")))
    assert work.engine.config.cpu_linear == "default"


def test_a_metric_not_given_keeps_the_scorers_own():
    """The integrations pass metric=None when the user named none: a RemoteScorer given as the model keeps
    its own metric then (no request is made: the service is not running)."""
    scorer = RemoteScorer(f"http://127.0.0.1:{_free_port()}", retries=0, metric="ppl")
    assert scorer.with_settings(metric=None, alpha=0.1).metric == "ppl"
    assert scorer.with_settings(metric="entropy").metric == "entropy"
    assert RemoteScorer(scorer.url).metric == grogu.DEFAULT_METRIC
    pytest.importorskip("langchain_grogu")
    from langchain_grogu import GroguCompressor

    assert GroguCompressor(model=scorer).metric == "ppl"
    assert GroguCompressor(model=scorer, metric="key_ppl").metric == "key_ppl"


# ---------------------------------------------------------------------------------------------- frameworks
def test_llamaindex_query_engine_with_the_service(service, model_dir, local):
    pytest.importorskip("llama_index.postprocessor.grogu")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.instrumentation import get_dispatcher
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.schema import MetadataMode
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.grogu import GroguInfluenceHandler, GroguRerank

    from grogu.runtime.models import embedded_embedder_path

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llm = HuggingFaceLLM(
            model=local.target.model,
            tokenizer=local.target.tokenizer,
            model_name="tiny",
            max_new_tokens=N,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
        )
    texts = [d if isinstance(d, str) else d["text"] if isinstance(d, dict) else d.text for d in DOCS]
    index = VectorStoreIndex.from_documents(
        [Document(text=t, metadata={"n": i}) for i, t in enumerate(texts)],
        embed_model=HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu"),
    )
    rerank = GroguRerank(top_n=2, model=RemoteScorer(service, token=TOKEN), max_new_tokens=N, mode="document")
    handler = GroguInfluenceHandler(model=RemoteInfluenceScorer(service, token=TOKEN, max_new_tokens=N), sinks=[[]])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        engine = RetrieverQueryEngine.from_args(
            index.as_retriever(similarity_top_k=4), llm=llm, node_postprocessors=[rerank]
        )
        response = engine.query(QUERY)
    finally:
        root.event_handlers.remove(handler)
    retrieved = index.as_retriever(similarity_top_k=4).retrieve(QUERY)
    node_texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in retrieved]
    want = local.rerank(QUERY, node_texts, top_n=2, mode="document")
    got = response.source_nodes
    assert [n.node.node_id for n in got] == [retrieved[r.index].node.node_id for r in want]
    assert [n.score for n in got] == pytest.approx([r.score for r in want], abs=TOL)
    # the service names its model without its filesystem path
    assert rerank.model == str(model_dir).rstrip("/").rsplit("/", 1)[-1]
    assert got[0].node.metadata["grogu"]["answer"] == want[0].answer
    [record] = handler.records
    expected = InfluenceScorer(local.target, max_new_tokens=N).score(
        QUERY, [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in got], answer=str(response)
    )
    assert [row["influence"] for row in record["documents"]] == pytest.approx(expected.scores, abs=TOL)
    assert [row["id"] for row in record["documents"]] == [n.node.node_id for n in got]


def test_langchain_chain_with_the_service(service, local, monkeypatch):
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_grogu import METADATA_KEY, GroguRetriever, InfluenceCallbackHandler
    from langchain_huggingface import HuggingFaceEmbeddings, HuggingFacePipeline
    from transformers import pipeline

    from grogu.runtime.models import embedded_embedder_path

    texts = [d if isinstance(d, str) else d["text"] if isinstance(d, dict) else d.text for d in DOCS]
    docs = [Document(t, id=f"d{i}", metadata={"rank": i, "secret": "stays here"}) for i, t in enumerate(texts)]
    store = InMemoryVectorStore.from_documents(docs, HuggingFaceEmbeddings(model_name=embedded_embedder_path()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = pipeline(
            "text-generation",
            model=local.target.model,
            tokenizer=local.target.tokenizer,
            max_new_tokens=N,
            do_sample=False,
            return_full_text=False,
        )
    llm = HuggingFacePipeline(pipeline=pipe)
    base = store.as_retriever(search_kwargs={"k": 4})
    monkeypatch.setenv("GROGU_SERVE_TOKEN", TOKEN)  # a bare URL takes the token from the environment
    retriever = GroguRetriever(base_retriever=base, model=f"{service}/", top_n=2, max_new_tokens=N, mode="document")
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")
    chain = (
        {"context": retriever | (lambda ds: "\n\n".join(d.page_content for d in ds)), "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )
    records: list = []
    handler = InfluenceCallbackHandler(model=service, sinks=[records], max_new_tokens=N)
    answer = chain.invoke(QUERY, config={"callbacks": [handler]})
    kept = retriever.invoke(QUERY)
    base_docs = base.invoke(QUERY)
    want = local.rerank(QUERY, [d.page_content for d in base_docs], top_n=2, mode="document")
    assert [d.id for d in kept] == [base_docs[r.index].id for r in want]
    assert [d.metadata[METADATA_KEY]["score"] for d in kept] == pytest.approx([r.score for r in want], abs=TOL)
    assert all(d.metadata["secret"] == "stays here" for d in kept)
    [record] = records
    expected = InfluenceScorer(local.target, max_new_tokens=N).score(
        QUERY, [d.page_content for d in kept], answer=answer
    )
    assert record["answer"] == answer and record["influence"] == pytest.approx(expected.scores, abs=TOL)


# ---------------------------------------------------------------------------------------------- Ray Data
def _records(path):
    with open(path, encoding="utf-8") as f:
        return [__import__("json").loads(line) for line in f]


def _same_records(got, want):
    """Same queries, order, documents, answers and counts; floats within float32 rounding (the actor's
    engine may pick other CPU kernels than this process's)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["query"] == w["query"] and len(g["results"]) == len(w["results"])
        for a, b in zip(g["results"], w["results"]):
            assert {k: v for k, v in a.items() if k not in ("score", "confidence", "variants")} == {
                k: v for k, v in b.items() if k not in ("score", "confidence", "variants")
            }
            assert a["score"] == pytest.approx(b["score"], rel=1e-5, abs=1e-5)
            assert a["variants"] == pytest.approx(b["variants"], rel=1e-5, abs=1e-5)  # PPLs: relative


@pytest.mark.heavy
def test_ray_data_scoring_equals_sequential_and_resumes(service, model_dir, tmp_path):
    import json

    from grogu.apps.cli import main

    words = ["river", "castle", "engine", "harbour", "violin", "desert", "comet", "garden"]
    queries = tmp_path / "queries.jsonl"
    with open(queries, "w") as f:
        for i in range(240):
            a, b = words[i % 8], words[(i * 3 + 1) % 8]
            f.write(
                json.dumps(
                    {
                        "query": f"Where is the {a} number {i}?",
                        "documents": [f"The {a} is near the {b}.", {"text": f"{i} {b}s", "title": a}],
                    }
                )
                + "\n"
            )
    common = ["score", "--queries", str(queries), "--model", model_dir, "--device", "cpu", "--max-new-tokens", "4"]
    assert main([*common, "--out", str(tmp_path / "seq.jsonl")]) == 0
    assert main([*common, "--out", str(tmp_path / "ray.jsonl"), "--ray", "--workers", "1"]) == 0
    want = _records(tmp_path / "seq.jsonl")
    assert len(want) == 240 and want[7]["query"] == "Where is the garden number 7?"
    _same_records(_records(tmp_path / "ray.jsonl"), want)

    # a crash after 100 records and half of the next: the rerun keeps them and writes the rest
    lines = (tmp_path / "seq.jsonl").read_text().splitlines(keepends=True)
    (tmp_path / "resumed.jsonl").write_text("".join(lines[:100]) + lines[100][:40])
    assert main([*common, "--out", str(tmp_path / "resumed.jsonl"), "--ray", "--workers", "1"]) == 0
    resumed = (tmp_path / "resumed.jsonl").read_text().splitlines(keepends=True)
    assert resumed[:100] == lines[:100]
    _same_records(_records(tmp_path / "resumed.jsonl"), want)
    (tmp_path / "other.jsonl").write_text(lines[0].replace("number 0", "number X"))
    with pytest.raises(SystemExit, match="another input"):  # the output of other queries is not continued
        main([*common, "--out", str(tmp_path / "other.jsonl"), "--ray"])


def test_which_answers_are_retried():
    from grogu.rerank.remote.transport import _retriable

    assert _retriable(httpx.Response(503)) and _retriable(httpx.Response(502))
    assert _retriable(httpx.Response(500, text="Internal Server Error"))  # the proxy: replica lost mid-request
    assert not _retriable(httpx.Response(500, json={"detail": "engine failed", "error": "RuntimeError"}))
    assert not _retriable(httpx.Response(422, json={"detail": "query is empty", "error": "ValueError"}))


# ---------------------------------------------------------------------------------------------- safe by default
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _post(service, path, json=None, **kw):
    return httpx.post(f"{service}{path}", json=json, headers={**AUTH, **kw.pop("headers", {})}, timeout=60, **kw)


def test_bad_templates_and_prompts_are_422_here_and_in_the_client(service, local):
    body = {"query": QUERY, "documents": ["a document"], "max_new_tokens": N}
    for template, message in [
        (
            {"grounded": "{nope} {context}"},
            "template.grounded has the placeholder {nope}; it may hold only {query}, {context}",
        ),
        ({"document": "{0}"}, "template.document has the placeholder {0}"),
        ({"ungrounded": "{query.__class__}"}, "template.ungrounded has the placeholder {query.__class__}"),
        ({"grounded": "{query:>100000000} {context}"}, "takes no conversion or format spec (got {query:>100000000})"),
        ({"titled_document": "{title"}, "template.titled_document is not a valid format string"),
    ]:
        r = _post(service, "/score", {**body, "template": template})
        assert r.status_code == 422 and message in r.json()["detail"] and r.json()["error"] == "ValueError", r.text
    r = _post(
        service,
        "/influence",
        {
            "items": [{"query": QUERY, "documents": ["d"]}],
            "max_new_tokens": N,
            "template": {"grounded": "{nope} {context}"},
        },
    )
    assert r.status_code == 422 and "{nope}" in r.json()["detail"]
    r = _post(
        service,
        "/acu",
        {"items": [{"claim": "c", "evidence": "e", "stance": "SUPPORTS"}], "prompt_with": "{claim} {secret}"},
    )
    assert r.status_code == 422 and "prompt_with has the placeholder {secret}" in r.json()["detail"]
    # the client refuses the same templates before any request
    with pytest.raises(ValueError, match=r"template.grounded has the placeholder \{nope\}"):
        RemoteScorer(service, token=TOKEN, template=grogu.PromptTemplate(grounded="{nope} {context}"))
    with pytest.raises(ValueError, match="format spec"):
        RemoteInfluenceScorer(service, token=TOKEN, template=grogu.PromptTemplate(ungrounded="{query!r}"))
    with pytest.raises(ValueError, match="prompt_without has the placeholder"):
        RemoteACUScorer(service, token=TOKEN, prompt_without="{evidence}")
    # a literal brace, doubled, is text; the service scores with that template as in-process
    template = grogu.PromptTemplate(grounded="{{Context}}: {context}\n\nQuestion: {query}")
    got = RemoteScorer(service, token=TOKEN, max_new_tokens=N, template=template).score(QUERY, DOCS[:1])
    want = grogu.UtilityScorer(local.target, max_new_tokens=N, template=template).score(QUERY, DOCS[:1])
    same(got[0], want[0])
    # settings are checked while the request is parsed, with grogu's own messages
    for setting, message in [
        ({"alpha": -1.0}, "alpha must be >= 0"),
        ({"top_k_frac": 0}, "top_k_frac must be in (0, 1]"),
        ({"copy_ngram": 0}, "copy_ngram must be a positive int, got 0"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive int, got 0"),
    ]:
        r = _post(service, "/score", {**body, **setting})
        assert r.status_code == 422 and message in r.json()["detail"], r.text
    r = _post(service, "/rerank", {**body, "swaps": -1})
    assert r.status_code == 422 and "swaps must be an int >= 0" in r.json()["detail"]
    r = _post(service, "/influence", {"items": [{"query": QUERY, "documents": ["d"]}], "method": "guess"})
    assert r.status_code == 422 and "method must be one of" in r.json()["detail"]
    r = _post(service, "/seper", {"query": QUERY, "documents": ["d"], "references": ["x"], "n_samples": 0})
    assert r.status_code == 422 and "n_samples must be a positive int" in r.json()["detail"]


def test_every_limit_is_a_413_naming_its_option(service, remote):
    body = {"query": QUERY, "documents": ["a document"], "max_new_tokens": N}
    cases = [
        ("/score", {**body, "query": "q" * 201}, "query 0 has 201 characters", "--max-query-chars"),
        (
            "/score_batch",
            {
                "items": [{"query": "ok", "documents": ["d"]}, {"query": "q" * 250, "documents": ["d"]}],
                "max_new_tokens": N,
            },
            "query 1 has 250 characters",
            "--max-query-chars",
        ),
        ("/score", {**body, "template": {"system": "s" * 700}}, "the template has", "--max-template-chars"),
        (
            "/acu",
            {"items": [{"claim": "c", "evidence": "e", "stance": "SUPPORTS"}], "prompt_with": "{claim}" + "p" * 600},
            "the prompt_with has 607 characters",
            "--max-template-chars",
        ),
        (
            "/score",
            {**body, "documents": ["w" * 350] * 10},
            "characters in all; this service takes at most 3000",
            "--max-request-chars",
        ),
        ("/score", {**body, "max_new_tokens": 101}, "max_new_tokens is 101", "--max-new-tokens"),
        (
            "/influence",
            {"items": [{"query": QUERY, "documents": ["d"]}], "max_new_tokens": 500},
            "max_new_tokens is 500",
            "--max-new-tokens",
        ),
        (
            "/seper",
            {"query": QUERY, "documents": ["d"], "references": ["x"], "max_new_tokens": 101},
            "max_new_tokens is 101",
            "--max-new-tokens",
        ),
        (
            "/rerank",
            {**body, "documents": [f"doc {i}" for i in range(12)], "mode": "context", "family": "orders", "top_n": 10},
            "3 candidate contexts holding 30 documents",
            "--max-rerank-contexts",
        ),
        ("/score", {**body, "documents": ["d"] * 13}, "13 documents", "--max-docs"),
        ("/score", {**body, "documents": ["x" * 401]}, "401 characters", "--max-doc-chars"),
    ]
    for path, payload, message, option in cases:
        r = _post(service, path, payload)
        assert r.status_code == 413, (path, r.text)
        assert message in r.json()["detail"] and option in r.json()["detail"] and r.json()["error"] == "LimitError"
    # under each limit, the same routes work
    assert (
        _post(
            service, "/rerank", {**body, "documents": [f"doc {i}" for i in range(12)], "mode": "document"}
        ).status_code
        == 200
    )
    with pytest.raises(ServiceValueError, match="--max-new-tokens"):
        RemoteScorer(service, token=TOKEN, max_new_tokens=101).score(QUERY, ["d"])
    info = remote.info()
    assert info["limits"] == LIMITS and info["batching"]["max_batch_tokens"] == MAX_BATCH_TOKENS


def _raw(service, data: bytes, *, pause: float = 0.0, chunks: list | None = None, wait: float = 30.0) -> bytes:
    """Send raw bytes to the service (then each of ``chunks``, ``pause`` seconds apart, until the
    server answers or closes); returns what it answered before closing."""
    import select

    host, port = service.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as sock:
        sock.sendall(data)
        received = b""
        for chunk in chunks or []:
            if select.select([sock], [], [], pause)[0]:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                break
        deadline = __import__("time").monotonic() + wait
        while __import__("time").monotonic() < deadline:
            if not select.select([sock], [], [], 0.5)[0]:
                continue
            try:
                part = sock.recv(65536)
            except OSError:
                break
            if not part:
                break
            received += part
            if b"\r\n\r\n" in received and b'"}' in received:
                break
        return received


def _status_and_json(raw: bytes):
    import json

    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body[body.index(b"{") : body.rindex(b"}") + 1])


def test_request_bodies_are_bounded_before_they_are_parsed(service):
    limit = LIMITS["max_body_bytes"]
    big = b'{"query": "q", "documents": ["' + b"x" * limit + b'"]}'
    r = _post(service, "/score", content=big, headers={"content-type": "application/json"})
    assert (
        r.status_code == 413
        and f"takes at most {limit}" in r.json()["detail"]
        and "--max-body-bytes" in r.json()["detail"]
    )
    # a declared 50 MB body is refused at once, from its Content-Length, without its bytes being sent
    t0 = __import__("time").perf_counter()
    raw = _raw(
        service,
        b"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{",
    )
    status, data = _status_and_json(raw)
    assert status == 413 and "50000000 bytes" in data["detail"] and __import__("time").perf_counter() - t0 < 5
    # a streamed body (no Content-Length) is counted as it arrives: 413 once it passes the limit
    head = (
        b"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    piece = b"x" * 16_000
    chunk = hex(len(piece))[2:].encode() + b"\r\n" + piece + b"\r\n"
    status, data = _status_and_json(_raw(service, head, chunks=[chunk] * 40, pause=0.05))
    assert status == 413 and f"more than {limit} bytes" in data["detail"] and data["error"] == "LimitError"
    # a body that trickles in is cut off after body_timeout_s: 408
    t0 = __import__("time").perf_counter()
    raw = _raw(
        service,
        b"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + TOKEN.encode()
        + b'\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"q',
        chunks=[b" "] * 20,
        pause=0.5,
    )
    status, data = _status_and_json(raw)
    elapsed = __import__("time").perf_counter() - t0
    assert status == 408 and "did not arrive within 2 s" in data["detail"] and "--body-timeout-s" in data["detail"]
    assert LIMITS["body_timeout_s"] <= elapsed < LIMITS["body_timeout_s"] + 4
    # headers sent a byte at a time: the connection is closed after the header timeout
    t0 = __import__("time").perf_counter()
    raw = _raw(service, b"GET /health HTTP/1.1\r\nHo", chunks=[b"s"] * 30, pause=0.3)
    elapsed = __import__("time").perf_counter() - t0
    assert raw == b"" and HEADER_TIMEOUT_S <= elapsed < HEADER_TIMEOUT_S + 3


def test_open_routes_show_no_paths_pids_or_redirects(service, model_dir):
    info = httpx.get(f"{service}/info", headers=AUTH).json()
    import json

    text = json.dumps(info)
    assert str(model_dir) not in text and info["model"] == model_dir.rstrip("/").rsplit("/", 1)[-1]
    assert info["nli"] and "/" not in info["nli"]
    stats = httpx.get(f"{service}/stats", headers=AUTH).json()
    assert "batch_sizes" in stats and stats["pid"] > 0  # this test service runs with stats_pids=True
    # a trailing slash is served as is, whatever the Host header says: no redirect anywhere
    r = httpx.get(f"{service}/health/", headers={"Host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 200 and r.json() == {"status": "ok"} and "location" not in r.headers
    r = httpx.get(f"{service}/info/", headers={**AUTH, "Host": "evil.example"}, follow_redirects=False)
    assert r.status_code == 200 and r.json()["model"] == info["model"]
    # unknown routes and methods: JSON errors too
    r = httpx.get(f"{service}/nowhere", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"] == "NotFound"
    r = httpx.get(f"{service}/score", headers=AUTH)
    assert r.status_code == 405 and r.json()["error"] == "MethodNotAllowed"
    # a client cannot lift Ray's request timeout with Ray's own header (it is dropped by the proxy)
    r = _post(
        service,
        "/score",
        {"query": QUERY, "documents": ["d"], "max_new_tokens": N},
        headers={"x-request-timeout-seconds": "0"},
    )
    assert r.status_code == 200


def test_serve_refuses_an_empty_token_and_open_hosts_without_one(monkeypatch, capsys):
    from grogu.apps.cli import main
    from grogu.apps.serve.cli import resolve_token

    monkeypatch.delenv("GROGU_SERVE_TOKEN", raising=False)
    with pytest.raises(SystemExit, match=r"the token given by --token is empty"):
        main(["serve", "--token", ""])
    monkeypatch.setenv("GROGU_SERVE_TOKEN", "  ")
    with pytest.raises(SystemExit, match=r"the token given by GROGU_SERVE_TOKEN is empty"):
        main(["serve"])
    monkeypatch.setenv("GROGU_SERVE_TOKEN", "from-env")
    with pytest.raises(SystemExit, match=r"--token is empty"):  # an empty --token does not switch off the env's
        main(["serve", "--token", ""])
    monkeypatch.delenv("GROGU_SERVE_TOKEN")
    with pytest.raises(SystemExit, match=r"refusing to listen on 0.0.0.0 without a token.*--no-auth"):
        main(["serve", "--host", "0.0.0.0"])
    import argparse

    from grogu.apps.serve.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert resolve_token(p.parse_args([])) is None  # loopback, no token: allowed (this machine only)
    assert resolve_token(p.parse_args(["--host", "0.0.0.0", "--token", "s3cret"])) == "s3cret"
    capsys.readouterr()
    assert resolve_token(p.parse_args(["--host", "0.0.0.0", "--no-auth"])) is None
    assert "warning: --no-auth: no bearer token is checked" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="contradict"):
        resolve_token(p.parse_args(["--no-auth", "--token", "x"]))


def _timed_post(service, path, payload, **kw):
    import json
    import time

    t0 = time.perf_counter()  # ASCII JSON: a lone surrogate travels as its \\u escape, as a client's JSON would send it
    r = _post(service, path, content=json.dumps(payload).encode(), headers={"content-type": "application/json"}, **kw)
    return r, time.perf_counter() - t0


#: how long a request that used to stall may take: a stall computed for minutes; a busy machine (one
#: other CPU-bound process on 2 cores) made a light request take just over 2 s
STALL_S = 10.0


def test_requests_that_used_to_stall_are_answered_at_once(service, remote, local):
    """Each request of issue #37 gets its status within :data:`STALL_S`, and a light /score right after it too."""
    body = {"query": QUERY, "documents": ["a document"], "max_new_tokens": N}
    docs12 = [f"Passage {i} about cities." for i in range(12)]
    cases = [
        ("/score_batch", {"items": [], "max_new_tokens": 4}, 200, None),
        ("/score_contexts_batch", {"items": [], "max_new_tokens": 4}, 200, None),
        ("/score", {**body, "documents": []}, 200, None),
        ("/acu", {"items": []}, 200, None),
        ("/seper", {"query": QUERY, "documents": [], "references": ["x"]}, 200, None),
        (
            "/seper",
            {"query": QUERY, "documents": ["d"], "references": ["x"], "n_samples": 100_000},
            413,
            "n_samples is 100000; this service takes at most 10 samples per prompt (grogu serve --max-samples)",
        ),
        (
            "/influence",
            {"items": [{"query": QUERY, "documents": ["a", "b"]}], "method": "contextcite", "n_ablations": 100_000},
            413,
            "n_ablations is 100000; this service takes at most 40",
        ),
        (
            "/influence",
            {
                "items": [{"query": QUERY, "documents": ["a", "b"]}],
                "method": "ablation",
                "n_ablations": 40,
                "max_new_tokens": 100,
            },
            413,
            "--max-request-tokens",
        ),
        (
            "/rerank",
            {**body, "documents": docs12, "mode": "context", "family": "all", "top_n": 6},
            413,
            "924 candidate contexts holding 5544 documents",
        ),
        ("/acu", {"items": [{"claim": "c", "evidence": "e", "stance": "SUPPORTS"}] * 21}, 413, "--max-acu-items"),
        (
            "/score",
            {
                **body,
                "documents": ["0123456789 " * 35],
                "max_new_tokens": 100,
                "template": {"grounded": "{context} {query}", "document": "{text}" * 70},
            },
            422,
            "once the template is filled",
        ),
        (
            "/seper",
            {"query": QUERY, "documents": ["d"], "references": ["x"], "temperature": 1e-50},
            422,
            "temperature must be >= 0.001",
        ),
        (
            "/score",
            {**body, "documents": ["fine", "bad \ud800 text"]},
            422,
            "documents[1] is not valid UTF-8 text: a lone surrogate",
        ),
        ("/score", {**body, "query": "bad \udfff"}, 422, "query is not valid UTF-8"),
        ("/acu", {"items": [{"claim": "c", "evidence": "\ud801", "stance": "SUPPORTS"}]}, 422, "evidence is not valid"),
    ]
    for path, payload, status, message in cases:
        r, took = _timed_post(service, path, payload)
        assert r.status_code == status and took < STALL_S, (path, r.status_code, r.text[:300], took)
        if message:
            assert message in r.json()["detail"], (path, r.json())
        elif path != "/seper" or payload["documents"]:
            assert r.json()["results"] == [], (path, r.json())
        light, took = _timed_post(service, "/score", body)
        assert light.status_code == 200 and took < STALL_S, (path, took)
    stats = httpx.get(f"{service}/stats", headers=AUTH).json()
    assert stats["batches"] < 10_000  # no empty batches spun


def test_sliced_seper_and_acu_equal_in_process(service, nli_dir, local):
    """ΔSePer's samples are drawn in slices (8 rows per call here) and ACU items a slice per call, with
    the results of one in-process call."""
    from grogu.metrics.seper import NLIEntailment, SePerScorer

    docs = [DOCS[0], DOCS[0], DOCS[2]]  # two identical prompts: their samples still differ as in-process
    before = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"]
    remote = RemoteSePerScorer(service, token=TOKEN, n_samples=6, max_new_tokens=N)
    got = remote.score(QUERY, docs, ["Canberra"])
    calls = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"] - before
    want = SePerScorer(local.target, entailment=NLIEntailment(nli_dir), n_samples=6, max_new_tokens=N).score(
        QUERY, docs, ["Canberra"]
    )
    assert calls >= 24 // 8 + 4  # 24 samples in 3 slices, then 4 prompts' beliefs
    for a, b in zip(got, want):
        assert a.samples_with == b.samples_with and a.samples_without == b.samples_without
        assert a.delta_soft == pytest.approx(b.delta_soft, abs=TOL) and a.delta_hard == pytest.approx(
            b.delta_hard, abs=TOL
        )
    assert got[0].samples_with != got[1].samples_with
    items = [("Canberra is the capital.", DOCS[0], "SUPPORTS"), ("Sydney is the capital.", DOCS[0], "REFUTES")] * 3
    r = RemoteACUScorer(service, token=TOKEN).score_batch(items)
    for a, b in zip(r, ACUScorer(local.target).score_batch(items)):
        assert a.acu == pytest.approx(b.acu, abs=TOL)


def test_a_cancelled_request_stops_its_slices(service):
    """A client that gives up on a heavy request: its remaining slices are not run."""
    import time

    heavy = {
        "query": QUERY,
        "documents": [f"passage {i} on the history of Canberra" for i in range(12)],
        "max_new_tokens": 100,
    }
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{service}/score", json=heavy, headers=AUTH, timeout=0.6)
    time.sleep(1.0)
    first = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"]
    time.sleep(2.0)
    later = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"]
    assert later - first <= 1, (first, later)


def test_health_is_503_while_the_worker_is_stuck(model_dir):
    """The worker thread's heartbeat: one task running past health_stall_s makes the replica unready
    (its /health and Ray's check_health), and ready again once the task ends."""
    import threading
    import time

    from grogu.apps.serve.httpapi import StalledError
    from grogu.apps.serve.service import GroguService, ServeConfig
    from grogu.runtime import coalescer

    wrapper = getattr(GroguService, "func_or_class", GroguService)  # Ray's ingress wrapper around the class
    cls = next(c for c in wrapper.__mro__ if "check_health" in vars(c))
    replica = object.__new__(cls)
    cls.__init__(
        replica, __import__("dataclasses").asdict(ServeConfig(model=model_dir, device="cpu", health_stall_s=0.5))
    )
    assert asyncio.run(replica.health()) == {"status": "ok"}
    release = threading.Event()
    stuck = coalescer.submit(release.wait, 30)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            try:
                replica.check_health()
            except StalledError as exc:
                assert "grogu serve --health-stall-s" in str(exc) and "stuck" in str(exc)
                break
            time.sleep(0.1)
        else:
            pytest.fail("check_health stayed ready while the worker was stuck")
        assert time.monotonic() - t0 < 2.0
        with pytest.raises(StalledError):
            asyncio.run(replica.health())
    finally:
        release.set()
        stuck.result(timeout=10)
    assert coalescer.busy_for() == 0.0 and asyncio.run(replica.health()) == {"status": "ok"}


def test_serve_settings_file_reranks_the_compatible_routes(model_dir, local, tmp_path):
    """``grogu serve --settings FILE``: the replica reranks /v1/rerank and /v2/rerank requests with the
    file's settings and answer budget, as the library does with them; a setting the request's ``grogu``
    object names replaces the file's; ``grogu.tuned`` says what differs from the file's set-up. The
    replica's request handling is called directly (no Ray)."""
    import dataclasses

    from fastapi import Response

    from grogu.apps.cli.arguments import build_parser
    from grogu.apps.serve.cli import config_kwargs
    from grogu.apps.serve.service import GroguService, ServeConfig
    from grogu.rerank.remote.schema import CompatRerankRequest, CompatRerankResponse
    from grogu.rerank.tuned import TunedSettings, model_fingerprint, prompt_hash
    from grogu.runtime.models import public_model_name

    moving = grogu.ModeSettings(family="reversed", gate="always", rule="confidence", margin=0.0)
    path = tmp_path / "settings.json"
    fp = model_fingerprint(local.target)
    TunedSettings(moving, public_model_name(model_dir), prompt_hash(local.template), 2, N, "tuned", {}, fp).save(path)
    wrapper = getattr(GroguService, "func_or_class", GroguService)  # Ray's ingress wrapper around the class
    cls = next(c for c in wrapper.__mro__ if "_compat" in vars(c))

    def replica(args):
        config = ServeConfig(model=model_dir, **config_kwargs(build_parser().parse_args(["serve", *args])))
        out = object.__new__(cls)
        cls.__init__(out, dataclasses.asdict(config))
        return out

    tuned, plain = replica(["--device", "cpu", "--settings", str(path)]), replica(["--device", "cpu"])
    docs = [{"text": d.text, "title": d.title} if isinstance(d, grogu.Document) else d for d in DOCS]

    async def ask(service, version=2, **fields):
        body = CompatRerankRequest(query=QUERY, documents=docs, **fields)
        return CompatRerankResponse.model_validate(await service._compat(body, version, Response()))

    async def run():
        return (
            await ask(tuned, top_n=2),
            await ask(tuned, 1, top_n=2, grogu={"family": "keep"}),
            await ask(tuned, top_n=3, grogu={"max_new_tokens": 4}),
            await ask(plain, top_n=2, grogu={"max_new_tokens": N}),
        )

    with_file, own_family, other_set_up, without = asyncio.run(run())
    want = local.rerank(QUERY, DOCS, top_n=2, settings=moving)
    default = local.rerank(QUERY, DOCS, top_n=2)
    assert [r.index for r in want] == [1, 0] and [r.index for r in default] == [0, 2]  # the file changes the order
    assert [r.index for r in with_file.results] == [1, 0]
    assert with_file.grogu.answer == want[0].context.answer and with_file.grogu.gate.candidates == 2
    assert with_file.grogu.utility == pytest.approx([r.score for r in want], abs=TOL)
    assert with_file.grogu.tuned.decision == "tuned" and with_file.grogu.tuned.mismatches == []
    # the request's own family replaces the file's: the retriever's order, one context answered
    assert [r.index for r in own_family.results] == [0, 1] and own_family.grogu.gate.candidates == 1
    assert other_set_up.grogu.tuned.mismatches == [
        "top_n=3 (tuned with top_n=2)",
        f"max_new_tokens=4 (tuned with max_new_tokens={N})",
    ]
    # a service without a file: the shipped default, and no 'tuned' in the answer
    assert [r.index for r in without.results] == [0, 2] and without.grogu.tuned is None
    assert "tuned" not in without.grogu.model_dump(exclude_unset=True)
    # a bad file stops grogu serve before Ray starts, naming the option
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="grogu serve --settings: .*not a grogu tune settings file"):
        config_kwargs(build_parser().parse_args(["serve", "--settings", str(tmp_path / "bad.json")]))


def test_a_heavy_request_does_not_hold_small_ones_behind_it(service, remote, local):
    """A request of 12 contexts x 100 answer tokens is scored a slice (here one context) per engine
    call; small requests sent meanwhile are scored between its slices: each is answered before the heavy
    one ends (an order, not a time: it holds on a busy machine too)."""
    import threading
    import time

    heavy = RemoteScorer(service, token=TOKEN, max_new_tokens=100)
    docs = [f"Passage {i} about the capital of Australia and its history." for i in range(12)]
    before = httpx.get(f"{service}/stats", headers=AUTH).json()["batches"]
    out: dict = {}

    def run_heavy():
        t0 = time.perf_counter()
        out["heavy"] = heavy.score(QUERY, docs)
        out["heavy_end"] = time.perf_counter()
        out["heavy_s"] = out["heavy_end"] - t0

    thread = threading.Thread(target=run_heavy)
    thread.start()
    time.sleep(0.5)
    light_end = []
    for i in range(3):
        got = remote.score(f"{QUERY} ({i})", DOCS[:1])
        light_end.append(time.perf_counter())
        same(got[0], local.score(f"{QUERY} ({i})", DOCS[:1])[0])
    thread.join()
    assert len(out["heavy"]) == 12 and max(r.n_tokens for r in out["heavy"]) == 100
    for a, b in zip(out["heavy"][:2], grogu.UtilityScorer(local.target, max_new_tokens=100).score(QUERY, docs[:2])):
        same(a, b)  # slices of a request are scored as the whole request is in-process
    stats = httpx.get(f"{service}/stats", headers=AUTH).json()
    assert stats["batches"] - before >= 12 + 3  # the heavy request took at least 12 engine calls
    assert stats["max_call_tokens"] <= 100  # no call held more than one heavy slice
    assert max(light_end) < out["heavy_end"], ([t - out["heavy_end"] for t in light_end], out["heavy_s"])


def test_the_cohere_clients_rerank_through_the_service_as_in_process(service, model_dir, local):
    """The light twin of tests/test_serve_compat.py (heavy): the real Cohere SDK (v2 and v1) and
    langchain-cohere's ``CohereRerank``, unchanged, against ``/v2/rerank`` and ``/v1/rerank`` of this tiny
    model's service. Each gets the in-process rerank's documents, in order, with its scores in [0, 1].
    After the heavy-request test: these calls use the service's answer budget, and that test reads the
    largest engine call since the service started."""
    import os

    cohere = pytest.importorskip("cohere")
    pytest.importorskip("langchain_cohere")
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document

    from grogu.metrics.scales import probability

    name = os.path.basename(model_dir)  # the served model's name, as a client passes it
    texts = [d if isinstance(d, str) else d["text"] if isinstance(d, dict) else d.text for d in DOCS]
    want = grogu.UtilityScorer(local.target).rerank(QUERY, texts, top_n=2)  # the service's defaults
    scores = [probability(r.metric, r.score) for r in want]
    got = cohere.ClientV2(api_key=TOKEN, base_url=service).rerank(model=name, query=QUERY, documents=texts, top_n=2)
    assert [r.index for r in got.results] == [r.index for r in want]
    assert [r.relevance_score for r in got.results] == pytest.approx(scores, abs=TOL)
    assert all(0.0 <= r.relevance_score <= 1.0 for r in got.results)
    got = cohere.Client(api_key=TOKEN, base_url=service).rerank(model=name, query=QUERY, documents=texts, top_n=2)
    assert [r.document.text for r in got.results] == [texts[r.index] for r in want]
    with pytest.raises(cohere.errors.UnauthorizedError):
        cohere.ClientV2(api_key="wrong", base_url=service).rerank(model=name, query=QUERY, documents=texts)
    reranker = CohereRerank(base_url=service, cohere_api_key=TOKEN, model=name, top_n=2)
    docs = reranker.compress_documents([Document(page_content=t) for t in texts], QUERY)
    assert [d.page_content for d in docs] == [texts[r.index] for r in want]
    assert [d.metadata["relevance_score"] for d in docs] == pytest.approx(scores, abs=TOL)


@pytest.mark.parametrize("examples", [20, pytest.param(200, marks=pytest.mark.heavy)])
def test_every_route_fuzzed_from_its_schema_gets_no_server_error(service, remote, local, examples):
    """schemathesis reads the service's own OpenAPI schema and generates requests for every route, valid
    and not (grogu_research.fuzz). None may get a status of 500 or more, every 4xx has the documented body
    (``detail``, the same ``message``, ``error``), every 200 fits its documented answer (the wire schema),
    none takes over 2 minutes (the slowest took 3 s on a quiet 2-core CPU, 95 s beside a CPU-bound process
    and the rest of the suite), and the service still answers as in process afterwards. After the tests that read the service's statistics:
    these requests go up to its limits."""
    pytest.importorskip("schemathesis")
    from grogu_research.fuzz import fuzz_routes

    out = fuzz_routes(service, AUTH, examples, budget_s=120.0, derandomize=examples == 20)  # CI: the same requests
    assert not out.failures, (out.failures, out.misfits[:5])
    routes = {label.split()[1] for label in out.statuses}
    assert {"/rerank", "/v1/rerank", "/v2/rerank", "/score", "/seper", "/acu", "/influence"} <= routes
    assert out.count(200) >= 5 and out.requests >= 10 * examples  # some generated requests are valid and scored
    same(remote.score(QUERY, DOCS[:1])[0], local.score(QUERY, DOCS[:1])[0])  # the service is still right


@pytest.mark.heavy  # waits for Ray to replace a killed replica and reload its model
def test_health_answers_fast_while_the_replica_is_lost(service, remote):
    """Last: kills the replica. /health is 503 within a second until a new replica is up; a request in
    flight when it died gets a JSON 503 (which RemoteScorer retries)."""
    import os
    import signal
    import threading
    import time

    pid = httpx.get(f"{service}/stats", headers=AUTH).json()["pid"]
    heavy = {"query": QUERY, "documents": [f"passage {i}" for i in range(12)], "max_new_tokens": 100}
    answer: dict = {}
    thread = threading.Thread(target=lambda: answer.setdefault("r", _post(service, "/score", heavy)))
    thread.start()
    time.sleep(1.0)
    os.kill(pid, signal.SIGKILL)
    thread.join()
    r = answer["r"]
    assert r.status_code == 503 and r.json()["error"] == "ServiceUnavailable" and r.headers["retry-after"] == "1"
    seen, t_end = [], time.monotonic() + 90
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        h = httpx.get(f"{service}/health", timeout=10)
        seen.append((h.status_code, time.perf_counter() - t0))
        assert h.headers["content-type"].startswith("application/json")
        if h.status_code == 200:
            break
        assert h.status_code == 503 and h.json()["error"] == "ServiceUnavailable"
        time.sleep(0.2)
    assert seen[-1][0] == 200 and any(code == 503 for code, _ in seen)
    assert max(t for _, t in seen) < 1.5, seen
    assert remote.score(QUERY, DOCS[:1])[0].answer  # the new replica serves
