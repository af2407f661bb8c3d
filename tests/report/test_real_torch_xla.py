"""`xladev report` on real PyTorch/XLA 2.9 outputs of the common mistakes (tests/fixtures/torch_xla/mistakes.py):
the verdict, the first finding, its user line and its numbers, from every input and every combination, and the
same numbers whichever input holds them.

The fixtures' README says what a correct diagnosis of each run is; the line numbers below are mistakes.py's.
"""

from __future__ import annotations

import pytest

from tests.report.helpers import FIXTURES, MISTAKES, SPMD_RUNS, fixture_path
from xladev import analysis
from xladev.report import load
from xladev.report.inputs import read_source

# What each run wrote: PyTorch/XLA writes XLA_METRICS_FILE at a sync only, so a run with none has no metrics file
# and its final metrics_report() (stdout) stands in for it.
COMBINATIONS = [("metrics",), ("debug",), ("stdout",), ("metrics", "debug")]
NO_BARRIER_COMBINATIONS = [("stdout",), ("debug",), ("stdout", "debug")]
READ_LINE = "mistakes.py:31"  # print(f"final loss {loss.item():.4f}") after the loop
SYNC_LINE = "mistakes.py:30"  # the loop's torch_xla.sync()


def _load(name: str, kinds: tuple[str, ...]):
    return load([str(fixture_path(f"{name}.{kind}.txt")) for kind in kinds])


def _problems(report) -> list[analysis.Finding]:
    return [f for f in report.findings if f.severity in (analysis.WARNING, analysis.ERROR)]


def _text(finding: analysis.Finding) -> str:
    return " ".join([finding.title, finding.detail, *finding.evidence, finding.fix])


@pytest.mark.parametrize("kinds", NO_BARRIER_COMBINATIONS)
def test_no_barrier_is_the_first_finding_with_the_read_line(kinds):
    report = _load("no_barrier", kinds)
    problems = _problems(report)
    assert [f.rule for f in problems] == ["graph-growing"], [(f.rule, f.title) for f in report.findings]
    first = problems[0]
    assert "no step was ever marked" in first.title and "1 graph" in first.title
    assert "no step barrier" in _text(first)
    assert first.numbers["graphs"] == 1 and first.numbers["executions"] == 1
    # PyTorch/XLA names the line of the read that ran the graph, never the loop's line: the report says so.
    assert "the loop's line: not in this input" in _text(first)
    if "debug" in kinds:
        assert READ_LINE in first.title
        assert "that graph takes 29 inputs" in first.evidence
    if "stdout" in kinds:  # a metrics report prices it: the whole run's tracing and compile time
        assert first.cost_ns == pytest.approx(744e6, rel=0.01)
    assert "torch_xla.sync()" in first.fix and "MpDeviceLoader" in first.fix
    assert "xladev" not in first.fix  # a real PyTorch/XLA run is told PyTorch/XLA's API


def test_no_barrier_numbers_agree_across_inputs():
    firsts = [_problems(_load("no_barrier", kinds))[0] for kinds in NO_BARRIER_COMBINATIONS]
    assert {(f.numbers["graphs"], f.numbers["executions"]) for f in firsts} == {(1, 1)}
    costs = {f.cost_ns for f in firsts if f.cost_ns is not None}
    assert len(costs) == 1  # priced the same by every input that holds times


@pytest.mark.parametrize("name, line", [("branch_on_loss", "mistakes.py:28"), ("print_loss", "mistakes.py:29")])
@pytest.mark.parametrize("kinds", COMBINATIONS)
def test_read_before_the_sync_is_a_transfer_every_step_at_its_line(name, line, kinds):
    report = _load(name, kinds)
    problems = _problems(report)
    assert [f.rule for f in problems] == ["host-transfers"], [(f.rule, f.title) for f in report.findings]
    first = problems[0]
    assert report.verdict() == analysis.WARNING
    assert first.numbers["steps"] == 12
    # stdout's final report was printed after the loop's last read and the final loss.item(): 13 reads in 12
    # steps, without the step records that would set the last one apart.
    assert ("1.1 per step" if kinds == ("stdout",) else "every step") in first.title, first.title
    assert "bool(tensor)" in first.fix
    assert "xladev" not in first.fix
    if "debug" in kinds:
        assert any(f"{line} forced 12 executions" in item for item in first.evidence), first.evidence
        assert "PT_XLA_DEBUG_LEVEL=2 names the line" not in first.fix  # the input already names it
    elif name == "print_loss":  # no input here names the line of a print: the fix says which does
        assert "PT_XLA_DEBUG_LEVEL=2 names the line" in first.fix, first.fix
    else:  # bool(tensor) counts as .item(): the title says so, and the fix is the one for scalar reads
        assert ".item() or bool()" in first.title and "if tensor:" in first.fix, (first.title, first.fix)


