"""LlamaIndex integration of grogu: rerank nodes by their utility to the target LLM (GROGU) and log
how much each source node influenced the answer that was given (Influence Score)."""

from llama_index.postprocessor.grogu.base import GroguRerank
from llama_index.postprocessor.grogu.framework import FRAMEWORK
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

from grogu.core.frameworks import register_framework

# grogu.tune reads LlamaIndex prompts and LLMs through it (also advertised as an entry point)
register_framework(FRAMEWORK)

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
