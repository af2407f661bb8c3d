"""The real PyTorch/XLA 2.9 outputs: parsed without loss, and diagnosed as their README says."""

from __future__ import annotations

import re

import pytest

from xladev import analysis
from xladev.report import load
from xladev.schema import units
from xladev.report.run_findings import auto_metrics_lines
from xladev.report.inputs import read_source

from tests.report.helpers import FIXTURES, REAL_RUNS, SCENARIOS, fixture_path

_BLOCK_RE = re.compile(r"^Metric: (\S+)\n((?:  .*\n)+)|^Counter: (\S+)\n  Value: (\d+)\n", re.M)


def _blocks(text: str) -> tuple[dict, dict]:
    """Metric fields and counter values of one report, read with a regex independent of the parser."""
    metrics, counters = {}, {}
    for match in _BLOCK_RE.finditer(text):
        if match.group(1):
            fields = dict(line.strip().split(": ", 1) if ": " in line else (line.strip().rstrip(":"), "")
                          for line in match.group(2).splitlines())
            metrics[match.group(1)] = fields
        else:
            counters[match.group(3)] = int(match.group(4))
    return metrics, counters


def _last_report(path) -> str:
    text = path.read_text()
    if "[MetricsData; step=" in text:
        return text[text.rindex("[MetricsData; step="):]
    return text[text.index("Metric: "):]


def _assert_same_value(kind: str, text: str, parsed: float) -> None:
    assert parsed == pytest.approx(units.parse_kind(text, kind)[1], rel=1e-12, nan_ok=True)
    assert units.format_kind(kind, parsed) == text  # torch_xla's text is reproduced to its print precision


@pytest.mark.parametrize("name", [f"{scenario}.{kind}.txt" for scenario in REAL_RUNS
                                  for kind in ("metrics", "stdout") if (scenario, kind) != ("no_barrier", "metrics")])
def test_last_report_round_trips_every_number(name):
    path = fixture_path(name)
    source = read_source(str(path))
    assert source.warnings == []
    metrics, counters = _blocks(_last_report(path))
    final = source.final
    assert final.counters == counters
    assert set(final.metrics) == set(metrics)
    for metric_name, fields in metrics.items():
        block = final.metrics[metric_name]
        assert block.total_samples == int(fields["TotalSamples"])
        _assert_same_value(block.kind, fields["Accumulator"], block.accumulator)
        if "ValueRate" in fields:
            _assert_same_value(block.kind, fields["ValueRate"].removesuffix(" / second"), block.value_rate)
            assert block.rate == float(fields["Rate"].removesuffix(" / second"))
        expected = [part.split("=") for part in fields["Percentiles"].split("; ")]
        assert [label for label, _ in block.percentiles] == [label for label, _ in expected]
        for (_, value), (_, text) in zip(block.percentiles, expected):
            _assert_same_value(block.kind, text, value)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_step_record_is_in_the_series(scenario):
    path = fixture_path(f"{scenario}.metrics.txt")
    records = path.read_text().split("[MetricsData; step=")[1:]
    report = load(str(path))
    steps = report.steps
    assert len(steps) == len(records) == 24
    for index, record in enumerate(records):
        row = steps.iloc[index]
        metrics, counters = _blocks(record)
        assert row["step"] == int(record.split("]", 1)[0])
        assert row["steps"] == counters["MarkStep"]
        assert row["compiles"] == int(metrics["CompileTime"]["TotalSamples"])
        assert row["transfers_from_device"] == int(metrics.get("TransferFromDeviceTime", {}).get("TotalSamples", 0))
        assert row["compile_time_ns"] == units.parse_time(metrics["CompileTime"]["Accumulator"])
        for name, value in counters.items():
            if name.startswith("aten::"):
                assert row[name] == value


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_debug_log_blocks_are_all_read(scenario):
    path = fixture_path(f"{scenario}.debug.txt")
    text = path.read_text()
    source = read_source(str(path))
    assert source.warnings == []
    debug = source.debug
    assert debug.compiles == text.count("Compilation Analysis: Compilation Cause")
    assert debug.run.executions == text.count("Execution Analysis: Execution Cause")
    hashes = set(re.findall(r"Compilation Analysis:   Graph Hash: (\w+)", text))
    assert {event.graph_hash for event in debug.run.compiled} == hashes
    assert all(event.site.startswith("/home/user/run/scenarios.py:") for event in debug.run.compiled)
    assert all(event.computation_hash and event.sizes for event in debug.run.compiled)
    printed = [line.split("pt-xla-profiler: ", 1)[1].rstrip() for line in text.splitlines()
               if line.startswith("pt-xla-profiler: ")]
    assert sum(times for _, _, times in debug.profiler.values()) == len(printed)
    sizes = re.findall(r"Post Compilation Analysis: Graph input size: (\S+) GB", text)
    assert [f"{event.sizes['input_bytes'] / 1024**3:.6f}" for event in debug.run.compiled] == sizes
    inputs = re.findall(r"Compilation Analysis:   Number of Graph Inputs: (\d+)", text)
    assert [event.inputs for event in debug.run.compiled] == [int(n) for n in inputs]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_auto_metrics_mirror_matches_what_torch_xla_printed(scenario):
    """Our copy of PyTorch/XLA's rules, run on every step record, prints exactly its lines."""
    debug_text = fixture_path(f"{scenario}.debug.txt").read_text()
    printed = {line.split("pt-xla-profiler: ", 1)[1].rstrip() for line in debug_text.splitlines()
               if "pt-xla-profiler: " in line}
    ours = set()
    for record in fixture_path(f"{scenario}.metrics.txt").read_text().split("[MetricsData; step=")[1:]:
        metrics, counters = _blocks(record)
        ours.update(analysis.auto_metrics_messages(
            steps=counters["MarkStep"], compiles=int(metrics["CompileTime"]["TotalSamples"]),
            transfers=int(metrics.get("TransferFromDeviceTime", {}).get("TotalSamples", 0)), counters=counters))
    assert ours == {line.strip() for line in printed}
    last = set(auto_metrics_lines(load(str(fixture_path(f"{scenario}.metrics.txt")))))
    assert last <= ours


