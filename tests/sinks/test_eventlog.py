"""The JSONL event log on real training: records, IR once per graph, SIGKILL safety, ranks, the report reader."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.nn as nn

import xladev
from xladev.events import bus
from xladev.debug import event_log
from xladev.sinks import eventlog_writer as eventlog
from tests.source_lines import line_of

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def _records(path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh]


def _train(steps: int, widths, dev) -> None:
    """A small MLP; the batch has widths[step] rows (a change recompiles the step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(7, 13), nn.ReLU(), nn.Linear(13, 3)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = torch.randn(widths[step], 7).to(dev)
        y = torch.randn(widths[step], 3).to(dev)
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        xladev.mark_step()
        loss.item()  # EVENTLOG_ITEM_LINE


@pytest.fixture(scope="module")
def training_log(tmp_path_factory):
    """One real training (6 steps, the batch grows from 5 to 9 rows at step 3) with the log on."""
    path = str(tmp_path_factory.mktemp("eventlog") / "run.events.jsonl")
    xladev.mark_step()
    written = event_log.start(path)
    assert written == path and event_log.path() == path
    try:
        _train(6, [5, 5, 5, 9, 9, 9], xladev.device())
    finally:
        assert event_log.stop() == path
    assert event_log.path() is None
    return path


def test_header_names_the_run(training_log):
    header = _records(training_log)[0]
    assert header["type"] == "header" and header["schema"] == "xladev.events/1" and header["version"] == 1
    assert header["pid"] == os.getpid()
    assert header["versions"]["torch"] == torch.__version__ and header["versions"]["xladev"] == xladev.__version__
    assert "jax" in header["versions"]
    assert header["device"].startswith("CPU")
    # The run's start (the bus's, shared by every output of the run), not the log's: however long the suite ran.
    assert header["start_unix"] == pytest.approx(bus.started_unix) and header["start_unix"] <= time.time()
    assert header["argv"] == sys.argv and header["command"].endswith(" ".join(sys.argv))


def test_every_event_kind_is_recorded(training_log):
    records = _records(training_log)
    kinds = {r["type"] for r in records}
    assert {"header", "ops", "graph", "compile", "execute", "transfer", "step", "end"} <= kinds
    steps = [r for r in records if r["type"] == "step"]
    assert len(steps) == 6 and [s["step"] for s in steps] == sorted(s["step"] for s in steps)
    assert all(s["interval_ns"] > 0 and s["duration_ns"] > 0 for s in steps)
    assert records[-1] == {**records[-1], "type": "end", "reason": "stop", "steps": 6}
    ops = [r for r in records if r["type"] == "ops" and r["counts"]]  # not the records of tensor counts alone
    assert ops and all(r["counts"].get("aten::addmm", 0) >= 1 for r in ops[-3:])
    reads = [r for r in records if r["type"] == "transfer" and r["dir"] == "from_device"]
    assert len(reads) == 6
    assert all(r["kind"] == ".item()" and r["bytes"] == 4 for r in reads)
    line = line_of(HERE, "EVENTLOG_ITEM_LINE")
    assert all(r["site"] == f"{HERE}:{line} (_train)" and r["frame"] == {"file": HERE, "line": line, "name": "_train"}
               for r in reads)
    uploads = [r for r in records if r["type"] == "transfer" and r["dir"] == "to_device"]
    assert any(r["bytes"] == 9 * 7 * 4 for r in uploads)
    executes = [r for r in records if r["type"] == "execute"]
    assert all(e["cause"]["kind"] == "USER_MARK_STEP" and e["cause"]["text"] == "user torch_xla.sync" for e in executes)


def test_recompile_record_says_what_changed(training_log):
    compiles = [r for r in _records(training_log) if r["type"] == "compile"]
    steps = [c for c in compiles if c["site"] and "_train" in c["site"]]
    assert len(steps) == 2, compiles
    first, second = steps
    assert "recompile" not in first
    assert second["step"] - first["step"] == 3
    changes = second["recompile"]["changes"]
    assert second["recompile"]["previous"] == first["hash"]
    assert any("shape f32[5,7] -> f32[9,7]" in c and "dim 0: 5 -> 9" in c for c in changes), changes
    assert second["compile_ns"] > 0 and second["memory"]["argument"] > 0
    assert second["frame"]["name"] == "_train" and second["frame"]["file"] == HERE


def test_ir_is_written_once_per_graph_hash(training_log):
    records = _records(training_log)
    graphs = [r for r in records if r["type"] == "graph"]
    hashes = [g["hash"] for g in graphs]
    assert len(hashes) == len(set(hashes))
    ran = {r["hash"] for r in records if r["type"] in ("execute", "compile")}
    assert set(hashes) == ran
    assert all(g["ir"].startswith("IR {") and "aten::" in g["ir"] for g in graphs if g["nodes"] > 1)
    position = {id(r): i for i, r in enumerate(records)}
    for graph in graphs:  # the text comes before the first record that names its hash
        first_use = next(r for r in records if r.get("hash") == graph["hash"] and r["type"] != "graph")
        assert position[id(graph)] < position[id(first_use)]


def test_rank_files(monkeypatch, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert eventlog.log_path("run.jsonl") == "run.jsonl.1"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert eventlog.log_path("run.jsonl") == "run.jsonl"


def test_unwritable_path_is_a_config_error(tmp_path):
    with pytest.raises(xladev.ConfigError, match="XLADEV_EVENT_LOG"):
        event_log.start(str(tmp_path / "no" / "such" / "dir" / "log.jsonl"))


_SCRIPT = textwrap.dedent("""
    import sys, torch, torch.nn as nn
    import xladev
    dev = xladev.device()
    model = nn.Linear(6, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    while True:
        x = torch.randn(3 + (step // 4) % 2, 6).to(dev)
        opt.zero_grad(); loss = model(x).pow(2).mean(); loss.backward(); opt.step()
        xladev.mark_step()
        print("step", step, loss.item(), flush=True)
        step += 1
""")


def test_sigkill_leaves_only_complete_parseable_lines(tmp_path):
    path = tmp_path / "killed.jsonl"
    script = tmp_path / "forever.py"
    script.write_text(_SCRIPT)
    env = dict(os.environ, XLADEV_EVENT_LOG=str(path), PYTHONPATH=ROOT)
    env.pop("WORLD_SIZE", None)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=env, text=True)
    try:
        deadline = time.monotonic() + 120
        for line in process.stdout:
            if line.startswith("step 6") or time.monotonic() > deadline:
                break
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    records = [json.loads(line) for line in complete]  # every complete line parses
    assert records[0]["type"] == "header" and records[0]["pid"] == process.pid
    assert sum(r["type"] == "step" for r in records) >= 6  # flushed at least every step
    assert not any(r["type"] == "end" for r in records)
    assert b"\n" not in tail  # at most one cut line at the end (readers skip it)
    # The TUI's model and the report both read it.
    from xladev_tui.run_model import model_from_lines

    model = model_from_lines([line.decode() for line in complete])
    snap = model.snapshot()
    assert snap.steps >= 6 and snap.compiles >= 2 and snap.alerts
    from xladev.report import load

    report = load(str(path))
    assert report.sources[0].input_kind == "event-log"
    assert any("no end record" in w.message for w in report.warnings)


def test_report_reads_the_event_log(training_log, capsys):
    from xladev.cli.main import main
    from xladev.report import load

    report = load(training_log)
    source = report.sources[0]
    assert source.input_kind == "event-log" and not source.warnings
    counters = source.final.counters
    assert counters["MarkStep"] == 6 and counters["aten::_local_scalar_dense"] == 6
    assert source.final.metrics["CompileTime"].total_samples >= 2
    assert len(source.series) == 6 and source.series.last["steps"] == 6
    compiles = [e for e in source.run.compiled if e.function == "_train"]
    assert len(compiles) == 2 and compiles[1].cause == "user torch_xla.sync" and not compiles[0].changes
    assert any("shape f32[5,7] -> f32[9,7]" in change for change in compiles[1].changes)
    assert compiles[1].sizes["input_bytes"] > 0
    assert source.run.causes.by_key
    sites = report.compile_sites
    assert sites.iloc[0]["compiles"] >= 2
    assert report.findings  # the rules ran
    assert main(["report", training_log]) == 0
    out = capsys.readouterr().out
    assert "Compiles and executions by Python site" in out and "test_eventlog.py" in out
    recompile = next((f for f in report.findings if f.rule == "recompilation"), None)
    if recompile is not None:  # 6 steps may be inside the warm-up the rules allow
        assert any("f32[5,7] -> f32[9,7]" in line for line in recompile.evidence)


def test_a_long_run_of_events_writes_every_record(tmp_path):
    """2,000 steps' events, each one written. Their cost is `tools/bench/bench_eventlog_overhead.py`'s to measure: a
    wall-clock bound here failed beside two CPU burners (1.6 ms a step against 1 ms), as a timed test does."""
    from xladev.events import Cause, CauseKind, Frame, Step, TransferToDevice

    log = eventlog.EventLog(str(tmp_path / "bench.jsonl"))
    frames = (Frame("step", HERE, 10),)
    cause = Cause(CauseKind.USER_MARK_STEP)
    for step in range(2000):
        log.on_event(TransferToDevice(time.perf_counter_ns(), step, 1024, 1000))
        log.on_event(Step(time.perf_counter_ns(), step, cause, 1000, frames))
    log.close()
    records = _records(tmp_path / "bench.jsonl")
    assert len(records) == 1 + 4000 + 1
    assert [r["step"] for r in records if r["type"] == "step"] == list(range(2000))
