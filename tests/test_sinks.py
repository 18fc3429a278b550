"""grogu.observe.sinks: the record sinks shared by the LlamaIndex and LangChain integrations."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest

from grogu.observe.sinks import CallableSink, JSONLSink, ListSink, LoggerSink, as_sink, as_sinks


def test_jsonl_sink_appends_lines_and_creates_the_folder(tmp_path):
    path = tmp_path / "logs" / "influence.jsonl"
    sink = as_sink(path)
    assert isinstance(sink, JSONLSink)
    sink({"q": "a", "when": dt.date(2026, 1, 2)})  # called ...
    sink.write({"q": "b", "scores": [0.5, -0.25]})  # ... or written
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"q": "a", "when": "2026-01-02"},
        {"q": "b", "scores": [0.5, -0.25]},
    ]


def test_list_logger_and_callable_sinks(caplog):
    records: list = []
    got: list = []
    log = logging.getLogger("test.grogu.sinks")
    sinks = as_sinks([records, log, got.append])
    assert [type(s) for s in sinks] == [ListSink, LoggerSink, CallableSink]
    with caplog.at_level(logging.INFO, logger="test.grogu.sinks"):
        for s in sinks:
            s.write({"n": 1})
    assert records == [{"n": 1}] and got == [{"n": 1}]
    (entry,) = [r for r in caplog.records if r.name == "test.grogu.sinks"]
    assert json.loads(entry.getMessage().split(" ", 2)[2]) == {"n": 1}


def test_defaults_and_objects_with_write():
    (default,) = as_sinks(None, "my.logger")
    assert isinstance(default, LoggerSink) and default.logger.name == "my.logger"
    assert as_sinks([]) == []

    class Mine:
        def write(self, record):
            pass

    mine = Mine()
    assert as_sink(mine) is mine
    with pytest.raises(TypeError, match="sink must be"):
        as_sink(42)