def _problems(report):
    return [f for f in report.findings if f.severity in (analysis.WARNING, analysis.ERROR)]


@pytest.mark.parametrize("kinds", [("metrics",), ("metrics", "debug"), ("stdout",), ("debug",),
                                   ("metrics", "debug", "stdout")])
def test_healthy_run_raises_no_false_alarm(kinds):
    report = load([str(fixture_path(f"healthy.{kind}.txt")) for kind in kinds])
    assert _problems(report) == []
    assert report.verdict() == "healthy"
    healthy = next(f for f in report.findings if f.rule == "healthy")
    # A PyTorch/XLA debug log alone sees only the barriers that ran a graph: its count is named so.
    steps = healthy.numbers["graph_steps" if kinds == ("debug",) else "steps"]
    assert steps == 24 and healthy.numbers["compiles"] == 1


@pytest.mark.parametrize("kinds", [("metrics",), ("metrics", "debug")])
def test_dynamic_shape_is_recompilation_from_a_changing_shape(kinds):
    report = load([str(fixture_path(f"dynamic_shape.{kind}.txt")) for kind in kinds])
    problems = _problems(report)
    assert [f.rule for f in problems] == ["recompilation"]
    finding = problems[0]
    assert finding.severity == analysis.ERROR
    assert "every step" in finding.title and "24 compiles in 24 steps" in finding.title
    assert "shape" in " ".join(finding.evidence) and "pad" in finding.fix.lower()
    assert finding.numbers["compiles_after_warmup"] == 14
    assert any(source.endswith(":1363") for source in finding.sources)  # step record of the first late compile
    if "debug" in kinds:
        assert any("24 different graphs, all with 7 inputs and 16 outputs" in line for line in finding.evidence)


def test_dynamic_shape_from_debug_log_alone():
    report = load(str(fixture_path("dynamic_shape.debug.txt")))
    finding = next(f for f in _problems(report) if f.rule == "recompilation")
    assert finding.severity == analysis.ERROR and finding.numbers["compiles"] == 24
    assert "shape" in " ".join(finding.evidence) and "Pad" in finding.fix


