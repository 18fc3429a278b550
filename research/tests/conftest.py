"""Shared fixtures of the research harness's tests: the packaged tokenizer and a tiny random Llama on it."""

from __future__ import annotations

import pytest
from grogu_research import testing


@pytest.fixture(scope="session")
def tokenizer():
    return testing.embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_engine(tokenizer):
    from grogu import Engine

    return Engine(testing.tiny_model("llama"), tokenizer, device="cpu")
