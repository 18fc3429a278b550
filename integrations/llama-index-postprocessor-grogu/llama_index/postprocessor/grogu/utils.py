"""Helpers shared by the reranker and the influence handlers: which target LLM to score with, and
which text of a node that LLM reads. (The grogu service in place of a model: :mod:`grogu.rerank.factory`.)"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

import grogu
from grogu.core.target import Target
from grogu.metrics.influence import InfluenceScorer
from grogu.rerank.factory import engine_label
from grogu.runtime.inference_server import target_from_llm

#: HuggingFaceLLM's placeholder model_name when a loaded model is passed without a name.
_HF_DEFAULT_NAME = "StabilityAI/stablelm-tuned-alpha-3b"

#: Metadata keys this package writes; hidden from the LLM and the embedder (they are scores, not content).
GROGU_METADATA_KEYS = ("retrieval_score", "grogu", "influence")


def hf_llm_pair(llm: Any) -> Optional[Tuple[Any, Any]]:
    """The (model, tokenizer) inside a LlamaIndex LLM that holds a local transformers model
    (``HuggingFaceLLM``), else None."""
    if not isinstance(llm, LLM):
        return None
    model = getattr(llm, "_model", None)
    tokenizer = getattr(llm, "_tokenizer", None)
    if model is None or tokenizer is None or not hasattr(model, "config"):
        return None
    return model, tokenizer


def answer_budget(llm: Any) -> Optional[int]:
    """The LLM's own answer budget: ``max_new_tokens`` (HuggingFaceLLM) or ``max_tokens`` (OpenAI, OpenAILike)."""
    for name in ("max_new_tokens", "max_tokens"):
        value = getattr(llm, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def resolve_engine(model: Any, device: Optional[str] = None, dtype: Optional[str] = None) -> grogu.Engine:
    """The shared grogu engine of the target LLM.

    ``model`` may be a grogu ``Engine``, a ``UtilityScorer`` / ``InfluenceScorer`` (its engine), a model
    name/path/hub id, a loaded ``(model, tokenizer)`` pair, a LlamaIndex ``HuggingFaceLLM`` whose
    model and tokenizer are reused (no second copy is loaded), a ``grogu.ServerTarget``, or an
    ``OpenAILike`` / ``OpenAI`` LLM pointing at an OpenAI-compatible server (scored through that server,
    :func:`grogu.runtime.inference_server.target_from_llm`; the OpenAI API and Ollama are grounded-only targets:
    ``metric="ppl"``, their default, or ``"entropy"``).
    """
    if isinstance(model, Target):  # a grogu Engine or ServerTarget
        return model
    if isinstance(model, (grogu.UtilityScorer, InfluenceScorer)):
        return model.target
    if isinstance(model, (str, tuple)):
        return grogu.get_engine(model, device=device, dtype=dtype)
    pair = hf_llm_pair(model)
    if pair is not None:
        if device is not None or dtype is not None:
            raise ValueError(
                "device/dtype apply to a model given by name; a HuggingFaceLLM's model is scored where it "
                "is loaded (move the LLM's model instead)"
            )
        return grogu.get_engine(pair)
    if isinstance(model, LLM):
        if device is not None or dtype is not None:
            raise ValueError("device/dtype apply to a model loaded here, not to an LLM behind a server")
        target = target_from_llm(model)
        if target is not None:
            return target
        raise TypeError(
            f"{type(model).__name__} does not expose token probabilities: GROGU needs the target LLM's "
            "token log-probabilities. Pass a HuggingFaceLLM, an OpenAILike / OpenAI LLM on an OpenAI-compatible "
            "server (vLLM, SGLang, llama.cpp; the OpenAI API or Ollama, grounded-only: metric 'ppl' or 'entropy'), a "
            "grogu.ServerTarget, a grogu Engine, a (model, tokenizer) pair or a model name/path."
        )
    raise TypeError(
        "model must be a model name/path, a grogu Engine, a (model, tokenizer) pair, a HuggingFaceLLM or a "
        "grogu service URL (http://host:port, see grogu serve) / grogu.RemoteScorer, "
        f"got {type(model).__name__}"
    )


def model_label(model: Any, engine: grogu.Engine) -> str:
    """A readable name of the target LLM for metadata, events and logs."""
    if isinstance(model, str):
        return model
    if isinstance(model, LLM):
        name = getattr(model, "model_name", None)
        if isinstance(name, str) and name and name != _HF_DEFAULT_NAME:
            return name
    return engine_label(engine)


def check_nodes(nodes: Any) -> List[NodeWithScore]:
    """The nodes as a list; TypeError naming the position of anything that is not a NodeWithScore."""
    if isinstance(nodes, (str, bytes)) or not hasattr(nodes, "__iter__"):
        raise TypeError(f"nodes must be a list of NodeWithScore, got {type(nodes).__name__}")
    nodes = list(nodes)
    for i, n in enumerate(nodes):
        if not isinstance(n, NodeWithScore):
            raise TypeError(
                f"node {i} is a {type(n).__name__}, not a NodeWithScore "
                "(wrap nodes as NodeWithScore(node=..., score=...))"
            )
    return nodes


def node_text(node: BaseNode, metadata_mode: MetadataMode) -> str:
    """The node's content as the LLM reads it (by default with its LLM-visible metadata)."""
    return node.get_content(metadata_mode=metadata_mode)


def hide_from_llm(node: BaseNode, key: str) -> None:
    """Keep a score written into node.metadata out of the LLM prompt and the embedding text."""
    for keys in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
        if key not in keys:
            keys.append(key)
