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

import grogu  # noqa: E402
from grogu import testing  # noqa: E402
from grogu.acu import ACUScorer  # noqa: E402
from grogu.influence import InfluenceScorer  # noqa: E402
from grogu.serve import (RemoteACUScorer, RemoteInfluenceScorer, RemoteScorer, RemoteSePerScorer,  # noqa: E402
                         ServiceAuthError, ServiceUnavailable, ServiceValueError)

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

    from grogu.models import embedded_embedder_path

    path = str(tmp_path_factory.mktemp("tiny-nli"))
    tok = AutoTokenizer.from_pretrained(embedded_embedder_path())
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, num_labels=3, id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                     label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    BertForSequenceClassification(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def service(model_dir, nli_dir):
    """One local Ray (2 CPUs) and one application of the tiny model, with a token and small limits."""
    import ray
    from ray import serve

    from grogu.serve.service import ServeConfig, build_app

    port = _free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        config = ServeConfig(model=model_dir, device="cpu", token=TOKEN, max_docs=12, max_doc_chars=400,
                             max_batch_size=8, batch_wait_s=0.05, nli=nli_dir)
        serve.run(build_app(config), name="tiny", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


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


@pytest.mark.parametrize("mode,kwargs", [
    ("context", {"top_n": 2}),
    ("document", {"top_n": 3, "threshold": -50.0}),
    ("fusion", {"top_n": 3, "relevance": [0.9, 0.8, 0.1, 0.5], "weight": 0.5}),
    ("prune", {}),
])
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
    reference = InfluenceScorer(local.engine, max_new_tokens=N)
    got, want = remote.score(QUERY, DOCS[:3]), reference.score(QUERY, DOCS[:3])
    assert got.answer == want.answer and got.single_answers == want.single_answers
    assert got.leave_one_out_answers == want.leave_one_out_answers
    assert got.scores == pytest.approx(want.scores, abs=TOL) and got.method == "exact"
    given = remote.score(QUERY, DOCS[:2], answer="Canberra")
    assert given.answer == "Canberra"
    assert given.scores == pytest.approx(reference.score(QUERY, DOCS[:2], answer="Canberra").scores, abs=TOL)
    forward = RemoteInfluenceScorer(service, token=TOKEN, max_new_tokens=N, method="leave_one_out_logprob")
    got = forward.score(QUERY, DOCS[:3], answer="Canberra")
    want = InfluenceScorer(local.engine, max_new_tokens=N, method="leave_one_out_logprob").score(
        QUERY, DOCS[:3], answer="Canberra")
    assert forward.forward_only and got.method == want.method and got.embedder is None
    assert got.scores == pytest.approx(want.scores, abs=TOL)
    assert got.forward.logprobs == pytest.approx(want.forward.logprobs, abs=TOL)
    items = [("Canberra is the capital of Australia.", "Canberra was chosen in 1908.", "SUPPORTS"),
             ("Sydney is the capital of Australia.", "Canberra is the capital.", "REFUTES")]
    for a, b in zip(RemoteACUScorer(service, token=TOKEN).score_batch(items), ACUScorer(local.engine).score_batch(items)):
        assert a.raised == b.raised and a.acu == pytest.approx(b.acu, abs=TOL)
        assert a.p_with == pytest.approx(b.p_with, abs=TOL)


def test_seper_equals_in_process(service, nli_dir, local):
    from grogu.seper import NLIEntailment, SePerScorer

    remote = RemoteSePerScorer(service, token=TOKEN, n_samples=4, max_new_tokens=N)
    reference = SePerScorer(local.engine, entailment=NLIEntailment(nli_dir), n_samples=4, max_new_tokens=N)
    for a, b in zip(remote.score(QUERY, DOCS[:2], ["Canberra"]), reference.score(QUERY, DOCS[:2], ["Canberra"])):
        assert a.samples_with == b.samples_with and a.samples_without == b.samples_without
        assert a.delta_soft == pytest.approx(b.delta_soft, abs=TOL) and a.delta_hard == pytest.approx(b.delta_hard, abs=TOL)
    a = remote.score_context(QUERY, DOCS[:2], "Canberra")
    b = reference.score_context(QUERY, DOCS[:2], ["Canberra"])
    assert a.samples_with == b.samples_with and a.p_soft_with == pytest.approx(b.p_soft_with, abs=TOL)


# ---------------------------------------------------------------------------------------------- bad requests
def test_bad_requests_get_status_and_message(service, remote):
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

    # the replica is still serving, with the same answers
    assert remote.score(QUERY, DOCS[:1])[0].answer == remote.score(QUERY, DOCS[:1])[0].answer
    assert remote.health()


def test_client_retries_then_fails_clearly():
    scorer = RemoteScorer(f"http://127.0.0.1:{_free_port()}", retries=2, backoff=0.01, timeout=2)
    with pytest.raises(ServiceUnavailable, match="unreachable after 3 attempts"):
        scorer.score(QUERY, ["d"])
    assert scorer.transport.retried == 2
    with pytest.raises(ValueError, match="http"):
        RemoteScorer("localhost:8000")


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

    from grogu.models import embedded_embedder_path

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llm = HuggingFaceLLM(model=local.engine.model, tokenizer=local.engine.tokenizer, model_name="tiny",
                             max_new_tokens=N, is_chat_model=True, generate_kwargs={"do_sample": False})
    texts = [d if isinstance(d, str) else d["text"] if isinstance(d, dict) else d.text for d in DOCS]
    index = VectorStoreIndex.from_documents([Document(text=t, metadata={"n": i}) for i, t in enumerate(texts)],
                                            embed_model=HuggingFaceEmbedding(model_name=embedded_embedder_path(),
                                                                             device="cpu"))
    rerank = GroguRerank(top_n=2, model=RemoteScorer(service, token=TOKEN), max_new_tokens=N, mode="document")
    handler = GroguInfluenceHandler(model=RemoteInfluenceScorer(service, token=TOKEN, max_new_tokens=N), sinks=[[]])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        engine = RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=4), llm=llm,
                                                node_postprocessors=[rerank])
        response = engine.query(QUERY)
    finally:
        root.event_handlers.remove(handler)
    retrieved = index.as_retriever(similarity_top_k=4).retrieve(QUERY)
    node_texts = [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in retrieved]
    want = local.rerank(QUERY, node_texts, top_n=2, mode="document")
    got = response.source_nodes
    assert [n.node.node_id for n in got] == [retrieved[r.index].node.node_id for r in want]
    assert [n.score for n in got] == pytest.approx([r.score for r in want], abs=TOL)
    assert rerank.model == str(model_dir) and got[0].node.metadata["grogu"]["answer"] == want[0].answer
    [record] = handler.records
    expected = InfluenceScorer(local.engine, max_new_tokens=N).score(
        QUERY, [n.node.get_content(metadata_mode=MetadataMode.LLM) for n in got], answer=str(response))
    assert [row["influence"] for row in record["documents"]] == pytest.approx(expected.scores, abs=TOL)
    assert [row["id"] for row in record["documents"]] == [n.node.node_id for n in got]


