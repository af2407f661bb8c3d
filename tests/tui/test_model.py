"""The TUI's state model and sources on the fixed fixture log (no Textual involved)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.tui.helpers import FIXTURE, dead_pid, fixture_lines
from tests.tui.logs import LogBuilder, graph_hash
from xladev.schema import records as rec
from xladev.schema.records import NotAnEventLog
from xladev.schema.log_header import read_header
from xladev.schema.sites import short_site
from xladev.schema.units import TIME
from xladev_tui import run_model as m
from xladev_tui.run_model import RunModel, model_from_lines
from xladev_tui.sources import ChildProcessSource, FileTailSource, FixtureSource


@pytest.fixture(scope="module")
def snap():
    return model_from_lines(fixture_lines(), "fixture").snapshot()


def test_steps_and_step_times(snap):
    assert snap.steps == 12
    assert snap.last_step == 11
    assert len(snap.step_times) == 12
    assert snap.step_times[0] == 405_000_000 and snap.step_times[5] == 305_000_000
    assert snap.state == m.FINISHED and snap.state_text == "finished"
    assert snap.command == "python train.py --steps 12" and snap.pid == 4242
    assert snap.device.startswith("CPU")


def test_compiles_grouped_by_site(snap):
    assert snap.compiles == 2
    assert snap.compile_ns == 700_000_000
    (site,) = snap.sites
    assert site.site == "/home/user/train.py:30 (train)"
    assert (site.compiles, site.graphs, site.first_step, site.last_step, site.alerts) == (2, 2, 0, 5, 1)
    assert short_site(site.site) == "train.py:30 (train)"


def test_recompile_alert_names_the_change_and_cause(snap):
    (alert,) = snap.alerts
    assert alert.step == 5
    assert alert.previous_hash.startswith("a1b2c3") and alert.graph_hash.startswith("0f1e2d")
    assert alert.cause == "user mark_step"
    assert alert.text() == ("step 5 train.py:30 (train): recompiled, input 3, created at train@train.py:24: "
                            "shape f32[8,16] -> f32[12,16] (dim 0: 8 -> 12)")


def test_transfer_hot_spots_and_fallbacks(snap):
    (spot,) = snap.hot_spots
    assert (spot.kind, short_site(spot.site), spot.count, spot.nbytes) == (".item()", "train.py:31 (train)", 12, 48)
    assert spot.per_step == 1.0 and spot.last_step == 12
    (fallback,) = snap.fallbacks
    assert (fallback.op, fallback.count, fallback.per_step) == ("aten::nonzero", 6, 0.5)


def test_graphs_by_hash_with_ir_memory_and_steps(snap):
    first, second = snap.graphs
    assert first.graph_hash.startswith("a1b2") and first.steps == "0–4" and first.executions == 5
    assert second.steps == "5–11" and second.executions == 7 and second.compiled_step == 5
    assert "f32[12,16]" in second.ir and "aten::mm" in second.ir
    assert dict(second.memory)["argument"] == 12 * 64 + 256
    assert second.recompile is not None and second.recompile.step == 5
    assert first.compile_ns == 400_000_000


def test_counters_and_metrics(snap):
    rows = {row.name: row for row in snap.counters}
    assert rows["MarkStep"].count == 12
    assert rows["UncachedCompile"].count == 2 and rows["CachedCompile"].count == 10
    assert rows["xla::mm"].count == 36 and rows["xla::mm"].per_step == 3.0
    assert rows["aten::nonzero"].count == 6
    assert rows["aten::_local_scalar_dense"].count == 12
    assert rows["CompileTime"].kind == TIME and rows["CompileTime"].total == 700_000_000
    assert rows["CompileTime"].mean == 350_000_000
    assert rows["InboundData"].total == 48


def test_bad_and_unknown_lines_do_not_break_the_model():
    lines = fixture_lines()
    lines.insert(3, "not json at all")
    lines.insert(4, json.dumps({"type": "from_the_future", "t": 1}))
    lines.insert(5, json.dumps({"type": "compile"}))  # no hash: counted as bad, not a crash
    model = model_from_lines(lines)
    snap = model.snapshot()
    assert snap.steps == 12 and snap.bad_lines == 2 and snap.compiles == 2


def test_exited_state_from_a_child_source():
    model = RunModel()
    model.apply_all(FixtureSource(fixture_lines()[:-1], final=(m.EXITED, "python train.py exited with code 3", 3))
                    .read(0))
    snap = model.snapshot()
    assert snap.state == m.EXITED and snap.state_text == "exited with code 3" and snap.exit_code == 3
    model.apply((m.STATUS, m.RUNNING, "", None))  # late news never hides how it ended
    assert model.snapshot().state == m.EXITED


def test_file_tail_follows_growth_and_reports_disconnect_with_truncated_last_line(tmp_path):
    lines = fixture_lines()
    header = json.loads(lines[0])
    header["pid"] = dead_pid()
    header["host"] = None
    path = tmp_path / "run.events.jsonl"
    path.write_text("")
    source = FileTailSource(str(path), idle_before_check=0.0)
    source.start()
    model = RunModel(str(path))
    model.apply_all(source.read(0.01))
    assert model.state == m.WAITING
    with open(path, "a") as fh:
        fh.write(json.dumps(header) + "\n" + "\n".join(lines[1:30]) + "\n")
    model.apply_all(source.read(0.01))
    assert model.state == m.RUNNING and model.records == 30
    steps_before = model.steps
    with open(path, "a") as fh:
        fh.write("\n".join(lines[30:40]) + "\n" + lines[40][: len(lines[40]) // 2])  # killed mid-line
    for _ in range(5):
        model.apply_all(source.read(0.01))
    snap = model.snapshot()
    assert snap.state == m.DISCONNECTED and "no end record" in model.state_detail
    assert snap.truncated and snap.records == 40 and snap.steps >= steps_before
    assert any("incomplete" in line for line in snap.log)


def test_file_tail_waits_for_a_missing_file_then_follows_it(tmp_path):
    path = tmp_path / "later.jsonl"
    source = FileTailSource(str(path))
    source.start()
    model = RunModel(str(path))
    model.apply_all(source.read(0.01))
    assert model.state == m.WAITING and f"waiting for {path} to appear" in model.state_detail
    path.write_text("\n".join(fixture_lines()) + "\n")
    model.apply_all(source.read(0.05))
    assert model.snapshot().state == m.FINISHED and model.steps == 12


def test_a_file_that_is_not_an_event_log_is_an_error(tmp_path):
    path = tmp_path / "metrics.txt"
    path.write_text("Metric: CompileTime\n  TotalSamples: 2\n")
    with pytest.raises(NotAnEventLog, match="not an xladev event log"):
        read_header(str(path))
    source = FileTailSource(str(path))
    source.start()
    model = RunModel()
    model.apply_all(source.read(0.01))
    assert model.state == m.ERROR and "not an xladev event log" in model.state_detail
    assert read_header(FIXTURE).pid == 4242


def test_child_source_captures_output_and_exit_code(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('working', flush=True)\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    source = ChildProcessSource(["python", str(script)], log_path=str(tmp_path / "log.jsonl"))
    source.start()
    model = RunModel(source.label)
    for _ in range(500):
        model.apply_all(source.read(0.05))
        if model.state == m.EXITED:
            break
    snap = model.snapshot()
    assert snap.state_text == "exited with code 3"
    assert "working" in snap.log and "[stderr] boom" in snap.log
    source.stop()


def test_tui_package_never_imports_the_runtime():
    # The real installed package, in a fresh interpreter: neither torch, jax, nor any runtime module.
    code = ("import sys, xladev_tui.app, xladev_tui.run_model, xladev_tui.sources; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'jax', 'jaxlib') "
            "or m.startswith(('xladev.runtime', 'xladev.sinks'))]; print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_run_ended_by_sigterm_says_so():
    log = LogBuilder()
    log.step(0, graph_hash(0), 10)
    log.add(rec.End(reason="terminated", steps=1, signal="SIGTERM"))
    model = model_from_lines(log.lines(), "fixture")
    assert model.snapshot().state == m.FINISHED
    assert model.state_detail == "the log ended (terminated by SIGTERM) after 1 steps"
