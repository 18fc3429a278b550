"""GroguSynthesizer: answer with the answer GroguRerank's context mode already generated.

When GroguRerank scores candidate contexts with the synthesizer's own QA prompt (``qa_template=``) and
the LLM's answer budget, the answer the LLM gave the chosen context while it was scored is exactly the
answer the synthesizer would generate from those nodes (greedy decoding). This synthesizer returns it
instead of generating it a second time; in every other case it defers to the wrapped synthesizer.
"""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Sequence

from llama_index.core.response_synthesizers.base import BaseSynthesizer
from llama_index.core.schema import NodeWithScore
from llama_index.core.types import RESPONSE_TEXT_TYPE

import grogu

from .prompts import template_from_llama_index
from .utils import answer_budget


def prompt_fingerprint(template: grogu.PromptTemplate, max_new_tokens: int) -> str:
    """Identifies a scoring prompt and answer budget (written with the context mode's answer)."""
    return hashlib.sha256(f"{template!r}|{max_new_tokens}".encode()).hexdigest()[:16]


class GroguSynthesizer(BaseSynthesizer):
    """Wraps a response synthesizer; reuses the context mode's answer when it is the synthesizer's own.

    Example:
        ```python
        synth = get_response_synthesizer(llm=llm)
        rerank = GroguRerank(top_n=3, model=llm, qa_template=synth, max_new_tokens=llm.max_new_tokens)
        engine = RetrieverQueryEngine.from_args(retriever, node_postprocessors=[rerank],
                                                response_synthesizer=GroguSynthesizer(synth))
        ```
    ``reused`` counts the answers returned without generating.

    The reused answer is greedy. It is the synthesizer's own only when the LLM decodes greedily too:
    ``temperature=0`` and neutral penalties, and a served model whose server adds none (vLLM
    ``--generation-config vllm``, SGLang ``--sampling-defaults openai``, or the fields in
    ``additional_kwargs``). grogu warns once when it sees the LLM's own settings differ.
    """

    def __init__(self, synthesizer: BaseSynthesizer) -> None:
        if not isinstance(synthesizer, BaseSynthesizer):
            raise TypeError(f"synthesizer must be a LlamaIndex response synthesizer, got {type(synthesizer).__name__}")
        super().__init__(
            llm=synthesizer._llm, callback_manager=synthesizer.callback_manager, streaming=synthesizer._streaming
        )
        self._inner = synthesizer
        self._fingerprint = self._own_fingerprint()
        self.reused = 0

    def _get_prompts(self) -> dict:
        return self._inner.get_prompts()

    def _own_fingerprint(self) -> Optional[str]:
        """The fingerprint of this synthesizer's prompt and its LLM's budget; None where grogu's rendering
        is not known to equal the LLM's (a completion LLM renders its prompt its own way), so nothing is
        reused."""
        llm = self._inner._llm
        budget = answer_budget(llm)
        if not getattr(getattr(llm, "metadata", None), "is_chat_model", False) or not isinstance(budget, int):
            return None
        try:
            return prompt_fingerprint(template_from_llama_index(self._inner, llm), budget)
        except (TypeError, ValueError):
            return None

    def _update_prompts(self, prompts: dict) -> None:
        self._inner.update_prompts(prompts)
        self._fingerprint = self._own_fingerprint()

    def _scored_answer(self, nodes: List[NodeWithScore]) -> Optional[str]:
        """The context mode's answer if these nodes are exactly its chosen context, scored with this
        synthesizer's prompt and budget."""
        if self._fingerprint is None or self._streaming or not nodes:
            return None
        contexts = [n.node.metadata.get("grogu", {}).get("context") for n in nodes]
        first = contexts[0]
        if not isinstance(first, dict) or any(c != first for c in contexts):
            return None
        if first.get("prompt") != self._fingerprint or len(first.get("nodes", [])) != len(nodes):
            return None
        ids = [n.node.node_id for n in nodes]
        if first.get("node_ids") != ids:
            return None
        return first.get("answer")

    def synthesize(
        self,
        query: Any,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **kwargs: Any,
    ):
        answer = self._scored_answer(nodes)
        if answer is not None:
            kwargs["grogu_answer"] = answer
        return super().synthesize(query, nodes, additional_source_nodes, **kwargs)

    async def asynthesize(
        self,
        query: Any,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **kwargs: Any,
    ):
        answer = self._scored_answer(nodes)
        if answer is not None:
            kwargs["grogu_answer"] = answer
        return await super().asynthesize(query, nodes, additional_source_nodes, **kwargs)

    def get_response(
        self, query_str: str, text_chunks: Sequence[str], grogu_answer: Optional[str] = None, **kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        if grogu_answer is not None:
            self.reused += 1
            return grogu_answer
        return self._inner.get_response(query_str, text_chunks, **kwargs)

    async def aget_response(
        self, query_str: str, text_chunks: Sequence[str], grogu_answer: Optional[str] = None, **kwargs: Any
    ) -> RESPONSE_TEXT_TYPE:
        if grogu_answer is not None:
            self.reused += 1
            return grogu_answer
        return await self._inner.aget_response(query_str, text_chunks, **kwargs)


__all__ = ["GroguSynthesizer", "prompt_fingerprint"]
