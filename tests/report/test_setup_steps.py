"""Set-up is not a per-step problem: reads and recompiles in the first steps (`analysis.SETUP_STEPS`), and reads and
compiles after the last barrier (a final print), are one-time; the same reads and recompiles in the loop are not.

Event logs and metrics files are written here record by record, so each case holds exactly the facts it tests;
tests/report/test_healthy_runs.py checks real runs.
"""

from __future__ import annotations

import pytest

from tests.report.helpers import metrics_file, step_report, write
from xladev import analysis
from xladev.report import load
from xladev.schema import records as rec

STEPS = 12
SITE = "train.py:9 (main)"
BARRIER = {"kind": "USER_MARK_STEP", "text": "user torch_xla.sync", "detail": ""}


def _log(tmp_path, *, reads_in: list[int], recompiles_in: list[int] = (), kind: str = "constant") -> str:
    """An event log of STEPS steps: one graph a step, a read in each step of `reads_in` (STEPS: after the last
    barrier), and a recompile at SITE for a changed `kind` in each step of `recompiles_in` (STEPS: after it)."""
    lines = [rec.Header(command="train.py")]
    t = 0
    change = ("constant arg1 baked into xla::getitem changed: 0 -> 1" if kind == "constant"
              else "input 0, created at main@train.py:5: shape f32[8] -> f32[9] (dim 0: 8 -> 9)")
    for step in range(STEPS + 1):
        t += 1_000_000
        if step == 0:
            lines.append(rec.Compile(t, step, hash="g0", compile_ns=1000, site=SITE))
        if step in recompiles_in:
            lines.append(rec.Compile(t, step, hash=f"r{step}", compile_ns=1000, site=SITE, recompile={
                "previous": "g0", "changes": [change], "graphs_at_site": 2, "compile_ns_at_site": 2000}))
        if step in reads_in:
            lines.append(rec.Transfer(t, step, dir="from_device", bytes=4, ns=1000, kind=".item()", site=SITE))
        if step < STEPS:
            lines.append(rec.Execute(t, step, hash="g0", execute_ns=1000, site=SITE, cause=BARRIER))
            lines.append(rec.Step(t, step, interval_ns=1_000_000))
    lines.append(rec.End(t + 1, steps=STEPS))
    return write(tmp_path, "run.jsonl", "\n".join(rec.dumps(r) for r in lines) + "\n")


def _rules(report) -> set[str]:
    return {f.rule for f in report.findings if f.severity != analysis.INFO}


def test_reads_in_set_up_and_after_the_last_step_are_one_time(tmp_path):
    # DDP's constructor and its second forward read (steps 0 and 1); the final print reads after the last barrier.
    report = load(_log(tmp_path, reads_in=[0, 0, 0, 1, 1, STEPS, STEPS, STEPS]))
    assert report.verdict() == "healthy", [(f.rule, f.title) for f in report.findings]
    healthy = report.findings[0]
    assert any("all one-time" in line for line in healthy.evidence), healthy.evidence


def test_reads_every_step_after_set_up_are_found_and_counted_there(tmp_path):
    report = load(_log(tmp_path, reads_in=[0, 0, 0, 1, *range(2, STEPS), STEPS]))
    finding = next(f for f in report.findings if f.rule == "host-transfers")
    assert finding.title.startswith("A device→host transfer every step")
    assert finding.numbers["transfers_after_setup"] == STEPS - 2 and finding.numbers["steps_after_setup"] == STEPS - 2
    assert f"{STEPS - 2} device→host transfers in the {STEPS - 2} steps after set-up" in finding.evidence[0]


def test_a_changed_constant_in_set_up_is_one_time_but_in_the_loop_it_recompiles(tmp_path):
    assert "recompilation" not in _rules(load(_log(tmp_path, reads_in=[], recompiles_in=[0])))
    found = load(_log(tmp_path, reads_in=[], recompiles_in=[4]))
    assert "recompilation" in _rules(found) and "for a changed constant" in found.findings[0].title


def test_a_compile_after_the_last_step_is_not_recompilation(tmp_path):
    # A final print of a value no step read: its graph compiles once, after the loop.
    report = load(_log(tmp_path, reads_in=[STEPS], recompiles_in=[STEPS], kind="input shape"))
    assert report.verdict() == "healthy", [(f.rule, f.title) for f in report.findings]


def _metrics(transfers_by_step: list[int]) -> str:
    """A metrics file of one report per step; `transfers_by_step[i]`: the transfers counted by the end of step i."""
    return metrics_file([step_report(step, compiles=1, transfers=n, items=n) for step, n in enumerate(transfers_by_step)])


@pytest.mark.parametrize("by_step,found", [
    ([4, 8] + [8] * (STEPS - 2), False),                    # DDP's set-up reads, then none
    ([4, 8] + [8 + i for i in range(1, STEPS - 1)], True),  # then one read every step
])
def test_a_metrics_file_judges_the_reads_after_set_up(tmp_path, by_step, found):
    report = load(write(tmp_path, "metrics.txt", _metrics(by_step)))
    assert ("host-transfers" in _rules(report)) is found, [(f.rule, f.title) for f in report.findings]


def test_the_debug_summary_states_the_reads_after_set_up_and_the_report_reads_them():
    line = analysis.steady_transfers_line(transfers=3, steps=10, one_time=7)
    assert line == "Device->host transfers after set-up: 3 in 10 steps (7 more in set-up, the first 2 steps, or after the last step)"
    assert analysis.parse_steady_transfers_line(line) == (3, 10)
    assert analysis.parse_steady_transfers_line("Device->host transfers: 3") is None
