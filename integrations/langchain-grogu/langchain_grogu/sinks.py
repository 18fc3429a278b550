"""Where influence records go: a logger, a JSONL file, an in-memory list, or any callable.

The sinks are grogu's own (:mod:`grogu.sinks`, shared with the LlamaIndex integration); by default
records are logged on ``langchain_grogu.influence``.
"""

from __future__ import annotations

from typing import Any

from grogu.sinks import CallableSink, JSONLSink, ListSink, LoggerSink, Record, Sink, as_sink, to_json
from grogu.sinks import as_sinks as _as_sinks

DEFAULT_LOGGER = "langchain_grogu.influence"

__all__ = ["CallableSink", "JSONLSink", "ListSink", "LoggerSink", "Record", "Sink", "as_sink", "as_sinks", "to_json"]


def as_sinks(specs: Any) -> list[Any]:
    """Sinks from a list of sink specs (see :func:`grogu.sinks.as_sink`) or one spec; None logs on
    ``langchain_grogu.influence``; ``[]`` gives none (custom event only)."""
    return _as_sinks(specs, DEFAULT_LOGGER)
