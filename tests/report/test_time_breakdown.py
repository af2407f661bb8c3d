"""Where the time went: exact from an event log, from xladev's level-1 summary, estimated from metrics reports;
findings priced by the time they cost and ranked by it."""

from __future__ import annotations

import pytest

from tests.report.helpers import fixture_path
from xladev import analysis
from xladev.analysis import wall_time
from xladev.report import load
from xladev.schema import records as rec
from xladev.schema.units import compact_time_ns

MS = 1_000_000


def _log(tmp_path, steps: int = 12, late_compiles: int = 0, end: bool = True) -> tuple[str, dict]:
    """An event log with known times; returns its path and the sums each part must have."""
    lines = [rec.Header(command="train.py")]
    sums = dict.fromkeys(wall_time.PARTS, 0)
    t = 0
    for step in range(steps):
        start = t
        compile_ns = 300 * MS if step == 0 or step >= steps - late_compiles else 0
        parts = {"tracing": 2 * MS, "compile": compile_ns, "execute": 5 * MS, "to_device": 1 * MS,
                 "from_device": 3 * MS, "fallback": 4 * MS}
        lines.append(rec.Ops(t, step, {"aten::add": 3}, parts["tracing"], 1))
        if compile_ns:
            lines.append(rec.Compile(t, step, hash=f"g{step}", nodes=10, compile_ns=compile_ns, site="train.py:9"))
        lines.append(rec.Execute(t, step, hash=f"g{step}", execute_ns=parts["execute"]))
        lines.append(rec.Transfer(t, step, dir="to_device", bytes=8, ns=parts["to_device"]))
        lines.append(rec.Transfer(t, step, dir="from_device", bytes=8, ns=parts["from_device"], kind=".item()"))
        lines.append(rec.Fallback(t, step, op="aten::nonzero", cpu_ns=parts["fallback"]))
        t += sum(parts.values()) + 10 * MS  # 10 ms of "other" per step
        lines.append(rec.Step(t, step, interval_ns=t - start))
        for part, ns in parts.items():
            sums[part] += ns
    if end:
        lines.append(rec.End(t + 50 * MS, steps=steps))
    sums["wall"] = t + 50 * MS if end else t
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(rec.dumps(r) for r in lines) + "\n")
    return str(path), sums


def test_an_event_log_gives_the_exact_breakdown_overall_and_per_step(tmp_path):
    path, sums = _log(tmp_path)
    breakdown = load(path).time_breakdowns[None]
    assert breakdown.exact and breakdown.steps == 12
    assert breakdown.parts == {part: float(sums[part]) for part in wall_time.PARTS}
    assert breakdown.wall_ns == sums["wall"]
    assert breakdown.other_ns() == sums["wall"] - sum(sums[p] for p in wall_time.PARTS)
    assert [s.step for s in breakdown.step_times] == list(range(12))
    assert breakdown.step_times[0].parts["compile"] == 300 * MS and "compile" not in breakdown.step_times[5].parts
    assert breakdown.step_times[5].other_ns() == 10 * MS
    labels = [label for label, _ in breakdown.typical_steps(analysis.WARMUP_STEPS)]
    assert labels[0] == "first step" and labels[1].startswith("median")


def test_a_log_without_an_end_record_runs_to_its_last_record(tmp_path):
    path, sums = _log(tmp_path, end=False)
    breakdown = load(path).time_breakdowns[None]
    assert breakdown.wall_ns == sums["wall"] and "no end record" in breakdown.basis


def test_recompilation_is_priced_by_its_compile_time_and_ranked_first(tmp_path):
    path, _ = _log(tmp_path, steps=20, late_compiles=6)
    report = load(path)
    recompile = next(f for f in report.findings if f.rule == "recompilation")
    assert recompile.cost_ns == 6 * 300 * MS  # the compiles after warm-up
    assert "saves ~" in recompile.saving and compact_time_ns(recompile.cost_ns) in recompile.cost_text()
    costed = [f for f in report.findings if f.cost_ns and f.severity != analysis.INFO]
    assert report.findings[0] is recompile and costed[0] is recompile
    # Compiling is 7 × 300 ms of a ~2.9 s run: more than half, so the fix also names the persistent cache.
    assert report.time_breakdowns[None].share("compile") > wall_time.COMPILE_DOMINATES
    assert "persistent compilation cache" in recompile.fix and "xladev.initialize_cache" in recompile.fix


