"""Every sink shares one life cycle (`xladev.sinks._lifecycle.Sink`): start and stop are idempotent."""

from __future__ import annotations

from xladev.events import bus
from xladev.sinks._lifecycle import Sink
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput
from xladev.sinks.eventlog_writer import EventLog
from xladev.sinks.metrics_registry import MetricsSink, Registry
from xladev.sinks.save_tensors import DumpSink


def _count(sink) -> int:
    return sum(1 for sub in bus._subs if getattr(sub.handler, "__self__", None) is sink)


def test_each_sink_starts_once_and_stops(tmp_path):
    sinks = [MetricsSink(Registry()), AnalysisSink(1, DebugOutput(str(tmp_path / "debug.txt"))),
             DumpSink(str(tmp_path / "dump.txt"), "text"), EventLog(str(tmp_path / "run.jsonl"))]
    for sink in sinks:
        assert isinstance(sink, Sink) and not sink.running
        sink.start()
        sink.start()
        assert sink.running and _count(sink) == 1, type(sink).__name__
        sink.stop()
        sink.stop()
        assert not sink.running and _count(sink) == 0, type(sink).__name__
    sinks[-1].close()
