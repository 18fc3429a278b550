"""The nodes GroguRerank returns: grogu's scores written onto new NodeWithScore objects, in the chosen
order, with the details in ``metadata["grogu"]`` (hidden from the LLM and the embedder)."""

from __future__ import annotations

import logging
import math
from typing import Any, Dict, List

from llama_index.core.schema import NodeWithScore

from grogu.metrics.scales import probability
from grogu.rerank.scorer import DocumentScore

from .utils import hide_from_llm

logger = logging.getLogger(__name__)


def retrieval_relevance(nodes: List[NodeWithScore]) -> List[float]:
    """The retriever's scores; when a node has none, the order the nodes came in, as ranks."""
    scores = [n.score for n in nodes]
    if any(s is None or not math.isfinite(s) for s in scores):
        return [float(len(nodes) - i) for i in range(len(nodes))]
    return [float(s) for s in scores]


def context_details(
    reranker: Any, nodes: List[NodeWithScore], order: List[int], r: DocumentScore, fingerprint: str
) -> Dict[str, Any]:
    """The context mode's details: the chosen context's GROGU and the answer the LLM gave it."""
    details: Dict[str, Any] = {
        "score": float(r.score),
        "confidence": float(r.confidence),
        "answer": r.answer,
        "nodes": [int(j) for j in order],
        "node_ids": [nodes[j].node.node_id for j in order],
        "prompt": fingerprint,
    }
    if reranker.score_scale == "probability":
        details["probability"] = probability(r.metric, float(r.score))
    if r.gate is not None:  # the verdict on the retriever's own context: act on it (abstain, retrieve more)
        details["gate"] = r.gate.as_dict()
    return details


def node_details(reranker: Any, r: DocumentScore, details: Dict[str, Any]) -> float:
    """A per-node mode's details, added to ``details``; returns the node's new score."""
    details.update(
        score=float(r.score),
        confidence=float(r.confidence),
        answer=r.answer,
        n_tokens=int(r.n_tokens),
        n_key_tokens=int(r.n_key_tokens),
        variants={k: float(v) for k, v in r.variants.items()},
    )
    scaled = float(r.score)
    if reranker.score_scale == "probability":
        scaled = details["probability"] = probability(r.metric, float(r.score))
    if r.rank_score is not None:  # fusion: the fused score
        details["fused_score"] = float(r.rank_score)
        return float(r.rank_score)
    return scaled


def ranked_nodes(
    reranker: Any, nodes: List[NodeWithScore], ranked: List[DocumentScore], fingerprint: str
) -> List[NodeWithScore]:
    """New NodeWithScore objects in the order of ``ranked``, with scores and metadata written.

    The document mode's score is the utility (or its probability); the fusion mode's is the fused
    score; the context and prune modes keep the retriever's score."""
    order = [r.index for r in ranked]
    out = []
    for rank, r in enumerate(ranked):
        original = nodes[r.index]
        details: Dict[str, Any] = {
            "model": reranker.model,
            "metric": reranker.metric,
            "mode": reranker.mode,
            "rank": rank,
            "retrieval_rank": r.index,
        }
        score = original.score
        if r.context is not None:
            details["context"] = context_details(reranker, nodes, order, r, fingerprint)
        else:
            scored = node_details(reranker, r, details)
            if r.rank_score is not None or reranker.mode == "document":
                score = scored
        write_metadata(original, details, reranker.keep_retrieval_score)
        out.append(NodeWithScore(node=original.node, score=score))
    if not out:
        logger.info("GroguRerank: no node reached threshold %s (of %d)", reranker.threshold, len(nodes))
    return out


def write_metadata(original: NodeWithScore, details: Dict[str, Any], keep_retrieval_score: bool) -> None:
    """``metadata["grogu"]`` (and the retriever's score), kept out of the LLM's and the embedder's text."""
    meta = original.node.metadata
    if keep_retrieval_score:
        meta["retrieval_score"] = original.score
        hide_from_llm(original.node, "retrieval_score")
    meta["grogu"] = details
    hide_from_llm(original.node, "grogu")


def failed_nodes(reranker: Any, nodes: List[NodeWithScore], error: str) -> List[NodeWithScore]:
    """Every node back, in its original order with its original score, the error in its metadata."""
    for n in nodes:
        n.node.metadata["grogu"] = {"model": reranker.model, "metric": reranker.metric, "error": error}
        hide_from_llm(n.node, "grogu")
    return list(nodes)