@pytest.mark.parametrize("name", ["branch_on_loss", "print_loss"])
def test_read_before_the_sync_numbers_agree_across_inputs(name):
    firsts = {kinds: _problems(_load(name, kinds))[0] for kinds in COMBINATIONS}
    # The 12 reads inside the loop, whichever input tells them; stdout's final report also holds the read after
    # the loop (the final loss.item()), which the step records of the metrics file end before.
    assert {f.numbers["transfers"] for kinds, f in firsts.items() if kinds != ("stdout",)} == {12}
    assert firsts[("stdout",)].numbers["transfers"] == 13
    costs = {kinds: f.cost_ns for kinds, f in firsts.items()}
    assert costs[("metrics",)] == costs[("metrics", "debug")] > 0
    assert costs[("debug",)] is None  # a PyTorch/XLA debug log holds no times
    # stdout's report holds one read more (the final loss.item()), so its transfer time is at least as long.
    assert costs[("stdout",)] >= costs[("metrics",)]


def test_bool_of_a_tensor_counts_as_local_scalar_dense():
    """`if loss > 10:` calls aten::_local_scalar_dense like .item(): 12 of them in 12 steps."""
    first = _problems(_load("branch_on_loss", ("metrics",)))[0]
    assert first.numbers["item_calls"] == 12
    assert first.title.endswith("from .item() or bool()"), first.title  # the script never calls .item()
    first = _problems(_load("print_loss", ("metrics",)))[0]
    assert first.numbers["item_calls"] == 0  # print(tensor) reads the tensor without _local_scalar_dense


@pytest.mark.parametrize("kinds", COMBINATIONS)
def test_python_float_per_step_does_not_recompile(kinds):
    """PyTorch/XLA uploads a Python scalar other than 0 and 1 as device data: one graph, no recompilation."""
    report = _load("scalar_lr", kinds)
    assert _problems(report) == []
    assert not any(f.rule == "recompilation" for f in report.findings)
    healthy = next(f for f in report.findings if f.rule == "healthy")
    steps = healthy.numbers["graph_steps" if kinds == ("debug",) else "steps"]
    assert steps == 12 and healthy.numbers["compiles"] == 1
    uploads = [f for f in report.findings if f.rule == "device-data-cache-miss"]
    if kinds == ("debug",):  # the debug log holds no counters: the uploads are not in it
        assert uploads == [] and report.verdict() == "healthy"
    else:
        assert [f.severity for f in uploads] == [analysis.INFO] and report.verdict() == analysis.INFO


@pytest.mark.parametrize("kinds", COMBINATIONS)
def test_slice_length_from_the_step_recompiles_every_step(kinds):
    report = _load("slice_length", kinds)
    problems = _problems(report)
    assert [f.rule for f in problems] == ["recompilation"], [(f.rule, f.title) for f in report.findings]
    first = problems[0]
    assert first.numbers["compiles"] == 12 and first.numbers["steps"] == 12
    assert "12 compiles in 12 steps" in first.title
    if "debug" in kinds:
        text = _text(first)
        # Every graph has the same inputs: what changed is a constant inside the graph, which the dumps do not name.
        assert "12 different graphs, all with 7 inputs and 14 outputs: the same code traced again" in text, text
        assert "different shapes" not in text, text
        assert "constant inside the graph" in text and "do not name" in text, text
        assert SYNC_LINE in text
        assert "drop_last" not in first.fix and "slice" in first.fix, first.fix


def test_slice_length_numbers_agree_across_inputs():
    firsts = {kinds: _problems(_load("slice_length", kinds))[0] for kinds in COMBINATIONS}
    assert {(f.numbers["compiles"], f.numbers["steps"]) for f in firsts.values()} == {(12, 12)}
    costs = {kinds: f.cost_ns for kinds, f in firsts.items() if f.cost_ns is not None}
    # Every step compiled, warm-up included: the step records price it as a single report does.
    assert len(set(costs.values())) == 1, costs
    assert firsts[("metrics",)].saving == firsts[("metrics", "debug")].saving


@pytest.mark.parametrize("name", ["healthy_loader", "healthy_compile"])
@pytest.mark.parametrize("kinds", COMBINATIONS)
def test_healthy_runs_get_no_warning(name, kinds):
    report = _load(name, kinds)
    assert _problems(report) == [], [(f.rule, f.title) for f in _problems(report)]
    assert report.verdict() == "healthy"
    healthy = next(f for f in report.findings if f.rule == "healthy")
    assert healthy.numbers["compiles"] == (1 if name == "healthy_loader" else 6)