def test_compile_dominated_healthy_run_gets_the_cache_note_but_stays_healthy(tmp_path):
    path, _ = _log(tmp_path, steps=3)
    report = load(path)
    rules_found = {f.rule for f in report.findings}
    assert "compile-time" in rules_found and report.verdict() in ("healthy", "warning", "error")
    note = next(f for f in report.findings if f.rule == "compile-time")
    assert note.cost_ns == 300 * MS and "initialize_cache" in note.fix


def test_persistent_cache_hits_silence_the_cache_advice():
    breakdown = wall_time.TimeBreakdown(parts={"compile": 9e9}, wall_ns=10e9, steps=5, exact=True)
    facts = wall_time.CostFacts(breakdown=breakdown, compiles=3)
    assert [f.rule for f in wall_time.with_cache_advice([], facts)] == ["compile-time"]
    facts.persistent_cache_hits = 3
    assert wall_time.with_cache_advice([], facts) == []


@pytest.mark.parametrize("repeated", [0, 5])
def test_a_recompilation_without_the_warm_up_split_is_priced_only_by_what_the_input_holds(repeated):
    """13 compiles in 24 steps, 7.8 s compiling: with no warm-up split the late compiles' cost is not in the input
    (no guess), unless the causes counted repeated recompiles, which are priced at the mean compile time."""
    breakdown = wall_time.TimeBreakdown(parts={"compile": 7.8e9}, wall_ns=10e9, steps=24)
    finding = analysis.Finding("recompilation", analysis.WARNING, "13 compiles in 24 steps", "", "Keep shapes static.",
                            numbers={"repeated_recompiles": repeated} if repeated else {})
    wall_time.price([finding], wall_time.CostFacts(breakdown=breakdown, compiles=13))
    if repeated:
        assert finding.cost_ns == pytest.approx(5 * 7.8e9 / 13)
        assert finding.saving == f"static shapes → ~8 compiles, saves ~{compact_time_ns(finding.cost_ns)}"
    else:
        assert finding.cost_ns is None and finding.cost_text().startswith("not in this input: a single report")


def test_shapes_that_changed_inside_warm_up_are_priced_and_a_fix_that_saves_nothing_says_no_saving():
    """dyn.py's run (a batch of 4 + step % 12 over 24 steps): 10 graphs in warm-up, 2 after. The per-step reports
    show 8 warm-up steps compiling a graph of the same size, so those count in the price as the 2 late ones do.
    With only the 2 late compiles known, bucketing to 3 sizes would still compile 12 graphs: no saving is
    claimed, and no clause is left hanging."""
    breakdown = wall_time.TimeBreakdown(parts={"compile": 8.0e9}, wall_ns=12e9, steps=24)
    finding = analysis.recompilation_finding(
        steps=24, compiles=12, compiles_at_warmup=10, compile_steps_after_warmup=2, last_compile_step=12,
        stable_graph_size=True, repeated=analysis.RepeatedRecompiles(site="one training step", count=8,
                                                                  kind="input shape or constant"))
    assert finding.numbers["repeated_recompiles"] == 8 and "Pad or bucket" in finding.fix
    facts = wall_time.CostFacts(breakdown=breakdown, compiles=12, compiles_at_warmup=10,
                                compile_ns_after_warmup=1.5e9)
    wall_time.price([finding], facts)
    mean = 8.0e9 / 12
    assert finding.cost_ns == pytest.approx(8 * mean)
    assert finding.saving == f"pad to 3 buckets → ~6 compiles, saves ~{compact_time_ns(8 * mean * 6 / 8)}"
    del finding.numbers["repeated_recompiles"]  # the 2 late compiles alone: 10 + 2 buckets' worth is 12
    wall_time.price([finding], facts)
    assert finding.cost_ns == 1.5e9 and finding.saving == "" and finding.cost_text() == "1.5 s (12% of the run)"


def test_ranking_puts_failures_first_and_negligible_costs_after_unknown_ones():
    def finding(rule, severity, cost=None, share=None):
        f = analysis.Finding(rule, severity, rule, "", "")
        f.cost_ns = cost
        if share is not None:
            f.numbers["cost_share"] = share
        return f
    order = ["compile-failure", "recompilation", "host-transfers", "graph-growing", "compile-time"]
    found = [finding("host-transfers", analysis.WARNING, 1e5, 0.0001), finding("graph-growing", analysis.WARNING),
             finding("compile-time", analysis.INFO, 5e9, 0.5), finding("recompilation", analysis.WARNING, 2e9, 0.2),
             finding("compile-failure", analysis.ERROR)]
    assert [f.rule for f in wall_time.ranked(found, order)] == [
        "compile-failure", "recompilation", "graph-growing", "host-transfers", "compile-time"]


