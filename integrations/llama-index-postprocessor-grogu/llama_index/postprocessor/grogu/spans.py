"""GroguRerank's OpenTelemetry span (``grogu.rerank``, OpenInference's reranker attributes; see
:mod:`grogu.observe.tracing`): LlamaIndex nodes as the span's documents. The span is a child of the current
OpenTelemetry span, which under OpenInference's LlamaIndexInstrumentor is the postprocessor's own span."""

from __future__ import annotations

from typing import Any, Dict, List

from llama_index.core.schema import MetadataMode, NodeWithScore

from grogu.observe import tracing
from grogu.observe.influence_record import grogu_utility


def _document(n: NodeWithScore, **fields: Any) -> Dict[str, Any]:
    return {
        "id": n.node.node_id,
        "page_content": n.node.get_content(metadata_mode=MetadataMode.NONE),
        "metadata": dict(n.node.metadata),
        "score": n.score,
        **fields,
    }


def rerank_span(reranker: Any, nodes: List[NodeWithScore], query: str) -> Any:
    """The span of one GroguRerank call on ``nodes`` (their scores: the retriever's)."""
    return tracing.rerank_span(
        framework="llama_index",
        query=query,
        model=reranker.model,
        mode=reranker.mode,
        metric=reranker.metric,
        top_k=reranker.top_n if reranker.top_n is not None else len(nodes),
        documents=[_document(n) for n in nodes] if tracing.available() else [],
    )


def output_documents(nodes: List[NodeWithScore], new_nodes: List[NodeWithScore]) -> List[Dict[str, Any]]:
    """The returned nodes as the span's output documents: score in the chosen mode, input position,
    the retriever's score and the GROGU utility (None in the context mode)."""
    position = {id(n.node): i for i, n in enumerate(nodes)}
    out = []
    for n in new_nodes:
        i = position[id(n.node)]
        out.append(_document(n, index=i, retrieval_score=nodes[i].score, utility=grogu_utility(n.node.metadata)))
    return out


def _context(new_nodes: List[NodeWithScore]) -> Dict[str, Any]:
    """The chosen context's details (context mode), else {}."""
    details = new_nodes[0].node.metadata.get("grogu") if new_nodes else None
    context = details.get("context") if isinstance(details, dict) else None
    return context if isinstance(context, dict) else {}


def finish(span: Any, nodes: List[NodeWithScore], new_nodes: List[NodeWithScore]) -> None:
    if span.recording:
        context = _context(new_nodes)
        span.output(output_documents(nodes, new_nodes), context_score=context.get("score"), gate=context.get("gate"))
