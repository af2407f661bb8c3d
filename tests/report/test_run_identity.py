"""Runs are kept apart: inputs of different runs are refused or compared, the same run given twice is read once."""

from __future__ import annotations

import os
import socket

import pytest

from tests.report.test_level1_summary import _level1_log
from xladev.events import bus
from xladev.report import load
from xladev.report.markup import _md_escape
from xladev.report.run_identity import DifferentRunsError
from xladev.schema import records as rec


def _event_log(path, pid: int, started: float, compiles: int = 3, steps: int = 12, host: str | None = None) -> str:
    lines = [rec.Header(host=host or socket.gethostname(), pid=pid, start_unix=started)]
    for step in range(steps):
        if step < compiles:
            lines.append(rec.Compile(step * 10, step, hash=f"g{step}", nodes=5, compile_ns=1000, site="train.py:9"))
        lines.append(rec.Execute(step * 10 + 1, step, hash="g0", execute_ns=100))
        lines.append(rec.Step(step * 10 + 2, step, interval_ns=10))
    lines.append(rec.End(steps * 10, steps=steps))
    path.write_text("\n".join(rec.dumps(r) for r in lines) + "\n")
    return str(path)


def test_inputs_of_different_runs_are_refused_with_both_named(tmp_path):
    a = _event_log(tmp_path / "a.jsonl", pid=11, started=1_700_000_000)
    b = _event_log(tmp_path / "b.jsonl", pid=12, started=1_700_000_100)
    with pytest.raises(DifferentRunsError) as caught:
        load([a, b])
    message = str(caught.value)
    assert "a.jsonl and" in message and "b.jsonl" in message and "pid 11" in message and "pid 12" in message
    assert "\n" not in message


def test_the_same_event_log_twice_and_a_second_log_of_one_run_are_read_once(tmp_path):
    a = _event_log(tmp_path / "a.jsonl", pid=11, started=1_700_000_000)
    copy = _event_log(tmp_path / "copy.jsonl", pid=11, started=1_700_000_000)
    once = load(a)
    for inputs in ([a, a], [a, copy]):
        report = load(inputs)
        assert len(report.sources) == 1
        assert report.final_numbers(report.sources[0])["compiles"] == once.final_numbers(once.sources[0])["compiles"]
        assert any("read once" in w.message for w in report.warnings)


def test_a_debug_log_of_the_event_logs_run_is_counted_once(tmp_path):
    debug = _level1_log(tmp_path, steps=12, reads_per_step=1)  # this process's run: the sink states it
    log = _event_log(tmp_path / "run.jsonl", pid=os.getpid(), started=bus.started_unix)
    report = load([log, debug])
    assert [s.run_id for s in report.sources] == [report.sources[0].run_id] * 2
    assert report.sources[1].debug is None
    assert any("counted once" in w.message for w in report.warnings)
    # Described as what it is, not as an input with no record.
    assert report.sources[1].describe_kinds() == [
        f"PT_XLA_DEBUG log of the same run as {report.sources[0].name}: counted once, from there"]
    # A log of another run with the same debug output is refused.
    other = _event_log(tmp_path / "other.jsonl", pid=os.getpid() + 1, started=bus.started_unix)
    with pytest.raises(DifferentRunsError):
        load([other, debug])


def test_the_cli_compares_two_event_logs_of_different_runs(tmp_path, capsys):
    from xladev.cli.main import main

    a = _event_log(tmp_path / "a.jsonl", pid=11, started=1_700_000_000, compiles=2)
    b = _event_log(tmp_path / "b.jsonl", pid=12, started=1_700_000_100, compiles=12)
    assert main(["report", a, b, "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "a.jsonl vs b.jsonl" in out and "compiles per step" in out
    c = _event_log(tmp_path / "c.jsonl", pid=13, started=1_700_000_200)
    assert main(["report", a, b, c]) == 2
    assert "different runs" in capsys.readouterr().err


def test_markdown_keeps_code_spans_as_written():
    assert _md_escape("x < y and `a<b | c`") == "x &lt; y and `a<b \\| c`"