@pytest.mark.parametrize("kinds", [("metrics",), ("metrics", "debug"), ("stdout",)])
def test_fallback_names_both_ops_and_the_transfers_they_force(kinds):
    report = load([str(fixture_path(f"fallback.{kind}.txt")) for kind in kinds])
    fallbacks = {f.subject: f for f in report.findings if f.rule == "cpu-fallback"}
    assert set(fallbacks) == {"aten::nonzero", "aten::median.dim_values"}
    assert all(f.numbers["count"] == 24 and f.severity == analysis.WARNING for f in fallbacks.values())
    assert "nonzero" in fallbacks["aten::nonzero"].fix and "kthvalue" in fallbacks["aten::median.dim_values"].fix
    transfers = next(f for f in report.findings if f.rule == "host-transfers")
    assert transfers.numbers["transfers"] == 48 and "fallback" in transfers.title
    recompile = next(f for f in report.findings if f.rule == "recompilation")
    assert recompile.numbers["compiles"] == 13
    if kinds != ("stdout",):
        assert "aten::nonzero" in " ".join(recompile.evidence)  # data-dependent shapes named as the cause


def test_fallback_recompilation_is_the_same_finding_from_every_input_that_holds_when_it_compiled():
    """Per-step metrics, or a single report beside the debug log, tell the 9 warm-up compiles from the 4 late
    ones: the same title and the same compiles after warm-up. A single report alone cannot: it gives no price and
    says why, rather than a guess that disagrees with the others."""
    findings = {kinds: next(f for f in load([str(fixture_path(f"fallback.{kind}.txt")) for kind in kinds]).findings
                            if f.rule == "recompilation")
                for kinds in [("metrics",), ("metrics", "debug"), ("stdout", "debug"), ("stdout",), ("debug",)]}
    timed = [findings[k] for k in [("metrics",), ("metrics", "debug"), ("stdout", "debug")]]
    assert {f.title for f in timed + [findings[("debug",)]]} == {"Still compiling after warm-up: 4 new graphs in 14 steps"}
    # The per-step records measure the 4 late compiles; beside a single report they are priced at the mean.
    assert findings[("metrics",)].cost_ns == findings[("metrics", "debug")].cost_ns
    mean = 7.77e9 / 13
    assert findings[("stdout", "debug")].cost_ns == pytest.approx(4 * mean, rel=0.01)
    assert "mean compile time" in findings[("stdout", "debug")].cost_text()
    for finding in timed:  # static shapes keep the 9 warm-up graphs: every late compile is saved
        assert "~9 compiles" in finding.saving and finding.saving.endswith(
            units.compact_time_ns(finding.cost_ns)), finding.saving
    alone = findings[("stdout",)]
    assert alone.cost_ns is None and alone.cost_text().startswith("not in this input"), alone.cost_text()
    # nonzero's output shape follows the data: every input, the debug log alone included, gives that fix.
    # (Inputs that time the run add the persistent cache's advice after it.)
    assert all(f.fix.startswith("Keep shapes static: replace boolean-mask indexing and nonzero")
               for f in findings.values()), {k: f.fix for k, f in findings.items()}


def test_fallback_from_debug_log_alone_names_the_ops():
    report = load(str(fixture_path("fallback.debug.txt")))
    assert {f.subject for f in report.findings if f.rule == "cpu-fallback"} == {"aten::nonzero",
                                                                                "aten::median.dim_values"}


@pytest.mark.parametrize("kinds", [("metrics",), ("metrics", "debug"), ("stdout",)])
def test_item_every_step_is_a_transfer_every_step(kinds):
    report = load([str(fixture_path(f"item_every_step.{kind}.txt")) for kind in kinds])
    problems = _problems(report)
    assert [f.rule for f in problems] == ["host-transfers"]
    finding = problems[0]
    assert finding.numbers["transfers"] == 24 and finding.numbers["item_calls"] == 24
    assert "every step" in finding.title and ".item()" in finding.title
    assert "step closure" in finding.fix or "add_step_closure" in finding.fix
    if "debug" in kinds:
        assert any("scenarios.py:19" in line for line in finding.evidence)


def test_item_every_step_from_debug_log_alone_points_at_the_line():
    report = load(str(fixture_path("item_every_step.debug.txt")))
    # PyTorch/XLA's "TransferFromDeviceTime too frequent: 24 counts during 24 steps" gives the rate; the
    # execution blocks give the line that reads the value.
    finding = next(f for f in _problems(report) if f.rule == "host-transfers")
    assert finding.numbers["transfers"] == 24 and finding.numbers["steps"] == 24
    assert any("scenarios.py:19 forced 24 executions" in line for line in finding.evidence)


def test_fixture_directory_has_every_scenario():
    assert {path.name.split(".")[0] for path in FIXTURES.glob("*.txt")} == set(REAL_RUNS)
