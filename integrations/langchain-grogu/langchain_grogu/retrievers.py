"""GroguRetriever: any retriever, reranked and pruned by GROGU utility to the target LLM.

>>> retriever = GroguRetriever(base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10}),
...                            model=llm, top_n=3)
>>> chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from typing_extensions import override

from .rerank import _DEFAULT, GroguScoring


class GroguRetriever(GroguScoring, BaseRetriever):
    """Retriever that fetches documents with ``base_retriever`` and keeps the ones most useful to the
    target LLM, best first, each with ``metadata['grogu']`` (see :class:`GroguCompressor`).

    It is a Runnable ``str -> list[Document]``, so it drops into LCEL chains in place of the base
    retriever; ``invoke``/``ainvoke``/``batch``/``abatch`` all work, and the base retriever's run is
    a child of this one in callbacks and traces.

    Example:
        ```python
        from langchain_grogu import GroguRetriever

        retriever = GroguRetriever(
            base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10}), model=llm, top_n=3
        )
        chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm
        ```
    """

    base_retriever: RetrieverLike
    """The retriever whose results are reranked (anything that maps a query string to documents)."""

    @override
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n = kwargs.pop("top_n", _DEFAULT)
        docs = self.base_retriever.invoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        return self.rerank_documents(docs, query, top_n)

    @override
    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n = kwargs.pop("top_n", _DEFAULT)
        docs = await self.base_retriever.ainvoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        return await self.arerank_documents(docs, query, top_n)
