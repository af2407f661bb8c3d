"""Logs that `xladev attach` wrote of real torch_xla 2.9 runs (tests/fixtures/torch_xla/attach, recorded with
tools/record_torch_xla_attach.py), read by `xladev report` and the TUI: the diagnosis is the right one, the
header says which runtime ran the graphs, and what such a log cannot hold is said, not read as zeros."""

from __future__ import annotations

import json

import pytest

from tests.attach.expectations import EXPECTED, check_report, check_tui
from tests.report.helpers import FIXTURES
from xladev.attach import ABSENT, ABSENT_WITHOUT_GRAPHS
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
    assert header["absent"] == list(ABSENT) + list(ABSENT_WITHOUT_GRAPHS)
    graphs_header = json.loads(_log("slice_length_graphs").read_text().splitlines()[0])
    assert graphs_header["absent"] == list(ABSENT)  # with the dumps: IR text, node counts and the changes are there
    report = load(str(_log("healthy")))
    [source] = report.sources
    assert source.runtime == "torch_xla 2.9.0"
    assert source.describe_kinds() == ["xladev attach log of torch_xla 2.9.0, 24 steps"]
    summary = dict(report_document(report).summary)
    assert summary["Not recorded"] == "; ".join(ABSENT + ABSENT_WITHOUT_GRAPHS)
    [data] = report_document(report).data()["inputs"]  # what `xladev report -f json` writes
    assert data["runtime"] == "torch_xla 2.9.0" and data["not_recorded"] == list(ABSENT + ABSENT_WITHOUT_GRAPHS)


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


def test_with_the_graph_dumps_each_compile_has_its_ir_and_each_recompile_says_what_changed():
    records = [json.loads(line) for line in _log("slice_length_graphs").read_text().splitlines()]
    compiles = [r for r in records if r["type"] == "compile"]
    graphs = {r["hash"]: r for r in records if r["type"] == "graph"}
    assert len(compiles) == 12 and set(graphs) == {r["hash"] for r in compiles}
    assert all(r["nodes"] == graphs[r["hash"]]["nodes"] > 0 and graphs[r["hash"]]["ir"].startswith("IR {")
               for r in compiles)
    # The sync's line compiles 12 graphs: the first is new, each later one is compared with the closest before it.
    assert [bool(r.get("recompile")) for r in compiles] == [False] + [True] * 11
    for r in compiles[1:]:
        assert r["recompile"]["previous"] in graphs and r["recompile"]["graphs_at_site"] >= 2
    # Step 1's graph differs from step 0's in its ops (the first step's differs in what the optimizer reads); from
    # step 2 on, each differs from the one before in the slice's width alone: 20 + step columns.
    assert any(change.startswith("op sequence differs") for change in compiles[1]["recompile"]["changes"])
    for step, r in enumerate(compiles[2:], start=2):
        assert r["recompile"]["changes"] == [f"output shape of xla::select changed: f32[16,{19 + step}]{{1,0}} -> "
                                             f"f32[16,{20 + step}]{{1,0}}"], r["recompile"]
