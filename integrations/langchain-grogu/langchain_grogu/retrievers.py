"""GroguRetriever: any retriever, reranked and pruned by GROGU utility to the target LLM.

>>> retriever = GroguRetriever(base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10}),
...                            model=llm, top_n=3, qa_prompt=prompt)   # prompt: the chain's QA prompt
>>> result = retriever.as_qa_chain().invoke("Who wrote Hamlet?")  # {"answer", "documents"}
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import BaseRetriever, RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from typing_extensions import override

from .document_scores import METADATA_KEY
from .scoring import GroguScoring


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
            base_retriever=vectorstore.as_retriever(search_kwargs={"k": 10}), model=llm, top_n=3, qa_prompt=prompt
        )
        result = retriever.as_qa_chain(llm).invoke("Who wrote Hamlet?")  # the answer, and the kept documents
        ```

    Without ``qa_prompt`` the documents are scored on LlamaIndex's QA prompt, not the chain's (a warning
    says so); that form measured no gain (docs/benchmarks.md).

    ``retriever.tune(examples, out="tuned")`` fits the rerank settings to this LLM, prompt and ``top_n``
    on labelled questions (:meth:`tune`). Pass the result back with ``settings=``.
    """

    base_retriever: RetrieverLike
    """The retriever whose results are reranked (anything that maps a query string to documents)."""

    @override
    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n = self.call_top_n(kwargs)
        docs = self.base_retriever.invoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        return self.rerank_documents(docs, query, top_n, callbacks=run_manager)

    @override
    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        top_n = self.call_top_n(kwargs)
        docs = await self.base_retriever.ainvoke(query, config={"callbacks": run_manager.get_child()}, **kwargs)
        return await self.arerank_documents(docs, query, top_n, callbacks=run_manager)

    def as_qa_chain(self, llm: Any = None) -> Runnable:
        """A runnable ``question -> {"answer", "documents"}``.

        In the context mode with the chain's prompt (``qa_prompt``), the answer is the one the target
        LLM generated for the chosen documents while they were scored (greedy, ``max_new_tokens``: set
        it to the LLM's answer budget): the LLM is not called a second time. Otherwise ``llm`` answers
        from ``qa_prompt`` with the documents joined by blank lines; so it does, when given, where no
        scored answer exists (no documents retrieved, or scoring failed with ``on_error="passthrough"``),
        and without it that is a ValueError rather than an empty answer.

        The two agree only when ``llm`` decodes greedily: ``temperature=0``, neutral penalties, and a
        server that adds none (vLLM ``--generation-config vllm``, SGLang ``--sampling-defaults openai``,
        or the fields in ``extra_body``). grogu warns once when it sees the LLM's settings differ.
        """
        reuse = self.mode == "context" and self.qa_prompt is not None
        if not reuse and (llm is None or self.qa_prompt is None):
            raise ValueError("as_qa_chain needs qa_prompt and, outside the context mode, the llm that answers")
        generate = None if llm is None else self.qa_prompt | llm | StrOutputParser()

        def inputs(query: str, docs: list[Document]) -> dict[str, str]:
            return {self.context_key: "\n\n".join(d.page_content for d in docs), self.question_key: query}

        def scored_answer(docs: list[Document]) -> str | None:
            context = docs[0].metadata.get(METADATA_KEY, {}).get("context") if reuse and docs else None
            if context is None and generate is None:
                raise ValueError(
                    "no scored answer for this question (no documents, or scoring failed): "
                    "pass llm= to as_qa_chain to answer in that case"
                )
            return None if context is None else context["answer"]

        def run(query: str, config: RunnableConfig) -> dict[str, Any]:
            docs = self.invoke(query, config=config)
            answer = scored_answer(docs)
            if answer is None:
                answer = generate.invoke(inputs(query, docs), config=config)
            return {"answer": answer, "documents": docs}

        async def arun(query: str, config: RunnableConfig) -> dict[str, Any]:
            docs = await self.ainvoke(query, config=config)
            answer = scored_answer(docs)
            if answer is None:
                answer = await generate.ainvoke(inputs(query, docs), config=config)
            return {"answer": answer, "documents": docs}

        return RunnableLambda(run, afunc=arun, name="GroguQA")
