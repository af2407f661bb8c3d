"""An output that cannot be written (a full disk, a missing folder) is one line on stderr, and the run goes on.

Each of XLA_METRICS_FILE, XLA_SAVE_TENSORS_FILE, PT_XLA_DEBUG_FILE and XLADEV_EVENT_LOG: exactly one line
naming the variable, the file and the OS error, no traceback (at import, per step or at exit), exit status 0,
and every record written before the failure still read by `xladev report` / `xladev diff`.
"""

from __future__ import annotations

import re

from xladev.events import Bus, Step
from xladev.events import Cause, CauseKind

from tests.faults import runs

OUTPUTS = ("XLA_METRICS_FILE", "XLA_SAVE_TENSORS_FILE", "PT_XLA_DEBUG_FILE", "XLADEV_EVENT_LOG")
# Small enough that each output passes it within 30 steps (the metrics file first, after a few records).
LIMIT = 12_000


def _failure_line(lines: list[str], variable: str, path: str, error: str) -> str:
    """The one line about `variable`; asserts its wording."""
    mine = [line for line in lines if f" {variable}=" in line]
    assert len(mine) == 1, (variable, lines)
    line = mine[0]
    assert line.startswith(f"xladev: cannot write {variable}={path}"), line
    assert error in line and line.endswith("; that output is off for the rest of the run"), line
    return line


def test_a_full_disk_turns_each_output_off_with_one_line(tmp_path):
    paths = {var: str(tmp_path / name) for var, name in zip(OUTPUTS, ("m.txt", "g.txt", "d.txt", "run.jsonl"))}
    env = runs.environment(PT_XLA_DEBUG_LEVEL="2", **paths)
    done = runs.run([runs.write_script(tmp_path), "30"], env, preexec_fn=runs.file_size_limit(LIMIT))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done" in done.stdout and "step 29" in done.stdout  # training went on to the end
    runs.assert_no_traceback(done.stderr)
    lines = runs.xladev_lines(done.stderr)
    assert len(lines) == 4, done.stderr[-3000:]  # one per output, never one per step
    for variable in OUTPUTS:
        _failure_line(lines, variable, paths[variable], "[Errno 27] File too large")

    # Every output kept its complete records, and only those: the readers read them all, without a warning.
    metrics = open(paths["XLA_METRICS_FILE"]).read()
    records = metrics.count("[MetricsData; step=")
    assert records >= 1
    report = runs.xladev_command("report", paths["XLA_METRICS_FILE"])
    assert report.returncode == 0 and f"(XLA_METRICS_FILE, {records} step records)" in report.stdout, report.stdout
    assert "Parse warnings" not in report.stdout, report.stdout

    dumps = open(paths["XLA_SAVE_TENSORS_FILE"] + ".0").read()
    graphs = dumps.count("## END_GRAPH")
    assert graphs >= 1 and dumps.endswith("## END_GRAPH\n\n")
    diff = runs.xladev_command("diff", "--file", paths["XLA_SAVE_TENSORS_FILE"] + ".0")
    assert diff.returncode == 0 and f": {graphs} records" in diff.stdout, diff.stdout + diff.stderr

    debug = open(paths["PT_XLA_DEBUG_FILE"]).read()
    executions = debug.count("Execution Analysis: Execution Cause")
    assert executions >= 1 and debug.endswith("=" * 80 + "\n")  # ends with a whole block
    report = runs.xladev_command("report", paths["PT_XLA_DEBUG_FILE"])
    assert report.returncode == 0 and f"1 compile and {executions} execution analyses" in report.stdout, report.stdout

    log = runs.log_records(paths["XLADEV_EVENT_LOG"])  # every line whole, every line parses
    assert log[0]["type"] == "header" and sum(r["type"] == "step" for r in log) >= 1
    report = runs.xladev_command("report", paths["XLADEV_EVENT_LOG"])
    assert report.returncode == 0 and "no end record" in report.stdout, report.stdout


def test_a_disk_full_from_the_first_write(tmp_path):
    # The event log's header, written at import, is cut short by the limit (a short write, then EFBIG), and the
    # metrics file already fills its share: one line each, and no cut header left behind.
    log, metrics = tmp_path / "run.jsonl", tmp_path / "m.txt"
    earlier = b"[MetricsData; step=0]\nCounter: MarkStep\n  Value: 1\n"  # a previous run's record, kept as is
    metrics.write_bytes(earlier)
    env = runs.environment(XLADEV_EVENT_LOG=str(log), XLA_METRICS_FILE=str(metrics))
    done = runs.run([runs.write_script(tmp_path), "3"], env, preexec_fn=runs.file_size_limit(len(earlier)))
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
    runs.assert_no_traceback(done.stderr)
    lines = runs.xladev_lines(done.stderr)
    assert len(lines) == 2, done.stderr[-3000:]
    _failure_line(lines, "XLADEV_EVENT_LOG", str(log), "[Errno 27] File too large")
    _failure_line(lines, "XLA_METRICS_FILE", str(metrics), "[Errno 27] File too large")
    assert log.read_bytes() == b"" and metrics.read_bytes() == earlier


def test_an_output_that_cannot_be_opened_at_start_is_one_line_and_the_run_goes_on(tmp_path):
    not_a_folder = tmp_path / "plain-file"
    not_a_folder.write_text("")
    paths = {"XLA_METRICS_FILE": str(tmp_path / "missing" / "m.txt"),
             "XLA_SAVE_TENSORS_FILE": str(not_a_folder / "g.txt"),
             "PT_XLA_DEBUG_FILE": str(tmp_path / "missing" / "d.txt"),
             "XLADEV_EVENT_LOG": str(not_a_folder / "run.jsonl")}
    done = runs.run([runs.write_script(tmp_path), "3"], runs.environment(PT_XLA_DEBUG_LEVEL="1", **paths))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done" in done.stdout
    runs.assert_no_traceback(done.stderr)
    lines = runs.xladev_lines(done.stderr)
    assert len(lines) == 4, done.stderr[-3000:]
    _failure_line(lines, "XLA_METRICS_FILE", paths["XLA_METRICS_FILE"], "[Errno 2] No such file or directory")
    line = _failure_line(lines, "XLA_SAVE_TENSORS_FILE", paths["XLA_SAVE_TENSORS_FILE"], "[Errno 20] Not a directory")
    assert f"(file {paths['XLA_SAVE_TENSORS_FILE']}.0)" in line  # the rank's file that was tried
    _failure_line(lines, "PT_XLA_DEBUG_FILE", paths["PT_XLA_DEBUG_FILE"], "[Errno 2] No such file or directory")
    _failure_line(lines, "XLADEV_EVENT_LOG", paths["XLADEV_EVENT_LOG"], "[Errno 20] Not a directory")
    assert "Compilation Analysis" not in done.stderr  # off means off: not moved to stderr instead


def test_a_failing_handler_is_told_once_not_per_event(capsys):
    bus = Bus()  # a bus of its own: the runtime's subscribers are not this test's
    calls = []

    def broken(event):
        calls.append(event)
        raise OSError(28, "No space left on device")

    bus.subscribe(broken)
    event = Step(0, 0, Cause(CauseKind.USER_MARK_STEP), 0, None)
    for _ in range(3):
        bus.emit(event)
    assert len(calls) == 3  # the handler is kept
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and re.match(r"xladev: event handler .*broken failed: OSError\(28", err), err
