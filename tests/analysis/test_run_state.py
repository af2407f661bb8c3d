"""RunState, the run's one fold: what it keeps of a fixed log, that folding in pieces changes nothing, and that the
report, the TUI and the PT_XLA_DEBUG summary of one real run give the same numbers because they read it."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap

from xladev.analysis.run_state import RunState
from xladev.schema import records as rec
from xladev.schema.sites import short_site
from tests.tui.logs import FALLBACK_SITE, ITEM_SITE, SITE, long_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _records(steps: int = 24, end: bool = True) -> list[rec.Record]:
    return [r for r in (rec.parse_line(line) for line in long_run(steps, end).lines()) if r is not None]


def _fold(records) -> RunState:
    state = RunState()
    for line, record in enumerate(records, 1):
        state.feed(record, line)
    return state


def test_the_fixed_run_folds_to_what_it_holds():
    # long_run: recompiles at steps 2, 4, 7, 12 and 18 (six graphs at one site), a failed compile at step 16,
    # a fallback every 4 steps from step 1, one `.item()` per step.
    state = _fold(_records(24))
    assert state.steps == 24 and state.last_step == 23 and state.end is not None
    assert state.compiles == 6 and list(state.sites) == [SITE] and state.sites[SITE].compiles == 6
    assert len(state.recompilations) == 5 == state.sites[SITE].recompiles
    assert [r.step for r in state.recompilations] == [2, 4, 7, 12, 18]
    assert "f32[128,80] -> f32[160,80]" in state.recompilations[0].headline()
    assert state.fallback_sites() == [("aten::_unique2", FALLBACK_SITE, 6)]
    assert [(s.kind, s.site, s.count) for s in state.hot_spots()] == [(".item()", ITEM_SITE, 24)]
    # the failure closed its compile
    assert state.reads == 24 and len(state.failures.graphs) == 1 and not state.compiling
    compile_ns = sum(2_400_000_000 + i * 100_000_000 for i in range(6))
    assert state.compile_ns == compile_ns and state.parts["compile"] == compile_ns
    assert state.parts["execute"] == 24 * 25_000_000 and len(state.step_times) == 24
    # each graph: compiled once, ran in the steps until the next one compiled
    ran = {g.graph_hash: (g.compiles, g.executions) for g in state.graphs.values() if g.compiles}
    assert sorted(ran.values()) == [(1, 2), (1, 2), (1, 3), (1, 5), (1, 6), (1, 6)]
    assert sum(g.compiles for g in state.graphs.values()) == 6


def test_folding_in_pieces_with_questions_between_is_folding_at_once():
    records = _records(24)
    whole = _fold(records)
    state = RunState()
    for line, record in enumerate(records, 1):
        state.feed(record, line)
        if line % 7 == 0:  # a live reader asks as records arrive
            state.time_breakdown(1e9, "so far")
            state.steady_reads()
            state.hot_spots()
    assert state.time_breakdown(2e9, "x").parts == whole.time_breakdown(2e9, "x").parts
    assert [vars(t) for t in state.step_times] == [vars(t) for t in whole.step_times]
    assert state.counters == whole.counters and state.steady_reads() == whole.steady_reads()
    assert {n: (m.count, m.total) for n, m in state.metrics.items()} == {
        n: (m.count, m.total) for n, m in whole.metrics.items()}


def test_a_breakdown_keeps_its_numbers_while_the_state_folds_on():
    records = _records(24)
    state = _fold(records[:len(records) // 2])
    breakdown = state.time_breakdown(1e9, "half")
    parts, steps = dict(breakdown.parts), len(breakdown.step_times)
    for record in records[len(records) // 2:]:
        state.feed(record)
    assert breakdown.parts == parts and len(breakdown.step_times) == steps < state.steps


def test_the_report_the_tui_and_the_debug_summary_of_one_run_agree(tmp_path):
    """One real run, written as an event log and as PT_XLA_DEBUG text: the three readers' steps, compiles per
    site and reads are the same numbers, since all three fold the same records through RunState."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        import xladev

        dev = xladev.device()
        w = torch.randn(8, 8, device=dev)
        for step in range(6):
            rows = 4 if step < 3 else 6  # a new shape at step 3: the site recompiles
            x = torch.ones(rows, 8, device=dev)
            loss = (x @ w).sum()
            xladev.mark_step()
            print(loss.item())
    """))
    log, debug = tmp_path / "run.jsonl", tmp_path / "debug.txt"
    env = dict(os.environ, XLADEV_EVENT_LOG=str(log), PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(debug),
               PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr

    from xladev.report import load
    from xladev_tui.run_model import model_from_lines

    summary = [line.removeprefix("xladev summary: ") for line in debug.read_text().splitlines()
               if line.startswith("xladev summary: ")]
    counts = next(m for m in (re.match(r"(\d+) steps, (\d+) compiles, (\d+) device->host transfers", line)
                              for line in summary) if m)
    steps, compiles, reads = map(int, counts.groups())
    per_site = {m.group(1): int(m.group(2)) for m in (re.match(r"  (\S.*): (\d+) graph\(s\)", line)
                                                       for line in summary) if m}
    snap = model_from_lines(log.read_text().splitlines(), diagnose=False).snapshot()
    source = load(str(log)).sources[0]
    assert steps == snap.steps == source.time.steps == 6
    assert compiles == snap.compiles == len(source.compile_ns_by_step) >= 2
    assert per_site == {short_site(s.site): s.compiles for s in snap.sites} and max(per_site.values()) >= 2
    assert reads == sum(s.count for s in snap.hot_spots) == 6


def test_a_fallback_record_may_stand_for_several_calls():
    """`count` (a summary read back) is written only when set, read back, and folded and counted as its calls;
    a record without it is one call, as the runtime writes them."""
    one = rec.Fallback(op="aten::nonzero", site="/a/t.py:3 (f)")
    many = rec.Fallback(op="aten::nonzero", site="/a/t.py:3 (f)", count=5)
    unknown = rec.Fallback(site="/a/t.py:9 (g)", count=2)
    assert "count" not in one.to_record() and many.to_record()["count"] == 5
    lines = [json.dumps(r.to_record()) for r in (one, many, unknown)]
    state = _fold([rec.parse_line(line) for line in lines])
    assert state.fallback_sites() == [("aten::nonzero", "/a/t.py:3 (f)", 6), ("?", "/a/t.py:9 (g)", 2)]
    assert state.counters == {"aten::nonzero": 6}  # an op the record does not name has no counter


def test_a_metrics_report_record_replaces_the_counts_before_it():
    """A report counts every event before it (PyTorch/XLA's counters are cumulative): folded, its counters and
    metrics are the state's, and a metric keeps what the report printed (percentiles, rates) through JSON."""
    from xladev.report.model import ReportSnapshot
    from xladev.schema.metrics_text import MetricBlock

    block = MetricBlock("CompileTime", "time", total_samples=3, accumulator=3.5e9, rate=0.25,
                        percentiles=[("50%", 1e9), ("99%", 2e9)], line=7)
    report = rec.MetricsReport(step=4, counters={"MarkStep": 5, "CachedCompile": 9},
                               metrics={"CompileTime": block.printed()}, report_step=4, index=2)
    read = rec.parse_line(json.dumps(report.to_record()))
    assert read == report and "counter_lines" not in report.to_record()
    before = _records(6)  # an event log's records count first; the report then stands for all of it
    state = _fold(before + [read])
    assert state.counters == {"MarkStep": 5, "CachedCompile": 9} and list(state.metrics) == ["CompileTime"]
    snapshot = ReportSnapshot.of_state(state, 4, 100, 2)
    assert snapshot.metrics["CompileTime"] == MetricBlock(**{**dataclasses.asdict(block), "line": len(before) + 1})