def test_the_level1_summary_line_round_trips_as_printed():
    breakdown = wall_time.TimeBreakdown(parts={"tracing": 1.234e9, "compile": 229.4e9, "execute": 12.3e6,
                                               "to_device": 850.0, "from_device": 4.56e6, "fallback": 0.0},
                                        wall_ns=250e9, steps=10, exact=True)
    line = wall_time.summary_line(breakdown)
    assert line.startswith("Time: 4m10s wall; ") and "XLA compile 3m49s" in line
    parsed = wall_time.parse_summary_line(line, steps=10)
    assert parsed.wall_ns == 250e9 and not parsed.exact
    for part, ns in breakdown.parts.items():
        assert parsed.parts[part] == pytest.approx(ns, rel=5e-3, abs=1e9 if ns >= 60e9 else 0), part
    assert wall_time.parse_summary_line("Time: nonsense") is None


def test_a_metrics_report_gives_its_accumulated_parts_and_no_share_of_a_wall_time_it_does_not_hold():
    report = load(str(fixture_path("dynamic_shape.metrics.txt")))
    breakdown = report.time_breakdowns[None]
    compile_block = report.sources[0].final.metrics["CompileTime"]
    assert breakdown.exact and "wall time is not in this input" in breakdown.basis  # the accumulators measure
    assert breakdown.parts["compile"] == compile_block.accumulator
    assert breakdown.wall_ns is None and breakdown.other_ns() is None
    assert all(share is None for _, _, _, share, _ in breakdown.rows())  # a share of what the input lacks
    assert breakdown.headline().startswith("wall time not in this input: XLA compile")
    recompile = next(f for f in report.findings if f.rule == "recompilation")
    assert recompile.cost_ns and recompile.cost_ns <= breakdown.parts["compile"]
    assert "cost_share" not in recompile.numbers


def test_a_debug_log_without_times_says_so(tmp_path):
    report = load(str(fixture_path("dynamic_shape.debug.txt")))
    assert report.time_breakdowns == {}
    from xladev.report.document import report_document
    section = next(s for s in report_document(report).sections if s.title == "Where the time went")
    assert "no times" in section.items[0]


def test_each_cpu_fallback_finding_costs_its_own_ops_time(tmp_path):
    lines = [rec.Header(command="train.py")]
    for step in range(12):
        lines.append(rec.Fallback(step * 100 * MS, step, op="aten::nonzero", cpu_ns=30 * MS))
        lines.append(rec.Fallback(step * 100 * MS, step, op="aten::median.dim", cpu_ns=10 * MS))
        lines.append(rec.Step((step + 1) * 100 * MS, step, interval_ns=100 * MS))
    lines.append(rec.End(1200 * MS, steps=12))
    path = tmp_path / "fallbacks.jsonl"
    path.write_text("\n".join(rec.dumps(r) for r in lines) + "\n")
    costs = {f.subject: f.cost_ns for f in load(str(path)).findings if f.rule == "cpu-fallback"}
    assert costs == {"aten::nonzero": 12 * 30 * MS, "aten::median.dim": 12 * 10 * MS}


def test_without_the_wall_time_no_share_of_the_run_is_claimed():
    # Compiling is 90% of what a metrics report times, which says nothing of the run: its Python time is not in it.
    breakdown = wall_time.from_metric_totals({"compile": 9e9, "execute": 1e9}, steps=10, basis="a metrics report")
    assert breakdown.share("compile") is None and not wall_time.compile_dominates(breakdown)
    assert wall_time.with_cache_advice([], wall_time.CostFacts(breakdown=breakdown, compiles=3)) == []
    with_wall = wall_time.TimeBreakdown(parts={"compile": 9e9, "execute": 1e9}, wall_ns=12e9, steps=10, exact=True)
    told = wall_time.with_cache_advice([], wall_time.CostFacts(breakdown=with_wall, compiles=3))[0]
    assert told.title == "Compiling took 75% of the run's wall time" and told.numbers["compile_share"] == 0.75
