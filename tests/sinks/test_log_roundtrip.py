"""A real run's event log, written by the real writer, read back by the report and the TUI model:
the same counters and metric totals as the in-process metrics registry counted meanwhile."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import xladev
from xladev.debug import event_log
from xladev.debug import metrics as met
from xladev.report import load
from xladev.schema import records as rec
from xladev_tui.run_model import model_from_lines


def _run(dev) -> None:
    """Every record type: compiles and a recompilation (the batch grows), a CPU fallback op, value reads,
    uploads, a Python scalar the scalar cache has not seen, and several steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 2)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step, rows in enumerate([4, 4, 6, 6]):
        x = torch.randn(rows, 5).to(dev)
        opt.zero_grad()
        loss = (model(x) ** 2).mean() * (1.0 + step / 7)  # a new Python scalar each step
        loss.backward()
        opt.step()
        xladev.mark_step()
        torch.nonzero(x > 0)  # no lowering: runs on the CPU
        loss.item()
    xladev.mark_step()
    xladev.wait_device_ops()


@pytest.fixture(scope="module")
def roundtrip(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("roundtrip") / "run.events.jsonl")
    dev = xladev.device()
    xladev.mark_step()
    xladev.wait_device_ops()
    before = met.snapshot()
    event_log.start(path)
    try:
        _run(dev)
    finally:
        event_log.stop()
    after = met.snapshot()
    return path, met.diff(before, after)


def test_the_log_has_every_kind_of_record(roundtrip):
    path, _ = roundtrip
    with open(path) as fh:
        kinds = {type(rec.parse_line(line)).__name__ for line in fh}
    assert {"Header", "GraphText", "Compile", "Execute", "Step", "Transfer", "Ops", "Fallback", "End"} <= kinds


def test_report_reads_back_the_in_process_counters(roundtrip):
    path, delta = roundtrip
    final = load(path).sources[0].final
    assert delta.counters and final.counters == delta.counters
    assert set(final.metrics) == set(delta.metrics)
    for name, metric in delta.metrics.items():
        block = final.metrics[name]
        assert block.total_samples == metric["total_samples"], name
        # Times and sizes travel as integers: the sums agree up to float addition order.
        assert math.isclose(block.accumulator, metric["accumulator"], rel_tol=1e-12, abs_tol=1e-6), name


def test_tui_model_reads_back_the_in_process_counters(roundtrip):
    path, delta = roundtrip
    with open(path) as fh:
        view = model_from_lines(fh.read().splitlines()).snapshot()
    counters = {row.name: row.count for row in view.counters if row.kind == "counter"}
    assert counters == delta.counters
    metrics = {row.name: (row.count, row.total) for row in view.counters if row.kind != "counter"}
    assert set(metrics) == set(delta.metrics)
    for name, metric in delta.metrics.items():
        count, total = metrics[name]
        assert count == metric["total_samples"], name
        assert math.isclose(total, metric["accumulator"], rel_tol=1e-12, abs_tol=1e-6), name


def test_the_run_covered_what_it_meant_to(roundtrip):
    _, delta = roundtrip
    counters = delta.counters
    assert counters["MarkStep"] == 5 and counters["UncachedCompile"] >= 2 and counters["CachedCompile"] >= 1
    assert counters["aten::nonzero"] == 4 and counters["aten::_local_scalar_dense"] == 4
    assert counters["DeviceDataCacheMiss"] >= 1 and counters["CreateDataHandles"] > 0
    assert delta.metrics["LazyTracing"]["total_samples"] > 0
