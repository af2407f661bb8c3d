"""Counters and metrics from real training on `xla`: names, counts, bytes, report text and its round trip."""

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
import xladev.debug.metrics as met
from xladev.report.inputs import read_source
from xladev.schema.units import parse_bytes, parse_time


_widths = iter(range(17, 10_000))


def _train(dev, steps, width=None):
    """Trains a small MLP; a width no other test used, so its graphs are not in the compile cache yet."""
    torch.manual_seed(0)
    width = width or next(_widths)
    model = nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 3)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x = torch.randn(8, 6).to(dev)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()
    return model


@pytest.fixture
def fresh():
    xladev.mark_step()
    met.clear_all()
    yield


def test_core_names_are_populated_by_real_training(dev, fresh):
    _train(dev, 6)
    names = set(met.metric_names())
    assert {"CompileTime", "ExecuteTime", "TransferToDeviceTime", "OutboundData", "TensorsGraphSize",
            "LazyTracing"} <= names
    counters = set(met.counter_names())
    assert {"UncachedCompile", "CachedCompile", "CreateCompileHandles", "CreateDataHandles", "MarkStep",
            "xla::addmm", "xla::mm"} <= counters
    assert met.counter_value("MarkStep") == 6
    total, accumulator, samples = met.metric_data("ExecuteTime")
    assert total == 6 and accumulator > 0 and all(v > 0 for _, v in samples)
    report = met.metrics_report()
    assert report.startswith("Metric: ")
    assert "\nCounter: MarkStep\n  Value: 6\n" in report


def test_fixed_shapes_compile_once_after_warmup(dev, fresh):
    per_step = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 1234), nn.ReLU(), nn.Linear(1234, 3)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(8):
        opt.zero_grad()
        model(torch.randn(8, 6).to(dev)).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()
        per_step.append(met.counter_value("UncachedCompile") or 0)
    # step 0 builds the momentum buffers, step 1 is the steady graph; nothing compiles after that
    assert per_step[1] == per_step[-1] and per_step[-1] <= 3
    assert met.counter_value("CachedCompile") >= 6


def test_each_distinct_shape_compiles_once(dev, fresh):
    w = torch.ones(4, 77, device=dev)
    xladev.mark_step()
    met.clear_all()
    for batch in (1, 2, 3, 1, 2, 3):
        y = (torch.ones(batch, 4).to(dev) @ w).sum()
        xladev.mark_step()
    assert met.counter_value("UncachedCompile") == 3
    assert met.counter_value("CachedCompile") == 3


def test_fallback_counters_and_executed_fallback_ops(dev, fresh):
    x = torch.randn(4, 5).to(dev)
    for _ in range(3):
        torch.unique_consecutive(x)  # data-dependent output shape: stays on the CPU
    assert met.counter_value("aten::unique_consecutive") == 3
    assert "aten::unique_consecutive" in met.executed_fallback_ops()
    assert "aten::unique_consecutive" in met.short_metrics_report()
    (x.sum()).item()
    assert met.counter_value("aten::_local_scalar_dense") == 1


def test_bytes_transferred_match_tensors_moved(dev, fresh):
    a = torch.randn(100, 10)               # 4000 bytes
    b = torch.ones(7, dtype=torch.float64)  # 56 bytes
    da, db = a.to(dev), b.to(dev)
    assert met.metric_data("OutboundData")[1] == 4056
    da.cpu()
    db.cpu()
    assert met.metric_data("InboundData")[1] == 4056
    assert met.metric_data("TransferFromDeviceTime")[0] == 2


def test_short_report_defaults(dev, fresh):
    _train(dev, 2)
    text = met.short_metrics_report()
    blocks = [line for line in text.splitlines() if not line.startswith("  ")]
    assert blocks[0].startswith("Metric: CompileTime")
    assert "Counter: MarkStep" in blocks
    assert not any("LazyTracing" in b for b in blocks)
    only = met.short_metrics_report(counter_names=["MarkStep"], metric_names=["ExecuteTime"])
    assert [l for l in only.splitlines() if not l.startswith("  ")] == ["Metric: ExecuteTime", "Counter: MarkStep"]


def test_report_round_trips_through_the_report_parser(dev, fresh, tmp_path):
    _train(dev, 4)
    torch.median(torch.randn(3, 3).to(dev), dim=0)
    snap = met.snapshot()
    path = tmp_path / "report.txt"
    path.write_text(snap.report())
    parsed = read_source(str(path))
    assert not parsed.warnings, parsed.warnings
    final = parsed.final
    assert final.counters == snap.counters
    assert set(final.metrics) == set(snap.metrics)
    for name, block in final.metrics.items():
        mine = snap.metrics[name]
        assert block.total_samples == mine["total_samples"]
        if mine["kind"] == "time":
            assert block.accumulator == pytest.approx(mine["accumulator"], abs=0.5)   # printed to the ns
        elif mine["kind"] == "bytes":
            assert block.accumulator == pytest.approx(mine["accumulator"], rel=0.005)
        else:
            assert block.accumulator == pytest.approx(mine["accumulator"], abs=0.005)
        assert len(block.percentiles) == 9


