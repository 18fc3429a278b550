"""Where influence records go: a logger, a JSONL file, an in-memory list, or any callable.

Every sink is a callable that takes one record (a JSON-ready dict) and returns nothing.
:func:`as_sink` turns what a user passes into one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
Sink = Callable[[Record], None]


def to_json(record: Record) -> str:
    """One line of JSON; values JSON cannot hold (e.g. datetimes in metadata) are written with str()."""
    return json.dumps(record, ensure_ascii=False, default=str)


class JSONLSink:
    """Appends each record as one JSON line to ``path`` (created with its folder when absent).
    Safe to share between threads; the file is opened per record, so it can be rotated or tailed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        self._lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        line = to_json(record) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)

    def __repr__(self) -> str:
        return f"JSONLSink({self.path!r})"


class LoggerSink:
    """Logs each record as JSON at ``level`` (default INFO) on ``logger``."""

    def __init__(self, logger: logging.Logger | str = "langchain_grogu.influence", level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def __call__(self, record: Record) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, "grogu influence %s", to_json(record))

    def __repr__(self) -> str:
        return f"LoggerSink({self.logger.name!r})"


class ListSink:
    """Appends each record to a list (thread-safe by the GIL's atomic list.append)."""

    def __init__(self, records: list[Record] | None = None) -> None:
        self.records = records if records is not None else []

    def __call__(self, record: Record) -> None:
        self.records.append(record)

    def __repr__(self) -> str:
        return f"ListSink({len(self.records)} records)"


def as_sink(spec: Any) -> Sink:
    """A sink from: a :class:`logging.Logger`, a path (str or PathLike; JSONL), a list (records
    appended), or any callable taking the record."""
    if isinstance(spec, logging.Logger):
        return LoggerSink(spec)
    if isinstance(spec, (str, os.PathLike)):
        return JSONLSink(spec)
    if isinstance(spec, list):
        return ListSink(spec)
    if callable(spec):
        return spec
    raise TypeError(
        f"cannot use a {type(spec).__name__} as an influence sink: pass a logging.Logger, a JSONL file path, "
        f"a list, or a callable taking the record dict"
    )


def as_sinks(specs: Any) -> list[Sink]:
    """Sinks from a list (or tuple) of sink specs (see :func:`as_sink`), or from one spec that is not a
    list. An in-memory list sink is given inside the list: ``sinks=[records]``. None gives the
    default, logging on ``langchain_grogu.influence``; ``[]`` gives none (custom event only)."""
    if specs is None:
        return [LoggerSink()]
    if isinstance(specs, (list, tuple)):
        return [as_sink(s) for s in specs]
    return [as_sink(specs)]
