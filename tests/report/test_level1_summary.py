"""A PT_XLA_DEBUG_LEVEL=1 log alone: its end-of-run summary gives the steps and the user's lines, and a
log without any step count is judged "unknown", never healthy."""

from __future__ import annotations

from xladev.events import Cause, CauseKind, Frame, Compile, Step, TransferFromDevice
from xladev.report import load
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput

USER = Frame("train", "/home/user/train.py", 25)


def _level1_log(tmp_path, steps: int, reads_per_step: int) -> str:
    """The real analysis sink's level-1 output (compile blocks and the end-of-run summary) of a run."""
    path = tmp_path / "debug.txt"
    sink = AnalysisSink(1, DebugOutput(str(path)))
    cause = Cause(CauseKind.USER_MARK_STEP)
    sink.on_event(Compile(1, 0, "ab" * 16, 10, 2, 1, 5_000_000, {}, cause, (USER,), None))
    for step in range(steps):
        for _ in range(reads_per_step):
            sink.on_event(TransferFromDevice(2, step, 4, 1000, ".item()", (USER,)))
        sink.on_event(Step(3, step, cause, 100, (USER,)))
    sink.out.write(sink.summary_text())
    return str(path)


def test_level1_summary_names_the_transfer_line(tmp_path):
    report = load(_level1_log(tmp_path, steps=12, reads_per_step=1))
    findings = {f.rule: f for f in report.findings}
    assert report.verdict() == "warning" and "healthy" not in findings
    transfers = findings["host-transfers"]
    assert any(".item() at train.py:25 (train): 12 transfers" in line for line in transfers.evidence)
    assert transfers.numbers["steps"] == 12


def test_level1_summary_of_a_clean_run_is_healthy(tmp_path):
    report = load(_level1_log(tmp_path, steps=12, reads_per_step=0))
    assert report.verdict() == "healthy"


def test_no_step_count_is_unknown_not_healthy(tmp_path):
    text = open(_level1_log(tmp_path, steps=12, reads_per_step=0)).read()
    cut = tmp_path / "blocks_only.txt"
    cut.write_text("".join(line for line in text.splitlines(keepends=True) if "xladev summary" not in line))
    report = load(str(cut))
    # xladev writes the summary at every exit it lives to see: a log of its blocks without one is a run that did
    # not finish (killed, or still running), never a healthy one.
    assert report.verdict() == "error"
    assert [f.rule for f in report.findings] == ["unfinished-run"]
    assert "no end record" in report.findings[0].title


def test_advice_uses_the_runs_own_api_names(tmp_path, monkeypatch):
    from tests.report.helpers import fixture_path
    from xladev.events import bus

    # The log is an xladev script's: the process-wide API may have been set to torch_xla by an earlier test of
    # this worker that imported the alias or ran `xladev run` in-process.
    monkeypatch.setattr(bus, "api", "xladev")

    ours = {f.rule: f for f in load(_level1_log(tmp_path, steps=12, reads_per_step=1)).findings}["host-transfers"]
    assert "xladev.add_step_closure(" in ours.fix and "xm." not in ours.fix
    theirs = {f.rule: f for f in load(str(fixture_path("item_every_step.metrics.txt"))).findings}["host-transfers"]
    assert "xm.add_step_closure(" in theirs.fix and "xladev." not in theirs.fix


def test_level1_summary_carries_where_the_time_went(tmp_path):
    report = load(_level1_log(tmp_path, steps=12, reads_per_step=1))
    breakdown = report.time_breakdowns[None]
    assert breakdown.parts["compile"] == 5_000_000 and breakdown.parts["from_device"] == 12 * 1000
    assert "end-of-run summary" in breakdown.basis and not breakdown.exact
