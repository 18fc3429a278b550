"""The rerank API existing clients speak (``/v1/rerank``, ``/v2/rerank`` on ``grogu serve``), called by
the real client packages, unchanged: the Cohere SDK (v1 and v2), langchain-cohere's ``CohereRerank`` in
a ``ContextualCompressionRetriever``, LlamaIndex's ``CohereRerank`` and ``JinaRerank`` in a query engine,
and ``rerankers``' ``APIRanker``. One local service of the embedded SmolLM2 with a token; each client
gets the order and scores of the same rerank in process. Nothing is mocked."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("ray.serve")
httpx = pytest.importorskip("httpx")

from grogu_research import testing  # noqa: E402

import grogu  # noqa: E402
from grogu.metrics.scales import probability  # noqa: E402
from grogu.runtime.models import DEFAULT_MODEL, embedded_embedder_path  # noqa: E402

# Ray Serve: not in the fast subset; one Ray cluster at a time, so on the xdist worker of test_serve.py
# heavy: a two-model service of its own (about 100 s to start on a 2-core CPU); run by hand with -m heavy
pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.xdist_group("ray")]

TOKEN = "compat-token"
NAME = "smollm2-135m-instruct"  # the served model's name: what a client passes as `model`
QUERY = "What is the capital city of Australia?"
DOCS = [
    "Sydney is the largest city in Australia and its most famous harbour.",
    "Canberra is the capital city of Australia, chosen in 1908 as a compromise between Sydney and Melbourne.",
    "Photosynthesis turns light into chemical energy in plants.",
    "Melbourne was the seat of the Australian government until 1927.",
    "Australia is a country of six states and two territories.",
]
TOL = 1e-3  # float32 on one CPU, another process and other batches: scores agree to this


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """Two models, as `grogu serve --model A --model B` serves them: the embedded SmolLM2 under
    /smollm2-135m-instruct and a tiny model under /tiny; the clients' rerank API at the root goes to
    the model the body names. Clients get the root URL."""
    from grogu.apps.serve.config import ServeConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a folder named "tiny": grogu serve names a model's route after its folder, as here
        tiny = testing.save_tiny_model(str(tmp_path_factory.mktemp("models") / "tiny"))
    configs = {
        NAME: ServeConfig(model=DEFAULT_MODEL, device="cpu", token=TOKEN, batch_wait_s=0.01),
        "tiny": ServeConfig(model=tiny, device="cpu", token=TOKEN, batch_wait_s=0.01),
    }
    with testing.local_service(configs) as url:
        yield url


@pytest.fixture(scope="module")
def local():
    return grogu.UtilityScorer(DEFAULT_MODEL, device="cpu")  # the service's defaults: what clients get


@pytest.fixture(scope="module")
def expected(local):
    """The in-process rerank of the documents, by top_n (computed once each)."""
    cache: dict = {}

    def rerank(docs, top_n):
        key = (tuple(docs), top_n)
        if key not in cache:
            cache[key] = local.rerank(QUERY, list(docs), top_n=top_n)
        return cache[key]

    return rerank


def _scores(ranked):
    return [probability(r.metric, r.score) for r in ranked]


# ------------------------------------------------------------------------------------------------ routes
def test_v2_equals_rerank_and_in_process(service, expected):
    """The compatible route runs /rerank's pipeline: the same documents, order, scores and gate verdict."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {"model": NAME, "query": QUERY, "documents": DOCS, "top_n": 3}
    v2 = httpx.post(f"{service}/v2/rerank", json=body, headers=auth, timeout=120)
    assert v2.status_code == 200, v2.text
    v2 = v2.json()
    own = httpx.post(f"{service}/{NAME}/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 3}, headers=auth)
    own = own.json()
    prefixed = httpx.post(f"{service}/{NAME}/v2/rerank", json=body, headers=auth, timeout=120).json()
    assert [r["index"] for r in prefixed["results"]] == [r["index"] for r in v2["results"]]
    want = expected(DOCS, 3)
    assert [r["index"] for r in v2["results"]] == [r["index"] for r in own["results"]] == [r.index for r in want]
    assert [r["relevance_score"] for r in v2["results"]] == pytest.approx(_scores(want), abs=TOL)
    assert all(0.0 <= r["relevance_score"] <= 1.0 for r in v2["results"])
    assert "document" not in v2["results"][0]  # v2: only when asked
    assert v2["grogu"]["gate"] == own["gate"]
    assert v2["grogu"]["gate"]["in_doubt"] == want[0].gate.in_doubt
    assert v2["grogu"]["answer"] == want[0].context.answer and v2["grogu"]["mode"] == "context"
    assert v2["grogu"]["utility"] == pytest.approx([r.score for r in want], abs=TOL)
    assert v2["model"] == NAME and v2["meta"]["api_version"] == {"version": "2"} and v2["id"]
    usage = v2["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] >= want[0].context.n_tokens
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_v1_objects_rank_fields_and_vendor_fields(service, expected):
    """v1 (Cohere, Jina): object documents returned whole by default, rank_fields, top_n 0 = all, and
    vendor fields grogu does not use accepted and named in a header."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    objects = [{"text": d, "source": f"s{i}"} for i, d in enumerate(DOCS[:3])]
    body = {"model": NAME, "query": QUERY, "documents": objects, "top_n": 0, "max_chunks_per_doc": 5, "priority": 1}
    body["\u001e\u00e9"] = True  # a field name no header may carry as it is (a control character, a non-ASCII letter)
    r = httpx.post(f"{service}/v1/rerank", json=body, headers=auth, timeout=120)
    assert r.status_code == 200, r.text
    assert r.headers["x-grogu-ignored-fields"] == "%1E%C3%A9, max_chunks_per_doc, priority"  # percent-encoded
    out = r.json()
    want = expected(DOCS[:3], None)
    assert [x["index"] for x in out["results"]] == [w.index for w in want] and len(want) == 3
    assert [x["document"] for x in out["results"]] == [objects[w.index] for w in want]
    assert out["grogu"]["ignored"] == ["\u001e\u00e9", "max_chunks_per_doc", "priority"]
    fields = [{"name": "Canberra", "body": DOCS[1]}, {"name": "Sydney", "body": DOCS[0]}]
    r = httpx.post(
        f"{service}/v1/rerank",
        json={"model": NAME, "query": QUERY, "documents": fields, "rank_fields": ["name", "body"]},
        headers=auth,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    texts = [f"name: {d['name']}\nbody: {d['body']}" for d in fields]
    assert [x["index"] for x in r.json()["results"]] == [w.index for w in expected(texts, None)]


def test_grogu_settings_in_their_own_object(service, local):
    """grogu's own settings (mode, answer length, ...) reach the pipeline through the `grogu` object."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {
        "model": NAME,
        "query": QUERY,
        "documents": DOCS,
        "top_n": 2,
        "grogu": {"mode": "document", "max_new_tokens": 8},
    }
    out = httpx.post(f"{service}/v2/rerank", json=body, headers=auth, timeout=120).json()
    want = grogu.UtilityScorer(local.target, max_new_tokens=8).rerank(QUERY, DOCS, top_n=2, mode="document")
    assert [r["index"] for r in out["results"]] == [r.index for r in want] and out["grogu"]["mode"] == "document"
    assert [r["relevance_score"] for r in out["results"]] == pytest.approx(_scores(want), abs=TOL)
    assert out["grogu"]["gate"] is None and out["grogu"]["answer"] is None


def test_bad_input_gets_the_clients_error_shape(service):
    auth = {"Authorization": f"Bearer {TOKEN}"}

    def post(path, json=None, headers=auth, **kw):
        r = httpx.post(f"{service}{path}", json=json, headers=headers, timeout=60, **kw)
        body = r.json()
        assert body["message"] == body["detail"] and body["message"], body  # Cohere's and Jina's keys
        return r.status_code, body["message"]

    ok = {"model": NAME, "query": QUERY, "documents": DOCS}
    for path in ("/v2/rerank", "/v1/rerank"):  # at the root: the proxy routes by model
        status, message = post(path, {**ok, "model": "rerank-english-v3.0"})
        assert status == 404 and "'rerank-english-v3.0' is not served here" in message
        assert NAME in message and "tiny" in message
        status, message = post(path, {"query": QUERY, "documents": DOCS})
        assert status == 404 and "None is not served here" in message
    status, message = post(f"/{NAME}/v2/rerank", {**ok, "model": "tiny"})  # a model's own prefix: its name only
    assert status == 404 and "'tiny' is not served here" in message and NAME in message
    one = {"query": QUERY, "documents": ["Canberra is the capital of Australia."]}
    r = httpx.post(f"{service}/{NAME}/v2/rerank", json=one, headers=auth, timeout=120)  # absent: the served one
    assert r.status_code == 200 and r.json()["model"] == NAME
    tiny = httpx.get(f"{service}/tiny/info", headers=auth).json()["model"]
    r = httpx.post(f"{service}/v2/rerank", json={**one, "model": "tiny"}, headers=auth, timeout=120)
    assert r.status_code == 200 and r.json()["model"] == tiny != NAME  # the root routed it to the tiny model
    for path in ("/v1/rerank", "/v2/rerank"):
        status, message = post(path, {**ok, "documents": []})
        assert status == 422 and "documents must not be empty" in message
    status, message = post("/v2/rerank", {**ok, "documents": ["x"] * 10_000})
    assert status == 413 and "--max-docs" in message
    status, message = post("/v2/rerank", ok, headers={})
    assert status == 401 and "bearer token" in message
    status, message = post("/v2/rerank", {**ok, "query": ""})
    assert status == 422 and "query" in message
    status, message = post("/v2/rerank", {**ok, "top_n": -1})
    assert status == 422 and "top_n" in message
    status, message = post("/v1/rerank", {**ok, "documents": [{"title": "no text"}]})
    assert status == 422 and "documents[0]" in message and "'text'" in message
    status, message = post("/v2/rerank", {**ok, "grogu": {"mode": "nonsense"}})
    assert status == 422 and "nonsense" in message
    status, message = post("/v2/rerank", {**ok, "grogu": {"top_n": 2}})
    assert status == 422 and "top level" in message
    big = b'{"query": "q", "documents": ["' + b"x" * (10 * 2**20) + b'"]}'
    status, message = post("/v2/rerank", None, content=big, headers={**auth, "Content-Type": "application/json"})
    assert status == 413 and "--max-body-bytes" in message
    bad = b'{"model": "smollm2-135m-instruct", "query": "caf\xe9", "documents": ["a"]}'
    status, message = post("/v2/rerank", None, content=bad, headers={**auth, "Content-Type": "application/json"})
    assert status == 400 and "malformed JSON" in message


# ----------------------------------------------------------------------------------------- the clients
def test_cohere_sdk_v2_and_v1(service, expected):
    cohere = pytest.importorskip("cohere")

    want = expected(DOCS, 3)
    got = cohere.ClientV2(api_key=TOKEN, base_url=service).rerank(model=NAME, query=QUERY, documents=DOCS, top_n=3)
    assert [r.index for r in got.results] == [r.index for r in want]
    assert [r.relevance_score for r in got.results] == pytest.approx(_scores(want), abs=TOL)
    got = cohere.Client(api_key=TOKEN, base_url=service).rerank(model=NAME, query=QUERY, documents=DOCS, top_n=3)
    assert [r.index for r in got.results] == [r.index for r in want]
    assert [r.document.text for r in got.results] == [DOCS[r.index] for r in want]
    with pytest.raises(cohere.errors.NotFoundError) as err:
        cohere.ClientV2(api_key=TOKEN, base_url=service).rerank(model="rerank-v3.5", query=QUERY, documents=DOCS)
    assert NAME in str(err.value.body)
    with pytest.raises(cohere.errors.UnauthorizedError):
        cohere.ClientV2(api_key="wrong", base_url=service).rerank(model=NAME, query=QUERY, documents=DOCS)


def test_langchain_cohere_rerank_in_a_compression_retriever(service, expected):
    pytest.importorskip("langchain_cohere")
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_cohere import CohereRerank
    from langchain_core.documents import Document
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings

    embeddings = HuggingFaceEmbeddings(model_name=embedded_embedder_path(), model_kwargs={"device": "cpu"})
    store = InMemoryVectorStore.from_documents([Document(page_content=d) for d in DOCS], embeddings)
    base = store.as_retriever(search_kwargs={"k": 5})
    retrieved = [d.page_content for d in base.invoke(QUERY)]
    reranker = CohereRerank(base_url=service, cohere_api_key=TOKEN, model=NAME, top_n=3)
    retriever = ContextualCompressionRetriever(base_compressor=reranker, base_retriever=base)
    got = retriever.invoke(QUERY)
    want = expected(retrieved, 3)
    assert [d.page_content for d in got] == [retrieved[r.index] for r in want]
    assert [d.metadata["relevance_score"] for d in got] == pytest.approx(_scores(want), abs=TOL)


def test_llamaindex_cohere_and_jina_rerank_in_a_query_engine(service, expected, local):
    pytest.importorskip("llama_index.postprocessor.cohere_rerank")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from llama_index.llms.huggingface import HuggingFaceLLM
    from llama_index.postprocessor.cohere_rerank import CohereRerank
    from llama_index.postprocessor.jinaai_rerank import JinaRerank

    embed = HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")
    index = VectorStoreIndex.from_documents([Document(text=d) for d in DOCS], embed_model=embed)
    retrieved = [n.node.get_content() for n in index.as_retriever(similarity_top_k=5).retrieve(QUERY)]
    want = expected(retrieved, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llm = HuggingFaceLLM(
            model=local.target.model,
            tokenizer=local.target.tokenizer,
            model_name=NAME,
            max_new_tokens=16,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
        )
    for postprocessor in (
        CohereRerank(base_url=service, api_key=TOKEN, model=NAME, top_n=2),
        JinaRerank(base_url=f"{service}/v1", api_key=TOKEN, model=NAME, top_n=2),
    ):
        engine = index.as_query_engine(similarity_top_k=5, llm=llm, node_postprocessors=[postprocessor])
        response = engine.query(QUERY)
        assert [n.node.get_content() for n in response.source_nodes] == [retrieved[r.index] for r in want]
        assert [n.score for n in response.source_nodes] == pytest.approx(_scores(want), abs=TOL)
        assert isinstance(response.response, str)


def test_rerankers_api_ranker(service, expected):
    pytest.importorskip("rerankers")
    from rerankers.models.api_rankers import APIRanker

    ranker = APIRanker(model=NAME, api_key=TOKEN, api_provider="jina", url=f"{service}/v1/rerank")
    got = ranker.rank(QUERY, DOCS[:3])
    want = expected(DOCS[:3], 3)  # APIRanker asks for top_n = every document
    assert [r.document.text for r in got.results] == [DOCS[r.index] for r in want]
    assert [r.score for r in got.results] == pytest.approx(_scores(want), abs=TOL)


def test_the_ignored_fields_header_is_always_a_valid_header():
    """Field names percent-encoded (a control character or a non-ASCII letter cannot travel in a header as
    it is: the server would drop the connection), cut after a whole name at its length limit."""
    from grogu.apps.serve.compat import IGNORED_HEADER_CHARS, ignored_header

    value = ignored_header(["\x1e\u00e9", "a b"] + ["x" * 300] * 10)
    assert value.isascii() and value.isprintable() and len(value) <= IGNORED_HEADER_CHARS
    assert value.startswith("%1E%C3%A9, a%20b, ") and value.endswith(", ...")
    assert ignored_header(["max_chunks_per_doc", "priority"]) == "max_chunks_per_doc, priority"
