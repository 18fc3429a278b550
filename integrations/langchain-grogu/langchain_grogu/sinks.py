"""Where influence records go: a logger, a JSONL file, an in-memory list, or any callable.

The sinks are grogu's own (:mod:`grogu.observe.sinks`, shared with the LlamaIndex integration). A sink spec given
as a plain value becomes one of them: a ``logging.Logger`` a :class:`LoggerSink`, a path a
:class:`JSONLSink`, a list a :class:`ListSink`, a callable a :class:`CallableSink`. By default records
are logged on ``langchain_grogu.influence``.
"""

from __future__ import annotations

from grogu.observe.sinks import CallableSink, JSONLSink, ListSink, LoggerSink

#: The logger that receives each record when no sink is given.
DEFAULT_LOGGER = "langchain_grogu.influence"

__all__ = ["CallableSink", "JSONLSink", "ListSink", "LoggerSink"]
