"""GroguCompressor: rerank and prune retrieved documents by their GROGU utility to the target LLM.

>>> from langchain_grogu import GroguCompressor
>>> compressor = GroguCompressor(model=llm, top_n=3, qa_prompt=prompt)  # prompt: the chain's QA prompt
>>> docs = compressor.compress_documents(retrieved_docs, "Who wrote Hamlet?")
>>> docs[0].metadata["relevance_score"], docs[0].metadata["grogu"]

GROGU (Hua et al.; see ``grogu.metrics``) is the target LLM's confidence in the answer it gives greedily
from a context: minus the mean entropy (nats) of the answer's key tokens by default, so higher is better.
The rerank mode (``grogu.ModeSettings``) says what is scored: candidate contexts of ``top_n`` documents
(context, the default) or each document alone (document, fusion, prune). ``metadata["relevance_score"]``
is the document's score in that mode, where LangChain's rerankers put theirs, in [0, 1] as theirs is
(``score_scale="probability"``, the default here; :mod:`grogu.metrics.scales`). ``metadata["grogu"]`` keeps
the utility; ``score_scale="utility"`` puts it, and ``threshold``, on the utility's own scale.

Give the chain's prompt as ``qa_prompt``: the documents are then scored on what the LLM reads. Without it,
the context mode scores LlamaIndex's QA prompt (``grogu.core.prompts.RAG_QA_TEMPLATE``) and warns.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from typing_extensions import override

from .scoring import GroguScoring


class GroguCompressor(GroguScoring, BaseDocumentCompressor):
    """Document compressor that reranks documents by their GROGU utility to the target LLM.

    Use it on its own or in ``ContextualCompressionRetriever``. Each returned document is a copy of
    the input with ``metadata['grogu']`` added; existing metadata is kept.

    Example:
        ```python
        from langchain_classic.retrievers import ContextualCompressionRetriever
        from langchain_grogu import GroguCompressor

        # llm: a HuggingFacePipeline / ChatHuggingFace, or a model name; prompt: the chain's QA prompt
        compressor = GroguCompressor(model=llm, top_n=3, qa_prompt=prompt)
        retriever = ContextualCompressionRetriever(
            base_compressor=compressor, base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10})
        )
        ```
    """

    @override
    def compress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Rerank documents by GROGU utility; keep ``top_n`` and those with score >= ``threshold``.

        Args:
            documents: The retrieved documents.
            query: The query the target LLM will answer from them.
            callbacks: The run's callbacks: no LangChain event is emitted; a tracer's span of the run
                (OpenInference) parents grogu's ``grogu.rerank`` OpenTelemetry span.

        Returns:
            Copies of the kept documents, best first, with ``metadata['grogu']`` added.
        """
        return self.rerank_documents(documents, query, self.top_n, callbacks=callbacks)

    @override
    async def acompress_documents(
        self,
        documents: Sequence[Document],
        query: str,
        callbacks: Callbacks | None = None,
    ) -> Sequence[Document]:
        """Async :meth:`compress_documents`; does not block the event loop."""
        return await self.arerank_documents(documents, query, self.top_n, callbacks=callbacks)
