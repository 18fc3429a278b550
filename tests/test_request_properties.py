"""Property tests of the service's request models (:mod:`grogu.apps.serve.api`), with hypothesis.

Whatever JSON a client sends for ``/rerank`` (any ``top_n``, threshold, documents of every JSON type,
unicode with lone surrogates, NaN and infinities, sizes at the limits), validation either gives a request
the pipeline can run (every document kept, in order; ``top_n`` None or a positive int; a finite
threshold) or raises pydantic's ``ValidationError``, which the service answers with a 422. Any other
exception would be a 500."""

from __future__ import annotations

import math

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from grogu.rerank.remote.schema import RerankRequest, ScoreRequest  # noqa: E402

#: text with any code point, lone surrogates included (the service answers those with a 422)
TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=50)
#: JSON scalars, NaN and the infinities included (Python's json reads them)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
DOCUMENT = st.one_of(  # mostly the shapes a client sends (one_of draws its branches alike)
    TEXT,
    TEXT,
    st.fixed_dictionaries({"text": st.text(max_size=60)}, optional={"title": st.none() | st.text(max_size=20)}),
    JSON,
)
TOP_N = st.one_of(
    st.none(), st.integers(min_value=-3, max_value=10**6), st.floats(allow_nan=True), st.booleans(), st.text(max_size=4)
)
THRESHOLD = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=4))


def _valid_or_422(model, body):
    try:
        return model.model_validate(body)
    except ValidationError:
        return None  # a 422 naming the field


@settings(max_examples=400, deadline=None, database=None)
@given(
    query=st.one_of(TEXT, TEXT, TEXT, JSON),
    documents=st.one_of(st.lists(DOCUMENT, max_size=20), st.lists(DOCUMENT, max_size=20), JSON),
    top_n=TOP_N,
    threshold=THRESHOLD,
    extra=st.dictionaries(
        st.sampled_from(["mode", "weight", "family", "gate", "margin", "rule", "nonsense"]), JSON, max_size=2
    ),
)
@example(query="Who wrote Hamlet?", documents=["Shakespeare.", {"text": "A play."}], top_n=1, threshold=-1.5, extra={})
@example(query="q", documents=["a"], top_n=None, threshold=None, extra={"mode": "document"})
def test_a_rerank_request_is_valid_or_a_validation_error(query, documents, top_n, threshold, extra):
    body = {"query": query, "documents": documents, "top_n": top_n, "threshold": threshold, **extra}
    request = _valid_or_422(RerankRequest, body)
    if request is None:
        return
    assert isinstance(request.query, str) and request.query.strip()
    assert len(request.documents) == len(documents)  # none dropped
    assert request.top_n is None or (type(request.top_n) is int and request.top_n >= 1)
    assert request.threshold is None or math.isfinite(request.threshold)
    request.mode_settings()  # the rerank settings were checked as a whole: they build


@settings(max_examples=200, deadline=None, database=None)
@given(
    alpha=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none()),
    top_k_frac=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers()),
    max_new_tokens=st.one_of(
        st.none(), st.integers(min_value=-5, max_value=10**9), st.floats(allow_nan=True), st.booleans()
    ),
    metric=st.one_of(st.sampled_from(["key_entropy", "ppl", "entropy", "KEY_ENTROPY", ""]), st.text(max_size=10)),
)
@example(alpha=0.05, top_k_frac=0.1, max_new_tokens=8, metric="ppl")
def test_scorer_settings_are_valid_or_a_validation_error(alpha, top_k_frac, max_new_tokens, metric):
    body = {"query": "Who wrote Hamlet?", "documents": ["Shakespeare wrote it."], "alpha": alpha}
    body.update(top_k_frac=top_k_frac, max_new_tokens=max_new_tokens, metric=metric)
    request = _valid_or_422(ScoreRequest, body)
    if request is None:
        return
    assert math.isfinite(request.alpha) and 0 < request.top_k_frac <= 1
    assert request.max_new_tokens is None or (type(request.max_new_tokens) is int and request.max_new_tokens >= 1)
    assert request.answer_tokens() >= 1
