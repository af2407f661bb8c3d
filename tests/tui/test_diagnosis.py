"""The TUI's findings and time breakdown are the report's, from the same rules; compiles in progress.

No Textual here: the model (`tui.run_model`, `tui.diagnosis`) on logs written with the schema's
record types, against `xladev.report.load` of the same file.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.tui.logs import FAILED_HASH, SITE, LogBuilder, graph_hash, long_run
from xladev.report import load
from xladev.schema import records as rec
from xladev_tui import run_model as m
from xladev_tui.run_model import RunModel, model_from_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _report_view(report):
    return ([(f.rule, f.severity, f.title, f.fix, f.cost_text(), tuple(f.evidence)) for f in report.findings],
            report.verdict())


def _model_view(diagnosis):
    return ([(f.rule, f.severity, f.title, f.fix, f.cost, f.evidence) for f in diagnosis.findings], diagnosis.verdict)


@pytest.fixture(scope="module")
def long_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "long.events.jsonl"
    return long_run().write(path)


def test_findings_and_verdict_are_the_reports(long_log):
    with open(long_log) as fh:
        diagnosis = model_from_lines(fh.read().splitlines(), long_log).snapshot().diagnosis
    report = load(long_log)
    assert _model_view(diagnosis) == _report_view(report)
    assert diagnosis.verdict == "error" and diagnosis.note == ""
    assert [f.rule for f in diagnosis.findings][:2] == ["out-of-memory", "recompilation"]  # a compile out of memory
    assert diagnosis.records == len(long_run().records)


def test_time_breakdown_is_the_reports_with_the_last_step(long_log):
    with open(long_log) as fh:
        view = model_from_lines(fh.read().splitlines()).snapshot().diagnosis.time
    breakdown = load(long_log).time_breakdowns[None]
    assert view.headline == breakdown.headline()
    assert [(r.part, r.total_ns, r.share, r.per_step_ns) for r in view.rows[:-1]] == \
        [(part, total, share, per_step) for part, _, total, share, per_step in breakdown.rows()]
    rows = {row.part: row for row in view.rows}
    last = breakdown.step_times[-1]
    assert view.last_step == 23 == last.step and view.steps == 24
    assert rows["execute"].last_step_ns == 25_000_000 and rows["compile"].last_step_ns == 0
    assert rows["wall"].last_step_ns == last.wall_ns and rows["other"].last_step_ns == last.other_ns()
    assert rows["wall"].total_ns == breakdown.wall_ns and rows["compile"].share > 0.8


def test_diagnosing_while_feeding_changes_nothing_of_the_replay(long_log):
    # finish() before the first step would leave an extra row in the per-step series: diagnose
    # after every record of the first step, then now and then, and compare with a one-shot read.
    with open(long_log) as fh:
        lines = fh.read().splitlines()
    model = RunModel(long_log)
    first_step = next(i for i, line in enumerate(lines) if '"type":"step"' in line)
    for index, line in enumerate(lines):
        model.feed_line(line)
        if index <= first_step + 1 or index % 25 == 0:
            model.update_diagnosis(force=True)
    model.update_diagnosis(force=True)
    report = load(long_log)
    assert _model_view(model.snapshot().diagnosis) == _report_view(report)
    live, one_shot = model.diagnosis._source, report.sources[0]
    assert (live.snapshots, len(live.series)) == (one_shot.snapshots, len(one_shot.series)) == (24, 24)
    assert live.series.columns()["steps"] == one_shot.series.columns()["steps"]


def test_a_header_alone_is_not_diagnosed_yet():
    model = model_from_lines(LogBuilder().lines())
    diagnosis = model.snapshot().diagnosis
    assert diagnosis.verdict == "" and diagnosis.findings == () and "nothing to diagnose yet" in diagnosis.note


def test_diagnosis_is_recomputed_at_most_once_a_second_and_when_the_run_ends():
    now = [100.0]
    lines = long_run().lines()
    model = RunModel(clock=lambda: now[0])
    for line in lines[:40]:
        model.feed_line(line)
    assert model.update_diagnosis() is True  # the first time: at once
    first = model.snapshot().diagnosis
    assert model.update_diagnosis() is False  # nothing new
    for line in lines[40:100]:
        model.feed_line(line)
    now[0] += 0.5
    assert model.update_diagnosis() is False and model.snapshot().diagnosis is first  # too soon
    now[0] += 0.6
    assert model.update_diagnosis() is True and model.snapshot().diagnosis.records == 100
    for line in lines[100:]:
        model.feed_line(line)  # ends with the log's end record: finished
    assert model.state == m.FINISHED
    assert model.update_diagnosis() is True  # the end is shown at once
    assert model.snapshot().diagnosis.verdict == "error"


def test_the_live_diagnosis_needs_no_pandas_and_diagnoses_at_once():
    """The findings come from the report's rules on the run's inputs (`xladev.report.run_inputs.RunInputs`), not
    from its pandas tables: nothing is imported in the background before the first diagnosis, which is the
    report's own."""
    code = (
        "import sys\n"
        "sys.modules['pandas'] = None  # its import fails\n"
        "from tests.tui.logs import long_run\n"
        "from xladev_tui.run_model import RunModel\n"
        "lines = long_run(steps=400, end=False).lines()\n"
        "model = RunModel(clock=lambda: 0.0)\n"
        "for line in lines:\n"
        "    model.feed_line(line)\n"
        "assert model.update_diagnosis() is True\n"
        "diagnosis = model.snapshot().diagnosis\n"
        "assert diagnosis.records == len(lines) and diagnosis.findings and not diagnosis.note, diagnosis\n"
        "print(sorted(f.rule for f in diagnosis.findings))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]  # fails on an import of pandas
    rules = done.stdout.strip()
    model = RunModel(clock=lambda: 0.0)  # the same, in this process (pandas importable)
    for line in long_run(steps=400, end=False).lines():
        model.feed_line(line)
    assert model.update_diagnosis() is True and rules == str(sorted(f.rule for f in model.snapshot().diagnosis.findings))


def test_findings_point_at_their_graphs(long_log):
    with open(long_log) as fh:
        findings = {f.rule: f for f in model_from_lines(fh.read().splitlines()).snapshot().diagnosis.findings}
    assert findings["out-of-memory"].graph_hash == FAILED_HASH
    # A recompilation opens the site's latest recompiled graph, whose details say what changed.
    assert findings["recompilation"].graph_hash == graph_hash(5)
    assert findings["host-transfers"].graph_hash is None


def test_a_compile_in_progress_is_tracked_until_its_end():
    now = [10.0]
    log = LogBuilder()
    log.add(rec.CompileStart(step=0, hash="4bc441ec" * 4, nodes=47, site=SITE), 1_000_000)
    model = RunModel(clock=lambda: now[0])
    model.apply_all((m.LINE, line) for line in log.lines())
    (open_compile,) = model.snapshot().compiling
    assert open_compile.since == 10.0 and open_compile.nodes == 47
    now[0] = 22.3
    assert open_compile.text(now[0], ended=False, died=False) == \
        "compiling graph 4bc441ec (47 nodes) at conformer_encoder.py:214 (forward_with_cache) — 12.3 s"
    graph = {g.graph_hash: g for g in model.snapshot().graphs}["4bc441ec" * 4]
    assert graph.nodes == 47 and graph.compile_ns is None  # listed while it compiles
    model.feed_line(rec.dumps(rec.Compile(t=2_000_000, hash="4bc441ec" * 4, nodes=47, compile_ns=900, site=SITE)))
    assert model.snapshot().compiling == ()
    model.feed_line(rec.dumps(rec.CompileStart(t=3_000_000, hash="ab" * 16, nodes=5)))
    model.feed_line(rec.dumps(rec.CompileFailed(t=4_000_000, hash="ab" * 16, message="bad op")))
    assert model.snapshot().compiling == ()
    assert {g.graph_hash: g for g in model.snapshot().graphs}["ab" * 16].failure.startswith("failed to compile")


def test_a_replay_that_ends_inside_a_compile_says_the_process_died():
    log = LogBuilder(pid=None)
    log.add(rec.CompileStart(step=0, hash="4bc441ec" * 4, nodes=47, site=SITE), 7_300_000_000)
    model = RunModel()
    model.apply_all([(m.LINE, line) for line in log.lines()] + [(m.STATUS, m.DISCONNECTED, "the writer is gone", None)])
    snap = model.snapshot()
    (open_compile,) = snap.compiling
    assert snap.ended and snap.died
    assert open_compile.text(0.0, snap.ended, snap.died) == (
        "graph 4bc441ec (47 nodes) at conformer_encoder.py:214 (forward_with_cache) never finished compiling: "
        "the process died while compiling it (it started 7.3 s into the run)")


def test_the_model_needs_no_textual(long_log):
    code = ("import sys, xladev_tui.run_model, xladev_tui.live_findings, xladev_tui.run_view, xladev_tui.sources; "
            "m = xladev_tui.run_model.model_from_lines(open(sys.argv[1]).read().splitlines()); "
            "assert m.snapshot().diagnosis.findings; "
            "sys.exit(1 if 'textual' in sys.modules else 0)")
    result = subprocess.run([sys.executable, "-c", code, long_log], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_torch_compile_graph_breaks_and_recompiles_are_findings_as_in_the_report(tmp_path):
    log = LogBuilder()
    log.compile(0, graph_hash(0), 40, 8, 500_000_000)
    log.step(0, graph_hash(0), 40)
    log.add(rec.GraphBreak(step=1, by="dynamo", reason="Failed to trace builtin operator: print", site=SITE), 1_000_000)
    log.add(rec.DynamoRecompile(step=1, function="forward", guard="tensor 'x' size mismatch at index 0. expected 8, "
                                "actual 9", compiles=2, site=SITE), 1_000_000)
    path = log.write(tmp_path / "compiled.events.jsonl")
    with open(path) as fh:
        diagnosis = model_from_lines(fh.read().splitlines(), path).snapshot().diagnosis
    assert _model_view(diagnosis) == _report_view(load(path))
    rules = {f.rule: f for f in diagnosis.findings}
    assert "print" in rules["graph-breaks"].evidence[0] and "expected 8" in rules["dynamo-recompiles"].evidence[0]


def test_a_log_that_stopped_says_the_run_did_not_finish_once_it_will_not_grow(tmp_path):
    path = long_run(steps=6, end=False).write(tmp_path / "killed.events.jsonl")
    lines = open(path).read().splitlines()
    live = RunModel(path)
    for line in lines:
        live.feed_line(line)
    live.update_diagnosis(force=True)
    # Still being written, as far as the TUI knows: a log without an end record is a run in progress.
    assert "unfinished-run" not in [f.rule for f in live.snapshot().diagnosis.findings]
    live.set_state(m.DISCONNECTED, "the log has no end record")  # its writer is gone
    live.update_diagnosis()
    first = live.snapshot().diagnosis.findings[0]
    assert first.rule == "unfinished-run" and "no end record" in first.title
    # The same as the report of the whole file.
    assert _model_view(model_from_lines(lines, path).snapshot().diagnosis) == _report_view(load(path))
