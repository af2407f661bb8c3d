"""Logs that `xladev attach` wrote of real torch_xla 2.9 runs (tests/fixtures/torch_xla/attach, recorded with
tools/record_torch_xla_attach.py), read by `xladev report` and the TUI: the diagnosis is the right one, the
header says which runtime ran the graphs, and what such a log cannot hold is said, not read as zeros."""

from __future__ import annotations

import json

import pytest

from tests.attach.expectations import EXPECTED, check_report, check_tui
from tests.report.helpers import FIXTURES
from xladev.attach import ABSENT
from xladev.report import load
from xladev.report.document import report_document

LOGS = FIXTURES / "attach"


def _log(name: str):
    path = LOGS / f"{name}.attach.jsonl"
    assert path.exists(), f"missing fixture {path}: record it with tools/record_torch_xla_attach.py"
    return path


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_scenario_is_diagnosed_right(name):
    check_report(name, load(str(_log(name))))


@pytest.mark.parametrize("name", ["dynamic_shape", "item_every_step", "healthy"])
def test_the_tui_leads_with_the_same_problem(name):
    check_tui(name, _log(name))


def test_the_header_names_the_runtime_and_what_the_log_cannot_hold():
    header = json.loads(_log("healthy").read_text().splitlines()[0])
    assert header["runtime"] == "torch_xla" and header["api"] == "torch_xla"
    assert header["versions"]["torch_xla"] == "2.9.0" and header["device"] == "CPU (torch_xla 2.9.0, attached)"
    assert header["absent"] == list(ABSENT)
    report = load(str(_log("healthy")))
    [source] = report.sources
    assert source.runtime == "torch_xla 2.9.0"
    assert source.describe_kinds() == ["xladev attach log of torch_xla 2.9.0, 24 steps"]
    summary = dict(report_document(report).summary)
    assert summary["Not recorded"] == "; ".join(ABSENT)


def test_each_execution_has_its_time_and_graph_and_each_compile_its_cause():
    records = [json.loads(line) for line in _log("item_every_step").read_text().splitlines()]
    executes = [r for r in records if r["type"] == "execute"]
    compiles = [r for r in records if r["type"] == "compile"]
    steps = [r for r in records if r["type"] == "step"]
    assert len(steps) == 24 and len(executes) == 48 and len(compiles) == 2
    assert all(r["execute_ns"] > 0 and r["nodes"] > 0 for r in executes)
    assert all(r["compile_ns"] > 0 for r in compiles)
    assert {r["cause"]["kind"] for r in compiles} == {"USER_MARK_STEP", "VALUE_ACCESS"}
    # The first run of each graph is its compile's; every later one is a cache hit.
    assert sum(not r["cached"] for r in executes) == len(compiles)
    reads = [r for r in records if r["type"] == "transfer" and r["dir"] == "from_device"]
    assert len(reads) == 24 and {r["kind"] for r in reads} == {".item()"}
    assert {r["site"].split(" ")[0] for r in reads} == {"/home/user/run/scenarios.py:19"}
