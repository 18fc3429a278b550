"""LangChain's standard conformance suite (``langchain-tests``) for GroguRetriever, as partner packages
run it: a real vector store (packaged all-MiniLM-L6-v2) over SQuAD paragraphs as the base retriever
and the tiny real LLM as the target model. The number of results is ``top_n``, in the constructor
and per call (``retriever.invoke(query, top_n=1)``).

The document compressor has no standard suite: langchain-tests covers chat models, embeddings, tools,
retrievers, vector stores, caches and stores, not ``BaseDocumentCompressor``."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from grogu_research import testing
from langchain_core.documents import Document
from langchain_grogu import GroguRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from grogu import get_engine


@lru_cache(maxsize=1)
def _base_retriever():
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_huggingface import HuggingFaceEmbeddings

    from grogu.runtime.models import embedded_embedder_path

    docs = [
        Document(" ".join(p["text"].split()[:40]), id=f"squad-{i}", metadata={"title": p["title"]})
        for i, p in enumerate(testing.squad_paragraphs(6, seed=3))
    ]
    store = InMemoryVectorStore.from_documents(docs, HuggingFaceEmbeddings(model_name=embedded_embedder_path()))
    return store.as_retriever(search_kwargs={"k": 5})


@lru_cache(maxsize=1)
def _engine():
    return get_engine((testing.tiny_model("llama", seed=0), testing.embedded_tokenizer()))


class TestGroguRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[GroguRetriever]:
        return GroguRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {
            "base_retriever": _base_retriever(),
            "model": _engine(),
            "top_n": 3,
            "max_new_tokens": 8,
            "mode": "document",
        }

    @property
    def retriever_query_example(self) -> str:
        return "What is the name of the stadium?"

    @property
    def num_results_arg_name(self) -> str:
        return "top_n"
