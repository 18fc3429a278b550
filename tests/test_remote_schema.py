"""The wire schema (:mod:`grogu.rerank.remote.schema`) on both sides, and the clients built on it.

A loopback stand-in of the service answers canned JSON and records what it is sent: the client's
requests must parse with the service's own models, a malformed answer must be an error naming the
field, and sync and async calls must share one client and one TCP connection. The service's OpenAPI
schema documents every answer with the same models. rerank's arguments are written once: every
implementation shows the same signature.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from grogu_research.loopback import LoopbackJSON

from grogu.rerank.arguments import rerank_arguments
from grogu.rerank.remote import schema
from grogu.rerank.remote.client import RemoteACUScorer, RemoteInfluenceScorer, RemoteScorer, RemoteSePerScorer


def _row(score: float, answer: str) -> dict[str, Any]:
    return {
        "score": score,
        "metric": "key_entropy",
        "confidence": -score,
        "answer": answer,
        "n_tokens": 3,
        "n_key_tokens": 1,
        "variants": {"key_entropy": -score},
        "answer_finished": True,
        "details": None,
    }


GATE = {
    "in_doubt": True,
    "reasons": ["low support"],
    "support": 0.25,
    "confidence": 0.5,
    "candidates": 3,
    "changed": True,
    "answer": "Paris",
    "entropy_change": -0.1,
}

#: a valid answer per route
ANSWERS = {
    "/rerank": {
        "results": [{"index": 1, "rank_score": None, **_row(-0.5, "Lyon")}],
        "context": _row(-0.5, "Lyon"),
        "gate": GATE,
    },
    "/score_batch": {"results": [[_row(-1.0, "a"), _row(-2.0, "b")]]},
    "/ungrounded": {"answer": "x", "confidence": 1.5, "n_tokens": 2, "n_key_tokens": 1},
    "/acu": {"results": [{"acu": 0.5, "delta_p": {"True": 0.5}, "p_with": {}, "p_without": {}, "raised": "True"}]},
    "/info": {
        "model": "m",
        "device": "cpu",
        "dtype": "float32",
        "max_context_tokens": 64,
        "grogu_version": "0",
        "limits": {},
        "batching": {},
        "metrics": ["key_entropy"],
        "rerank_modes": ["context"],
        "embedder": None,
        "nli": None,
    },
}


#: what the stand-in answers on a path it has no answer for: the service's documented error body
REFUSED = {"detail": "refused", "message": "refused", "error": "ValueError"}


def service_stand_in(answers: dict[str, Any]) -> LoopbackJSON:
    """A loopback stand-in of ``grogu serve``: ``answers[path]`` (200) for each request, else the
    service's error body (422); it records each request and counts TCP connections (keep-alive)."""
    return LoopbackJSON(lambda method, path, body: (200, answers[path]) if path in answers else (422, REFUSED))


def posted(service: LoopbackJSON) -> list[tuple[str, Any]]:
    """(path, body) of each POST the stand-in received."""
    return [(path, body) for method, path, body in service.requests if method == "POST"]


@pytest.fixture
def service():
    answers = dict(ANSWERS)
    with service_stand_in(answers) as s:
        s.answers = answers  # a test may change an answer
        yield s


def test_a_rerank_request_parses_with_the_service_model_and_its_answer_comes_back_on_own_documents(service):
    docs = [{"text": "Paris is in France.", "id": 7}, {"text": "Lyon is in France.", "title": "Lyon", "id": 8}]
    with RemoteScorer(service.url, retries=0) as scorer:
        [kept] = scorer.rerank("Where is Lyon?", docs, top_n=1, mode="document", relevance=[0.9, 0.1])
    assert kept.index == 1 and kept.document is docs[1] and kept.score == -0.5 and kept.answer == "Lyon"
    assert kept.context is not None and kept.context.documents == [docs[1]]
    assert kept.gate is not None and kept.gate.reasons == ("low support",) and kept.gate.changed
    [(path, body)] = posted(service)
    parsed = schema.RerankRequest.model_validate(body)  # exactly what the route parses
    assert path == "/rerank" and parsed.top_n == 1 and parsed.relevance == [0.9, 0.1]
    assert parsed.mode_settings().mode == "document" and parsed.metric == scorer.metric
    # only text and title travel: the caller's ids stay here
    assert body["documents"] == [
        {"text": "Paris is in France.", "title": None},
        {"text": "Lyon is in France.", "title": "Lyon"},
    ]


def test_every_client_request_parses_with_the_service_models(service):
    scorer = RemoteScorer(service.url, retries=0)
    scored = scorer.score("q", ["a", "b"])
    assert [s.score for s in scored] == [-1.0, -2.0] and [s.document for s in scored] == ["a", "b"]
    assert scorer.ungrounded("q").confidence == 1.5
    [acu] = RemoteACUScorer(service.url, retries=0).score_batch([("c", "e", "True")])
    assert acu.acu == 0.5 and acu.raised == "True"
    models = {
        "/score_batch": schema.ScoreBatchRequest,
        "/ungrounded": schema.UngroundedRequest,
        "/acu": schema.ACURequest,
    }
    for path, body in posted(service):
        models[path].model_validate(body)