def test_snapshot_json_round_trip_diff_and_dataframe(dev, fresh):
    before = met.snapshot()
    _train(dev, 3)
    after = met.snapshot()
    again = met.Snapshot.from_json(json.loads(json.dumps(after.to_json())))
    assert again == after
    delta = met.diff(before, after)
    assert delta.counters["MarkStep"] == 3
    assert delta.metrics["ExecuteTime"]["total_samples"] == 3
    frame = met.to_dataframe(after)
    row = frame[frame.name == "ExecuteTime"].iloc[0]
    assert row["type"] == "metric" and row["total_samples"] == 3 and row["p50"] > 0
    with pytest.raises(ValueError, match="not an xladev metrics snapshot"):
        met.Snapshot.from_json({"schema": "other"})


def test_clear(dev, fresh):
    _train(dev, 1)
    met.clear_counters()
    assert met.counter_names() == []
    assert met.metric_names()
    met.clear_all()
    assert met.metric_names() == [] and met.metrics_report() == ""


_TRAIN_SCRIPT = textwrap.dedent("""
    import sys, time, torch, xladev
    w = torch.ones(32, 32, device='xla')
    for step in range(int(sys.argv[1])):
        w = (w @ w) / 32
        xladev.mark_step()
        print('step', step, flush=True)
        time.sleep(float(sys.argv[2]))
""")


def _run_training(tmp_path, steps, sleep, **env):
    script = tmp_path / "train.py"
    script.write_text(_TRAIN_SCRIPT)
    full_env = dict(os.environ, **env)
    return subprocess.Popen([sys.executable, str(script), str(steps), str(sleep)], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_metrics_file_has_one_record_per_step(tmp_path):
    path = tmp_path / "metrics.txt"
    proc = _run_training(tmp_path, 5, 0, XLA_METRICS_FILE=str(path))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    text = path.read_text()
    assert [l for l in text.splitlines() if l.startswith("[MetricsData")] == [f"[MetricsData; step={i}]" for i in range(5)]
    parsed = read_source(str(path))
    assert parsed.snapshots == parsed.step_records == 5
    assert parsed.final.step == 4 and parsed.final.counters["MarkStep"] == 5
    assert not parsed.warnings


def test_metrics_file_survives_sigkill(tmp_path):
    path = tmp_path / "metrics.txt"
    proc = _run_training(tmp_path, 1000, 0.02, XLA_METRICS_FILE=str(path))
    seen = 0
    deadline = time.time() + 90
    while seen < 8 and time.time() < deadline:
        line = proc.stdout.readline()
        seen += line.startswith("step")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert seen >= 8
    parsed = read_source(str(path))
    # every record written before the kill is whole: none truncated, none lost
    assert not parsed.warnings, parsed.warnings[:3]
    assert parsed.snapshots == parsed.step_records >= 8
    assert parsed.final.counters["MarkStep"] == parsed.final.step + 1 == parsed.snapshots


def test_metrics_file_stdout_and_per_rank(tmp_path):
    proc = _run_training(tmp_path, 2, 0, XLA_METRICS_FILE="STDOUT")
    out, _ = proc.communicate(timeout=120)
    assert "[MetricsData; step=1]" in out
    path = tmp_path / "m.txt"
    proc = _run_training(tmp_path, 2, 0, XLA_METRICS_FILE=str(path), RANK="1", WORLD_SIZE="2")
    proc.communicate(timeout=120)
    assert (tmp_path / "m.txt.1").exists() and not path.exists()


def test_every_upload_is_a_transfer_scalars_and_seeds_included():
    """As PyTorch/XLA counts them: a random op's seed and a Python scalar fed to a graph are uploads."""
    import torch
    import xladev
    import xladev.debug.metrics as met

    device = xladev.device()
    met.clear_all()
    xladev.manual_seed(1234)  # the seed goes to the device
    torch.rand(3, device=device).cpu()
    seeds = met.metric_data("TransferToDeviceTime")[0]
    assert seeds >= 1 and met.metric_data("TensorToData")[0] == seeds
    (torch.ones(2, device=device) * 0.123456).cpu()  # a new Python scalar, uploaded once
    assert met.metric_data("TransferToDeviceTime")[0] == seeds + 1
    (torch.ones(2, device=device) * 0.123456).cpu()  # the same value again: from the scalar cache
    assert met.metric_data("TransferToDeviceTime")[0] == seeds + 1


def test_create_xla_tensor_counts_every_device_tensor_as_it_is_made(dev):
    xladev.mark_step()
    met.clear_counters()
    x = torch.ones(3, device=dev)  # a factory output
    y = x + 1                      # an op output
    first = y[0]                   # a view
    assert met.counter_value("CreateXlaTensor") == 3  # before any barrier, as PyTorch/XLA counts it
    xladev.mark_step()
    assert met.counter_value("CreateXlaTensor") == 3 and first.item() == 2.0
