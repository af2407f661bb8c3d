"""The memory records on their own: the growth warning's words read back, the records' round trip, and the
TUI's memory row on fixed data (`tests/runtime/test_memory_census.py` runs them in real processes)."""

from __future__ import annotations

import json

import pytest

from textual.widgets import Static

from tests.tui.helpers import async_test, fixture_lines, wait_for
from xladev import analysis
from xladev.schema import records as rec
from xladev.schema.units import format_bytes, parse_bytes
from xladev_tui.app import XladevTUI
from xladev_tui.run_model import model_from_lines
from xladev_tui.sources import FixtureSource

HOLDERS = [{"kind": "other", "line": "train@train.py:31", "per_step_bytes": 4.0, "buffers": 3},
           {"kind": "gradient", "line": "<module>@train.py:32 (backward)", "per_step_bytes": 4096.0, "buffers": 1}]


def test_the_warning_reads_back_as_its_numbers():
    message = analysis.memory_growing_message(from_step=5, from_bytes=17_326_112, to_step=8, to_bytes=17_338_400,
                                           per_step_bytes=4096.0, holders=HOLDERS, format_bytes=format_bytes)
    found = analysis.parse_memory_growing(message, parse_bytes)
    assert (found["from_step"], found["to_step"], found["per_step_bytes"]) == (5, 8, 4096.0)
    assert abs(found["from_bytes"] - 17_326_112) <= 0.005 * 1024 ** 2  # printed to 2 decimals of MB
    assert found["holders"] == HOLDERS


def test_a_growth_with_no_holder_reads_back_with_none():
    message = analysis.memory_growing_message(from_step=2, from_bytes=100, to_step=9, to_bytes=170,
                                           per_step_bytes=10.0, holders=[], format_bytes=format_bytes)
    found = analysis.parse_memory_growing(message, parse_bytes)
    assert found["holders"] == [] and found["per_step_bytes"] == 10.0
    finding = analysis.memory_growing_finding(**found, format_bytes=format_bytes)
    assert finding.rule == "memory-growing" and finding.severity == "warning" and finding.subject == ""
    assert analysis.parse_memory_growing("Graph growing without a barrier: 5 ops", parse_bytes) is None


def test_the_finding_names_the_line_and_the_fix_for_kept_tensors():
    finding = analysis.memory_growing_finding(from_step=5, from_bytes=100, to_step=8, to_bytes=112, per_step_bytes=4.0,
                                           holders=HOLDERS, format_bytes=format_bytes)
    assert finding.subject == "train@train.py:31"
    assert "train@train.py:31" in finding.title and "loss.item()" in finding.fix


def test_the_records_round_trip():
    growing = rec.MemoryGrowing(12, 8, 5, 100, 112, 4.0, [dict(h) for h in HOLDERS])
    assert rec.parse_line(json.dumps(growing.to_record())) == growing
    sampled = rec.Step(3, 2, 10, 20, {}, None, None, 4096, 8192)
    assert rec.parse_line(json.dumps(sampled.to_record())) == sampled
    unsampled = rec.Step(3, 2, 10, 20, {}, None, None).to_record()
    assert "device_bytes" not in unsampled and "peak_device_bytes" not in unsampled  # absent, never a zero


def _with_memory(lines: list[str]) -> list[str]:
    """The fixture log with each step sampled: 1 MB more live at each step, the peak 512 KB above it."""
    out = []
    for line in lines:
        record = json.loads(line)
        if record["type"] == "step":
            record["device_bytes"] = (1 + record["step"]) * 1024 ** 2
            record["peak_device_bytes"] = record["device_bytes"] + 512 * 1024
        out.append(json.dumps(record))
    return out


def test_the_tui_model_folds_the_samples():
    view = model_from_lines(_with_memory(fixture_lines())).snapshot()
    assert view.memory[0] == (0, 1024 ** 2, 1024 ** 2 + 512 * 1024)
    assert [step for step, _, _ in view.memory] == list(range(len(view.memory)))
    assert model_from_lines(fixture_lines()).snapshot().memory == ()


@async_test
async def test_the_header_shows_memory_only_when_sampled():
    for lines, shown in ((_with_memory(fixture_lines()), True), (fixture_lines(), False)):
        app = XladevTUI(FixtureSource(lines), clock=lambda: 0.0)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.shown.ended)
            row = app.query_one("#memory-row")
            assert row.has_class("shown") is shown
            if shown:
                last = app.shown.memory[-1][0]
                label = str(app.query_one("#memory-label", Static).render())
                assert label == (f"memory {format_bytes((1 + last) * 1024 ** 2)} at step {last} "
                                 f"(peak {format_bytes((1 + last) * 1024 ** 2 + 512 * 1024)})")


def test_the_host_warning_reads_back_as_its_numbers_and_its_finding():
    holders = [{"kind": "host copy", "line": "<module>@train.py:9", "per_step_bytes": 1048576.0, "buffers": 6}]
    message = analysis.memory_growing_message(from_step=9, from_bytes=510 * 1024 ** 2, to_step=31,
                                           to_bytes=532 * 1024 ** 2, per_step_bytes=1048576.0, holders=holders,
                                           format_bytes=format_bytes, space="host")
    assert message.startswith(analysis.HOST_MEMORY_GROWING + ": ")
    found = analysis.parse_memory_growing(message, parse_bytes)
    assert found["space"] == "host" and found["holders"] == holders
    finding = analysis.memory_growing_finding(**found, format_bytes=format_bytes)
    assert finding.rule == "host-memory-growing" and finding.subject == "<module>@train.py:9"
    assert "`.cpu()` copies" in finding.fix
    device = analysis.parse_memory_growing(analysis.memory_growing_message(
        from_step=1, from_bytes=1, to_step=2, to_bytes=2, per_step_bytes=1.0, holders=[], format_bytes=format_bytes),
        parse_bytes)
    assert device["space"] == "device"


def test_a_host_growth_without_a_tensor_says_so():
    message = analysis.memory_growing_message(from_step=2, from_bytes=100, to_step=9, to_bytes=170, per_step_bytes=10.0,
                                           holders=[], format_bytes=format_bytes, space="host")
    found = analysis.parse_memory_growing(message, parse_bytes)
    finding = analysis.memory_growing_finding(**found, format_bytes=format_bytes)
    assert found["holders"] == [] and finding.subject == "" and "tracemalloc" in finding.fix


def test_an_unknown_memory_space_is_refused_by_name():
    with pytest.raises(ValueError, match="'pinned'"):
        analysis.memory_growing_message(from_step=1, from_bytes=1, to_step=2, to_bytes=2, per_step_bytes=1.0,
                                     holders=[], format_bytes=format_bytes, space="pinned")


def test_the_host_record_round_trips():
    growing = rec.MemoryGrowing(12, 8, 5, 100, 112, 4.0, [dict(h) for h in HOLDERS], "host")
    assert rec.parse_line(json.dumps(growing.to_record())) == growing
