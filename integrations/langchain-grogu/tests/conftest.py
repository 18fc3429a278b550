"""Fixtures: a tiny real LLM (2-layer Llama with random weights on the real SmolLM2 vocabulary)
wrapped in a transformers pipeline and LangChain's HuggingFacePipeline, the packaged all-MiniLM-L6-v2
for the vector store, and real SQuAD paragraphs. Nothing is mocked and nothing reaches a hub."""

from __future__ import annotations

import warnings

import pytest
from grogu_research import testing
from langchain_core.documents import Document

from grogu import get_engine

#: Short answers keep the suite fast on a CPU; every component is configured with it.
MAX_NEW_TOKENS = 8


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The tiny model gains nothing from intra-op threads, and on a shared 2-core machine OpenMP threads
    that spin against other processes make it up to 50x slower: run these tests on one thread."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    return testing.embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny(tokenizer):
    return testing.tiny_model("llama", seed=0)


@pytest.fixture(scope="session")
def engine(tiny, tokenizer):
    """The process-wide grogu engine of the tiny model (the one every component must reuse)."""
    return get_engine((tiny, tokenizer))


@pytest.fixture(scope="session")
def llm(tiny, tokenizer):
    """A real LangChain LLM on the tiny model: HuggingFacePipeline over a transformers pipeline."""
    from langchain_huggingface import HuggingFacePipeline
    from transformers import pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe = pipeline(
            "text-generation",
            model=tiny,
            tokenizer=tokenizer,
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            return_full_text=False,
        )
    return HuggingFacePipeline(pipeline=pipe)


@pytest.fixture(scope="session")
def paragraphs():
    return testing.with_shared_data(testing.squad_paragraphs, 6, seed=3)


@pytest.fixture(scope="session")
def documents(paragraphs):
    """Real SQuAD paragraphs (cut to 25..70 words) as LangChain documents with ids and metadata."""
    return [
        Document(
            " ".join(p["text"].split()[: 25 + 9 * i]),
            id=f"squad-{i}",
            metadata={"title": p["title"], "source": "squad-dev", "retriever_rank": i},
        )
        for i, p in enumerate(paragraphs)
    ]


@pytest.fixture(scope="session")
def embeddings():
    from langchain_huggingface import HuggingFaceEmbeddings

    from grogu.runtime.models import embedded_embedder_path

    return HuggingFaceEmbeddings(model_name=embedded_embedder_path())


@pytest.fixture(scope="session")
def vectorstore(documents, embeddings):
    from langchain_core.vectorstores import InMemoryVectorStore

    return InMemoryVectorStore.from_documents(documents, embeddings)
