"""A training loop without a barrier is diagnosed as such, first and priced, from every input kind.

The run is real (a small loop under xladev, every output on); PyTorch/XLA's debug log of the same mistake
is made of the real blocks of its 2.9 output (the fixtures), as it prints them for a graph run once, at
a value read, with no sync anywhere.
"""

from __future__ import annotations

import re

import pytest

from tests.report.helpers import counter_block, fixture_path, metric_block, run_script, write
from xladev import analysis
from xladev.report import load
from xladev.schema import units

LOOP = """
    import torch
    import xladev
    import xladev.debug.metrics as met

    torch.manual_seed(0)
    device = xladev.device()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = [(torch.randn(4, 8), torch.randint(0, 2, (4,))) for _ in range(20)]
    for x, y in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()
        optimizer.step()  # optimizer-step
    print(f"final loss {loss.item():.4f}")  # final-read
    print(met.metrics_report())
"""


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    return run_script(tmp_path_factory.mktemp("no_barrier"), "train.py", LOOP)


def _first(report) -> analysis.Finding:
    problems = [f for f in report.findings if f.severity != analysis.INFO]
    assert problems, [f.rule for f in report.findings]
    return problems[0]


def test_the_event_log_is_described_with_its_step_count(loop):
    source = load(str(loop.events)).sources[0]
    assert source.describe_kinds() == ["xladev event log, 0 steps"]  # its end snapshot is no step


def test_one_warning_on_stderr_however_many_steps(loop):
    warned = [line for line in loop.stderr.splitlines() if "GraphGrowthWarning" in line]
    assert len(warned) == 1 and loop.line("optimizer-step") in warned[0], loop.stderr[-2000:]


@pytest.mark.parametrize("inputs", [["events"], ["debug"], ["stdout"], ["stdout", "debug"]])
def test_the_missing_barrier_comes_first_priced_and_at_its_lines(loop, inputs):
    report = load([str(getattr(loop, name)) for name in inputs])
    first = _first(report)
    assert first.rule == "graph-growing", [(f.rule, f.title) for f in report.findings]
    rules_found = {f.rule for f in report.findings}
    # The final read of a run that never marked a step is not a per-step habit, and the compile is this
    # finding's cost, not a missing persistent cache.
    assert "early-sync" not in rules_found and "compile-time" not in rules_found, rules_found
    text = " ".join([first.title, *first.evidence])
    if inputs != ["stdout"]:  # the debug log and the event log name the loop's line and the read's
        assert loop.line("optimizer-step") in first.title, first.title
        assert loop.line("final-read") in text, text
    else:  # a metrics report has no lines: it says so
        assert "no step was ever marked" in first.title and "not in this input" in text, text
    breakdown = next(iter(report.time_breakdowns.values()))
    spent = breakdown.parts["tracing"] + breakdown.parts["compile"]
    assert first.cost_ns == pytest.approx(spent, rel=1e-9), (first.cost_ns, breakdown.parts)
    assert units.compact_time_ns(breakdown.parts["compile"]) in first.saving, first.saving
    assert units.compact_time_ns(breakdown.parts["tracing"]) in first.saving, first.saving
    assert "xladev.mark_step()" in first.fix and "torch_xla" not in first.fix, first.fix


def _torch_xla_log_without_a_barrier(inputs: int) -> str:
    """PyTorch/XLA 2.9's debug log of a loop that never syncs: its graph compiled and run once, at the read.

    Its blocks are the real ones of the item_every_step fixture's first graph (cause "most likely user code
    trying to access tensor value before torch_xla.sync", at the `.item()` line), with the inputs a whole
    loop's graph takes, and no `user torch_xla.sync` block after them; then its unlowered-op summary."""
    text = fixture_path("item_every_step.debug.txt").read_text()
    cause = "Compilation Analysis: Compilation Cause"
    second = text.index(cause, text.index(cause) + 1)
    first = text[:text.rindex("\nCompilation Analysis: ====", 0, second)]  # compile, post-compile, execute
    assert "user torch_xla.sync" not in first and first.count("Analysis: Graph Info") == 2
    summary = text[text.index("=" * 80 + "\nUnlowered Op usage summary"):].replace("count=24", "count=1")
    return re.sub(r"Number of Graph Inputs: \d+", f"Number of Graph Inputs: {inputs}", first) + summary


def test_pytorch_xla_debug_log_of_the_same_mistake(tmp_path):
    path = write(tmp_path, "debug.txt", _torch_xla_log_without_a_barrier(87))
    report = load(path)
    first = _first(report)
    assert first.rule == "graph-growing", [(f.rule, f.title) for f in report.findings]
    assert "early-sync" not in {f.rule for f in report.findings}
    text = " ".join([first.title, *first.evidence])
    assert "scenarios.py:19" in first.title and "87 inputs" in text, text
    assert "loop's line: not in this input" in text
    assert first.cost_ns is None  # PyTorch/XLA's debug log holds no times
    assert "torch_xla.sync()" in first.fix and "xladev" not in first.fix, first.fix


def test_pytorch_xla_metrics_report_of_the_same_mistake(tmp_path):
    """A report printed at the end of such a run: one compile and one execution, no MarkStep, one read."""
    compile_ns, tracing_ns = 79e9, 6e9
    text = (metric_block("CompileTime", 1, compile_ns, rate=False) + metric_block("ExecuteTime", 1, 2e9, rate=False)
            + metric_block("LazyTracing", 40_000, tracing_ns)
            + metric_block("TransferFromDeviceTime", 1, 3e5, rate=False)
            + counter_block("CachedCompile", 0) + counter_block("UncachedCompile", 1)
            + counter_block("aten::_local_scalar_dense", 1))
    report = load(write(tmp_path, "metrics.txt", text))
    first = _first(report)
    assert first.rule == "graph-growing", [(f.rule, f.title) for f in report.findings]
    assert first.cost_ns == pytest.approx(compile_ns + tracing_ns)
    assert "compile-time" not in {f.rule for f in report.findings}
    assert "torch_xla.sync()" in first.fix


def test_a_run_with_barriers_is_not_told_it_has_none():
    """PyTorch/XLA's own outputs of loops that sync every step (the fixtures): no missing-barrier finding."""
    for name in ("healthy", "item_every_step"):
        for kind in ("debug", "metrics"):
            report = load(str(fixture_path(f"{name}.{kind}.txt")))
            assert "graph-growing" not in {f.rule for f in report.findings}, (name, kind)
