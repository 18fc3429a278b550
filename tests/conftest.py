"""Shared fixtures: tiny random models of real architectures (fast, deterministic) on the real
SmolLM2 tokenizer, and the real packaged SmolLM2-135M-Instruct."""

from __future__ import annotations

import warnings

import pytest
from grogu_research import testing


@pytest.fixture(scope="session")
def tokenizer():
    return testing.embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_engine(tokenizer):
    from grogu import Engine

    return Engine(testing.tiny_model("llama"), tokenizer, device="cpu")


@pytest.fixture(scope="session")
def smol_engine():
    from grogu import get_engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return get_engine("smollm2-135m-instruct", device="cpu")