def test_a_malformed_answer_is_an_error_that_names_the_field(service):
    service.answers["/score_batch"] = {"results": [[{"score": -1.0, "metric": "key_entropy"}]]}
    with pytest.raises(ValueError, match="answer"):
        RemoteScorer(service.url, retries=0).score("q", ["a"])
    service.answers["/ungrounded"] = {"answer": "x", "confidence": "high", "n_tokens": 2, "n_key_tokens": 1}
    with pytest.raises(ValueError, match="confidence"):
        RemoteScorer(service.url, retries=0).ungrounded("q")


def test_a_bad_setting_is_refused_before_a_request_with_the_service_message(service):
    scorer = RemoteSePerScorer(service.url, retries=0, temperature=0.0)
    with pytest.raises(ValueError, match="temperature") as refused:
        scorer.score("q", ["a"], "ref")
    assert "ValidationError" not in type(refused.value).__name__  # grogu's own message, as the service's 422
    with pytest.raises(ValueError, match="n_ablations"):
        RemoteInfluenceScorer(service.url, retries=0, n_ablations=0)
    assert service.requests == []


def test_sync_and_async_calls_share_one_client_and_one_connection(service):
    scorer = RemoteScorer(service.url, retries=0)
    scorer.score("q", ["a", "b"])

    async def from_a_loop() -> None:
        await scorer.ascore("q", ["a", "b"])
        await asyncio.gather(scorer.ascore("q", ["a", "b"]), scorer.ascore("q", ["a", "b"]))
        scorer.score("q", ["a", "b"])  # a sync call inside a running loop waits, as in a notebook

    asyncio.run(from_a_loop())
    scorer.score("q", ["a", "b"])
    assert len(posted(service)) == 6 and scorer.transport.clients_made == 1
    assert service.connections <= 2  # the two concurrent calls may open a second connection
    scorer.close()
    scorer.score("q", ["a", "b"])  # a closed client opens a new one on the next call
    assert scorer.transport.clients_made == 2


def test_rerank_arguments_are_written_once():
    """Every rerank and arerank shows rerank_arguments' parameters, and binds them the same way."""
    from grogu import UtilityScorer

    expected = list(inspect.signature(rerank_arguments).parameters)
    for method in (UtilityScorer.rerank, UtilityScorer.arerank, RemoteScorer.rerank, RemoteScorer.arerank):
        assert list(inspect.signature(method).parameters) == ["self", *expected], method
    assert inspect.iscoroutinefunction(RemoteScorer.arerank) and not inspect.iscoroutinefunction(RemoteScorer.rerank)
    call = rerank_arguments("q", ["a"], 2, mode="document", return_details=True)
    assert (call.top_n, call.threshold, call.return_details, call.overrides) == (2, None, True, {"mode": "document"})
    with pytest.raises(TypeError):
        rerank_arguments("q", ["a"], 2, 0.5, "document")  # the settings are keyword-only


def test_the_openapi_schema_documents_every_answer_with_the_wire_models():
    pytest.importorskip("ray")
    from grogu.apps.serve.httpapi import app
    from grogu.apps.serve.service import GroguService  # noqa: F401 - registers the routes

    spec = app.openapi()
    answers = {
        "/rerank": "RerankResponse",
        "/score": "ScoresResponse",
        "/score_batch": "ScoresBatchResponse",
        "/best_layout": "LayoutResponse",
        "/influence": "InfluenceResponse",
        "/seper": "SePerResponse",
        "/acu": "ACUResponse",
        "/v2/rerank": "CompatRerankResponse",
        "/info": "InfoResponse",
    }
    for path, model in answers.items():
        operation = spec["paths"][path].get("post") or spec["paths"][path]["get"]
        ref = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/" + model), (path, ref)
    assert spec["paths"]["/ungrounded"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]


def test_the_fuzz_check_fails_an_answer_that_does_not_fit_its_schema():
    """grogu_research.fuzz (run on every route of the real service in tests/test_serve.py) checks each 200
    answer against the route's documented answer: a stand-in serving the real OpenAPI schema and a
    malformed /ungrounded answer fails it; the same stand-in with a well-formed answer passes."""
    pytest.importorskip("ray")
    pytest.importorskip("schemathesis")
    from grogu_research.fuzz import fuzz_routes

    from grogu.apps.serve.httpapi import app
    from grogu.apps.serve.service import GroguService  # noqa: F401 - registers the routes

    for answer, fits in ((ANSWERS["/ungrounded"], True), ({"answer": 1}, False)):
        stand_in = service_stand_in({"/openapi.json": app.openapi(), "/ungrounded": answer})
        try:
            out = fuzz_routes(stand_in.url, {}, 2)
        finally:
            stand_in.close()
        assert out.count(200) >= 1
        assert (not out.failures and not out.misfits) if fits else (out.misfits and out.failures), out.misfits[:2]
