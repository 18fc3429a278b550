"""Real LlamaIndex pipelines on real SQuAD paragraphs: a VectorStoreIndex embedded with the packaged
all-MiniLM-L6-v2 (HuggingFaceEmbedding), and a HuggingFaceLLM on a tiny 2-layer random model with the
real SmolLM2 tokenizer as both the generator and the target LLM scored by grogu."""

from __future__ import annotations

import warnings

import pytest
import torch

# The tiny models are far faster on one thread, and on a shared CPU many threads spin-wait each other.
torch.set_num_threads(1)

ANSWER_TOKENS = 8  # short answers keep the tiny-model pipelines fast


@pytest.fixture(scope="session")
def tokenizer():
    from grogu_research import testing

    return testing.embedded_tokenizer()


@pytest.fixture(scope="session")
def llm(tokenizer):
    from grogu_research import testing
    from llama_index.llms.huggingface import HuggingFaceLLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HuggingFaceLLM(
            model=testing.tiny_model("llama"),
            tokenizer=tokenizer,
            model_name="tiny-llama",
            max_new_tokens=ANSWER_TOKENS,
            is_chat_model=True,
            generate_kwargs={"do_sample": False},
        )


@pytest.fixture(scope="session")
def embed_model():
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from grogu.runtime.models import embedded_embedder_path

    return HuggingFaceEmbedding(model_name=embedded_embedder_path(), device="cpu")


@pytest.fixture(scope="session")
def paragraphs():
    from grogu_research import testing

    return testing.with_shared_data(testing.squad_paragraphs, 12, seed=3)


@pytest.fixture(scope="session")
def index(paragraphs, embed_model):
    from llama_index.core import Document, VectorStoreIndex

    docs = [Document(text=p["text"], metadata={"title": p["title"]}) for p in paragraphs]
    return VectorStoreIndex.from_documents(docs, embed_model=embed_model)


@pytest.fixture(scope="session")
def questions(paragraphs):
    return [p["question"] for p in paragraphs]


@pytest.fixture
def attach():
    """Add instrumentation handlers to the root dispatcher for one test, removed afterwards."""
    from llama_index.core.instrumentation import get_dispatcher

    root = get_dispatcher()
    added = []

    def add(handler):
        root.add_event_handler(handler)
        added.append(handler)
        return handler

    yield add
    for handler in added:
        root.event_handlers.remove(handler)
