"""``test_compile``, as LangChain partner packages carry it (``pytest -m compile tests/integration_tests``):
the integration tests compile and import, without running them. Here it also checks what they rely on:
every module of this folder compiles, and the standard suite is LangChain's retriever suite."""

from __future__ import annotations

import importlib.util
import py_compile
from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.mark.compile
def test_compile() -> None:
    modules = sorted(HERE.glob("test_*.py"))
    assert {m.name for m in modules} >= {"test_compile.py", "test_retrievers_standard.py"}
    for module in modules:
        py_compile.compile(str(module), doraise=True)  # a SyntaxError fails the test

    spec = importlib.util.spec_from_file_location("_grogu_standard_tests", HERE / "test_retrievers_standard.py")
    standard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(standard)
    from langchain_grogu import GroguRetriever
    from langchain_tests.integration_tests import RetrieversIntegrationTests

    suite = standard.TestGroguRetrieverStandard
    assert issubclass(suite, RetrieversIntegrationTests)
    assert suite.retriever_constructor.fget(None) is GroguRetriever