def test_a_loaders_empty_barriers_never_give_two_step_counts():
    """MpDeviceLoader's run: 12 batches, 14 barriers (MarkStep), 2 of them with nothing to run. The debug log sees
    only the 12 that ran a graph, so it says that, under another name, rather than a second step count."""
    numbers = {kinds: next(f for f in _load("healthy_loader", kinds).findings if f.rule == "healthy").numbers
               for kinds in COMBINATIONS}
    assert {n["steps"] for n in numbers.values() if "steps" in n} == {14}
    assert "steps" not in numbers[("debug",)] and numbers[("debug",)]["graph_steps"] == 12
    debug_only = next(f for f in _load("healthy_loader", ("debug",)).findings if f.rule == "healthy")
    assert "12 steps that ran a graph" in debug_only.evidence[0], debug_only.evidence


def test_dynamo_input_sync_is_not_a_user_read():
    """torch_xla's dynamo bridge syncs a compiled graph's pending inputs under PyTorch/XLA's catch-all cause
    ("most likely user code trying to access tensor value"); its frames are the bridge and torch.fx's generated
    `<eval_with_key>` code, never the user's line."""
    report = _load("healthy_compile", ("debug",))
    assert not any("<eval_with_key>" in _text(f) for f in report.findings)
    assert not any(f.rule == "early-sync" for f in report.findings)


@pytest.mark.parametrize("name", ["slice_length", "dynamic_shape"])
def test_a_run_compiling_every_step_has_one_recompilation_cost(name):
    """Every step compiled, warm-up included: the per-step records and the final report hold the same compile
    count and time, and price the recompilation alike (all but the first few graphs' share)."""
    costs = {kinds: next(f for f in _load(name, kinds).findings if f.rule == "recompilation").cost_ns
             for kinds in [("metrics",), ("stdout",), ("metrics", "debug")]}
    assert None not in costs.values() and len(set(costs.values())) == 1, costs


@pytest.mark.parametrize("name", MISTAKES + SPMD_RUNS)
def test_every_output_is_read_whole(name):
    """Each real output reads without a warning: every debug block, every step record, the printed report."""
    for path in sorted(FIXTURES.glob(f"{name}.*.txt")):
        source = read_source(str(path))
        assert source.warnings == [], (path.name, source.warnings)
        text = path.read_text()
        if path.name.endswith(".debug.txt"):
            assert source.debug.compiles == text.count("Compilation Analysis: Compilation Cause")
            assert source.run.executions == text.count("Execution Analysis: Execution Cause")
        elif path.name.endswith(".metrics.txt"):
            assert len(load(str(path)).steps) == text.count("[MetricsData; step=")
        else:
            assert source.final is not None and source.final.counters  # the final metrics_report()


@pytest.mark.parametrize("name", MISTAKES)
def test_the_pre_2_8_wording_gets_the_same_diagnosis(name, tmp_path):
    """PyTorch/XLA before 2.8 printed `mark_step` where 2.9 prints `torch_xla.sync` in every cause ("user
    mark_step", "mark_step in parallel loader at step end", "... before mark_step"); the same log in that
    wording is diagnosed the same."""
    text = fixture_path(f"{name}.debug.txt").read_text()
    old = "\n".join(line.replace("torch_xla.sync", "mark_step") if line.startswith(("Compilation Analysis:   ",
                    "Execution Analysis:   ")) and "(" not in line else line for line in text.splitlines())
    assert old != text
    path = tmp_path / f"{name}.debug.txt"
    path.write_text(old)
    new_report, old_report = _load(name, ("debug",)), load(str(path))
    assert old_report.verdict() == new_report.verdict()
    assert [(f.rule, f.numbers) for f in old_report.findings] == [(f.rule, f.numbers) for f in new_report.findings]


@pytest.mark.parametrize("kinds", COMBINATIONS)
def test_an_spmd_run_counts_its_replicated_executions(kinds):
    """spmd.py: 12 steps in PyTorch/XLA's SPMD mode over 4 devices. Its metrics time each run as
    ExecuteReplicatedTime and count it as ExecuteReplicated (no ExecuteTime at all): the report reads them as the
    run's executions, and the run is healthy."""
    report = load([str(fixture_path(f"spmd_data.{kind}.txt")) for kind in kinds])
    assert report.verdict() == "healthy", [(f.rule, f.title) for f in report.findings]
    primary = report.primary_metrics(report.sources)
    if primary is not None:
        numbers = report.final_numbers(primary)
        assert numbers["executions"] == 12 and numbers["steps"] == 12
        assert numbers["execute_time_ns"] == pytest.approx(191.9e6, rel=0.01)
        healthy = next(f for f in report.findings if f.rule == "healthy")
        assert healthy.numbers["steps"] == 12 and healthy.numbers["compiles"] == 2
        execute = report.time_breakdowns[None].parts["execute"]
        assert execute == pytest.approx(numbers["execute_time_ns"])
