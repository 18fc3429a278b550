"""LlamaIndex integration of grogu: rerank nodes by their utility to the target LLM (GROGU) and log
how much each source node influenced the answer that was given (Influence Score)."""

from llama_index.postprocessor.grogu.base import GroguRerank
from llama_index.postprocessor.grogu.influence import (
    CallableSink,
    GroguInfluenceCallbackHandler,
    GroguInfluenceHandler,
    JSONLSink,
    ListSink,
    LoggerSink,
)
from llama_index.postprocessor.grogu.prompts import template_from_llama_index
from llama_index.postprocessor.grogu.synthesizer import GroguSynthesizer

__all__ = [
    "GroguRerank",
    "template_from_llama_index",
    "GroguSynthesizer",
    "GroguInfluenceHandler",
    "GroguInfluenceCallbackHandler",
    "JSONLSink",
    "ListSink",
    "LoggerSink",
    "CallableSink",
]