def test_langchain_chain_with_the_service(service, local, monkeypatch):
    pytest.importorskip("langchain_grogu")
    from langchain_core.documents import Document
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import PromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings, HuggingFacePipeline
    from transformers import pipeline

    from grogu.models import embedded_embedder_path
    from langchain_grogu import METADATA_KEY, GroguRetriever, InfluenceCallbackHandler

    texts = [d if isinstance(d, str) else d["text"] if isinstance(d, dict) else d.text for d in DOCS]
    docs = [Document(t, id=f"d{i}", metadata={"rank": i, "secret": "stays here"}) for i, t in enumerate(texts)]
    store = InMemoryVectorStore.from_documents(docs, HuggingFaceEmbeddings(model_name=embedded_embedder_path()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = pipeline("text-generation", model=local.engine.model, tokenizer=local.engine.tokenizer,
                        max_new_tokens=N, do_sample=False, return_full_text=False)
    llm = HuggingFacePipeline(pipeline=pipe)
    base = store.as_retriever(search_kwargs={"k": 4})
    monkeypatch.setenv("GROGU_SERVE_TOKEN", TOKEN)  # a bare URL takes the token from the environment
    retriever = GroguRetriever(base_retriever=base, model=f"{service}/", top_n=2, max_new_tokens=N, mode="document")
    prompt = PromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}\nAnswer:")
    chain = ({"context": retriever | (lambda ds: "\n\n".join(d.page_content for d in ds)),
              "question": RunnablePassthrough()} | prompt | llm | StrOutputParser())
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
    expected = InfluenceScorer(local.engine, max_new_tokens=N).score(QUERY, [d.page_content for d in kept],
                                                                     answer=answer)
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
            assert {k: v for k, v in a.items() if k not in ("score", "confidence", "variants")} == \
                   {k: v for k, v in b.items() if k not in ("score", "confidence", "variants")}
            assert a["score"] == pytest.approx(b["score"], rel=1e-5, abs=1e-5)
            assert a["variants"] == pytest.approx(b["variants"], rel=1e-5, abs=1e-5)  # PPLs: relative


def test_ray_data_scoring_equals_sequential_and_resumes(service, model_dir, tmp_path):
    import json

    from grogu.cli import main

    words = ["river", "castle", "engine", "harbour", "violin", "desert", "comet", "garden"]
    queries = tmp_path / "queries.jsonl"
    with open(queries, "w") as f:
        for i in range(240):
            a, b = words[i % 8], words[(i * 3 + 1) % 8]
            f.write(json.dumps({"query": f"Where is the {a} number {i}?",
                                "documents": [f"The {a} is near the {b}.", {"text": f"{i} {b}s", "title": a}]}) + "\n")
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
    from grogu.serve.transport import _retriable

    assert _retriable(httpx.Response(503)) and _retriable(httpx.Response(502))
    assert _retriable(httpx.Response(500, text="Internal Server Error"))  # the proxy: replica lost mid-request
    assert not _retriable(httpx.Response(500, json={"detail": "engine failed", "error": "RuntimeError"}))
    assert not _retriable(httpx.Response(422, json={"detail": "query is empty", "error": "ValueError"}))
