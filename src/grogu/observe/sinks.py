"""Where per-query records (e.g. influence scores) go: a logger, a JSONL file, a list, or a callable.

Shared by the LlamaIndex and LangChain integrations. Every sink takes one JSON-ready dict per call,
as ``sink(record)`` or ``sink.write(record)``; :func:`as_sink` turns what a user passes into one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]

#: the logger of a logger sink given no logger: this module's, under ``grogu`` as every grogu logger is
DEFAULT_LOGGER = __name__


def to_json(record: Record) -> str:
    """One line of JSON; values JSON cannot hold (e.g. datetimes in metadata) are written with str()."""
    return json.dumps(record, ensure_ascii=False, default=str)


class Sink:
    """Base class: ``write(record)``; calling the sink is the same."""

    def write(self, record: Record) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, record: Record) -> None:
        self.write(record)


class JSONLSink(Sink):
    """Appends each record as one JSON line to ``path`` (its folder is created when absent).
    Safe to share between threads; the file is opened per record, so it can be rotated or tailed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._lock = threading.Lock()

    def write(self, record: Record) -> None:
        line = to_json(record) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)

    def __repr__(self) -> str:
        return f"JSONLSink({self.path!r})"


class LoggerSink(Sink):
    """Logs each record as JSON at ``level`` (default INFO) on ``logger`` (a Logger or a logger name)."""

    def __init__(self, logger: logging.Logger | str = DEFAULT_LOGGER, level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def write(self, record: Record) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, "grogu influence %s", to_json(record))

    def __repr__(self) -> str:
        return f"LoggerSink({self.logger.name!r})"


class ListSink(Sink):
    """Appends each record to ``records`` (pass your own list to share it)."""

    def __init__(self, records: list[Record] | None = None) -> None:
        self.records = records if records is not None else []

    def write(self, record: Record) -> None:
        self.records.append(record)

    def __repr__(self) -> str:
        return f"ListSink({len(self.records)} records)"


class CallableSink(Sink):
    """Calls ``fn(record)`` for each record."""

    def __init__(self, fn: Callable[[Record], Any]) -> None:
        self.fn = fn

    def write(self, record: Record) -> None:
        self.fn(record)

    def __repr__(self) -> str:
        return f"CallableSink({self.fn!r})"


def as_sink(spec: Any, default_logger: logging.Logger | str = DEFAULT_LOGGER) -> Any:
    """A sink from: None (log on ``default_logger``), a :class:`logging.Logger`, a path (str or
    PathLike; JSONL), a list (records appended), an object with ``write(record)`` (used as is), or any
    callable taking the record. The result has ``write(record)`` and can be called."""
    if spec is None:
        return LoggerSink(default_logger)
    if isinstance(spec, logging.Logger):
        return LoggerSink(spec)
    if isinstance(spec, (str, os.PathLike)):
        return JSONLSink(spec)
    if isinstance(spec, list):
        return ListSink(spec)
    if callable(getattr(spec, "write", None)):
        return spec
    if callable(spec):
        return CallableSink(spec)
    raise TypeError(
        f"sink must be None (logger), a logging.Logger, a JSONL file path, a list, an object with write(record) "
        f"or a callable taking the record dict; cannot use a {type(spec).__name__} as an influence sink"
    )


def as_sinks(specs: Any, default_logger: logging.Logger | str = DEFAULT_LOGGER) -> list[Any]:
    """Sinks from a list or tuple of sink specs (see :func:`as_sink`), or from one spec that is not a
    list. An in-memory list sink is given inside the list: ``sinks=[records]``. None gives one logger
    sink on ``default_logger``; ``[]`` gives none."""
    if specs is None:
        return [LoggerSink(default_logger)]
    if isinstance(specs, (list, tuple)):
        return [as_sink(s, default_logger) for s in specs]
    return [as_sink(specs, default_logger)]
