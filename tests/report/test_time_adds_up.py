"""Where the time went, on a real run whose reads and CPU fallbacks compile in the middle of an op.

Each step reads its loss (`.item()`) and selects with a boolean mask (`nonzero` runs on the CPU) on a batch of
a new size, so the graph pending at each read compiles inside that op. Every part of the breakdown is a span
counted once: per step and overall the parts fit in the wall time, and with the remainder they make it up.
"""

from __future__ import annotations

import textwrap
import time

import pytest

from tests.faults import runs
from xladev.report import load

MIDOP = textwrap.dedent("""
    import torch, xladev
    dev = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        x = torch.randn(4 + step, 8).to(dev)   # a new size each step: every read compiles
        out = model(x)
        positive = out[out > 0]                # nonzero on the CPU: the graph so far compiles inside the op
        loss = out.pow(2).mean() + positive.sum() * 0
        print("loss", loss.item())             # and again inside .item()
        loss.backward(); opt.step(); opt.zero_grad()
        xladev.mark_step()
""")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("midop")
    paths, env = runs.all_outputs_environment(tmp)
    start = time.perf_counter_ns()
    done = runs.run([runs.write_script(tmp, MIDOP)], env)
    paths["process_ns"] = time.perf_counter_ns() - start  # measured here, outside the run: a bound it cannot set
    assert done.returncode == 0, done.stderr[-3000:]
    return paths


def _adds_up(breakdown, process_ns: int) -> None:
    """The parts fit in the wall time, and with the remainder make it up within 1 %; and the parts fit in the
    process's whole life as timed from outside it, which a span counted twice (a compile inside a read, booked
    to both) would overrun."""
    assert breakdown.wall_ns and breakdown.measured_ns <= breakdown.wall_ns, (breakdown.parts, breakdown.wall_ns)
    assert breakdown.measured_ns <= process_ns, (breakdown.parts, process_ns)
    total = sum(ns for _, _, ns, _, _ in breakdown.rows())
    assert total == pytest.approx(breakdown.wall_ns, rel=0.01)


def test_the_event_logs_parts_never_overlap_per_step_or_overall(outputs):
    breakdown = load(str(outputs["log"])).time_breakdowns[None]
    assert breakdown.exact and breakdown.parts["compile"] > 0 and breakdown.parts["fallback"] > 0
    _adds_up(breakdown, outputs["process_ns"])
    assert breakdown.wall_ns <= outputs["process_ns"]
    assert len(breakdown.step_times) == 5
    for step in breakdown.step_times:  # each step's mid-op compiles are counted once, as compile time
        assert sum(step.parts.values()) <= step.wall_ns, (step.step, step.parts, step.wall_ns)


def test_the_debug_summary_of_the_same_run_adds_up_too(outputs):
    _adds_up(load(str(outputs["debug"])).time_breakdowns[None], outputs["process_ns"])


def test_the_metrics_file_of_the_same_run_gives_the_same_parts_and_no_wall_time(outputs):
    """A metrics file holds the accumulated times but not the run's wall time: its parts are the event log's
    (PyTorch/XLA's accumulators sum the same spans), and the wall time and the shares are not in it."""
    metrics = load(str(outputs["metrics"])).time_breakdowns[None]
    log = load(str(outputs["log"])).time_breakdowns[None]
    assert metrics.wall_ns is None and metrics.measured_ns <= outputs["process_ns"]
    for part in ("compile", "execute"):
        assert metrics.parts[part] == pytest.approx(log.parts[part], rel=1e-6), part
