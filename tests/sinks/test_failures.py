"""Compile and execution failures are events, log records, counters and report findings, with the HLO path."""

from __future__ import annotations

import os

import pytest
import torch

import xladev
from xladev.debug import event_log
from xladev.debug import metrics as met
from xladev.events import CompileFailed, ExecuteFailed
from xladev.report import load
from xladev.runtime.api.runtime_state import executor
from xladev.runtime.lowering.registry import LOWERINGS


def _failing_run(tmp_path, monkeypatch, dev):
    """One graph XLA rejects (a broken lowering) and one that fails while running (its executable raises)."""
    monkeypatch.setattr(xladev.config, "_values", dict(xladev.config._values, save_hlo_file=str(tmp_path / "bad.hlo")))
    monkeypatch.setattr(LOWERINGS[torch.ops.aten.cosh.default], "lower",
                        lambda ctx, x: (_ for _ in ()).throw(ValueError("deliberately broken lowering")))
    bad = torch.cosh(torch.ones(2, device=dev))
    with pytest.raises(xladev.XlaCompileError):
        bad.cpu()
    del bad
    monkeypatch.undo()
    x = torch.ones(3, device=dev) * 7
    x.cpu()  # compiles and runs this graph once
    entry = executor.by_hash[next(reversed(executor.by_hash))]

    def out_of_memory(*arrays):
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 123 bytes")

    monkeypatch.setattr(entry, "executable", out_of_memory)
    with pytest.raises(Exception, match="failed while running"):
        (torch.ones(3, device=dev) * 7).cpu()
    monkeypatch.undo()
    xladev.mark_step()


def test_failures_are_events_records_counters_and_findings(tmp_path, monkeypatch, dev, events):
    path = str(tmp_path / "run.events.jsonl")
    before = met.snapshot()
    event_log.start(path)
    try:
        _failing_run(tmp_path, monkeypatch, dev)
    finally:
        event_log.stop()
    delta = met.diff(before, met.snapshot()).counters
    assert delta["CompileFailed"] == 1 and delta["ExecuteFailed"] == 1
    failed = events.of(ExecuteFailed)[0]
    assert "Out of memory" in failed.message and os.path.isfile(failed.hlo_path)
    assert events.of(CompileFailed)

    report = load(path)
    findings = {f.rule: f for f in report.findings}
    # The execution that ran out of memory is the out-of-memory finding (with its saved HLO), not a second one.
    assert findings["compile-failure"].severity == "error" and findings["out-of-memory"].severity == "error"
    assert "healthy" not in findings and "execute-failure" not in findings
    assert any("Out of memory" in line and failed.hlo_path in line for line in findings["out-of-memory"].evidence)
    assert any("deliberately broken lowering" in line and str(tmp_path / "bad.hlo") in line
               for line in findings["compile-failure"].evidence)
