"""LangChain integration for grogu.

- :class:`GroguCompressor`: a document compressor that reranks and prunes documents by their GROGU
  utility to the target LLM (use alone or in ``ContextualCompressionRetriever``);
- :class:`GroguRetriever`: wraps any retriever with the same reranking, for LCEL chains;
- :class:`InfluenceCallbackHandler`: after each run, how much each retrieved document influenced the
  answer the chain gave (Influence Score), delivered to sinks (:class:`JSONLSink`, :class:`ListSink`,
  :class:`LoggerSink`, :class:`CallableSink`) and as a custom event.
"""

from importlib import metadata

from grogu.core.frameworks import register_framework

from .callbacks import EVENT_NAME, InfluenceCallbackHandler
from .compressors import GroguCompressor
from .document_scores import METADATA_KEY, RELEVANCE_KEY
from .framework import FRAMEWORK
from .prompts import template_from_langchain
from .retrievers import GroguRetriever
from .sinks import CallableSink, JSONLSink, ListSink, LoggerSink

# grogu.tune reads LangChain prompts and LLMs through it (also advertised as an entry point)
register_framework(FRAMEWORK)

try:
    __version__ = metadata.version("langchain-grogu")
except metadata.PackageNotFoundError:  # running from a source checkout
    __version__ = ""

__all__ = [
    "GroguCompressor",
    "GroguRetriever",
    "InfluenceCallbackHandler",
    "CallableSink",
    "JSONLSink",
    "ListSink",
    "LoggerSink",
    "METADATA_KEY",
    "RELEVANCE_KEY",
    "EVENT_NAME",
    "template_from_langchain",
    "__version__",
]
