"""Asynchronous execution: a barrier dispatches its graph and returns; results, counters and event order hold.

With only lag-tolerant subscribers (the always-on counters), `mark_step()` leaves the step's graph
running while the next step records. Training still matches eager CPU, every execution is announced
once with the step it belongs to, `met` queries include the step just ended, and a subscriber that
orders events by barrier makes barriers wait again.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import xladev
import xladev.debug.metrics as met
from examples import mlp
from xladev.events import Execute, Step, bus
from xladev.runtime.api.runtime_state import executor

STEPS = 8
# Shapes of its own: graphs this file compiles must not be cache hits for other tests, nor theirs for it.
CFG = mlp.Config(hidden=72, depth=1)


def test_training_with_overlapped_steps_matches_cpu():
    xladev.mark_step(wait=True)
    assert bus.executions_may_lag, "a subscriber that needs exact barriers leaked from an earlier test"
    dispatched_async = []
    executed: list[Execute] = []

    def on_step(step, loss):
        dispatched_async.append(bool(executor.in_flight))

    with bus.subscribe(executed.append, Execute, late_executions_ok=True):
        assert bus.executions_may_lag
        first_step = executor.step
        xla = mlp.train("xla", STEPS, seed=0, cfg=CFG, on_step=on_step)
        xladev.wait_device_ops()
    cpu = mlp.train("cpu", STEPS, seed=0, cfg=CFG)
    for step, (a, b) in enumerate(zip(xla.losses, cpu.losses)):
        assert a == pytest.approx(b, rel=1e-4), f"step {step}: xla loss {a} vs cpu loss {b}"
    for key in cpu.params:
        torch.testing.assert_close(xla.params[key], cpu.params[key], rtol=1e-4, atol=1e-5, msg=key)
    assert any(dispatched_async), "no barrier left its graph running"
    steps = [e.step for e in executed if e.step >= first_step]
    assert len(steps) >= STEPS and steps == sorted(steps), f"each step's execution once, in order: {steps}"
    assert all(e.execute_ns > 0 for e in executed)


def test_metrics_queries_include_the_step_just_dispatched(dev):
    xladev.mark_step(wait=True)
    before = met.counter_value("ExecuteGraph") or 0
    samples_before = met.metric_data("ExecuteTime")[0]
    x = torch.randn(64, 64, device=dev)
    (x @ x).relu().sum()
    y = (x @ x).tanh()
    xladev.mark_step()
    assert executor.in_flight, "the barrier should have returned with its graph still unannounced"
    assert met.counter_value("ExecuteGraph") == before + 1
    assert met.metric_data("ExecuteTime")[0] == samples_before + 1
    assert not executor.in_flight
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu()).tanh(), rtol=1e-5, atol=1e-5)


def test_an_exact_subscriber_sees_each_execution_before_its_step_ends(dev):
    order = []
    xladev.mark_step()
    x = torch.ones(3, device=dev)
    x.add_(1)
    xladev.mark_step()  # left running: nobody needs it yet
    with bus.subscribe(lambda e: order.append(type(e).__name__), (Execute, Step)):
        assert order == [], "an execution dispatched before subscribing must not reach the new subscriber"
        for _ in range(3):
            x.mul_(2)
            xladev.mark_step()
            assert not executor.in_flight
    assert order == ["Execute", "Step"] * 3
    assert x.cpu().tolist() == [16.0, 16.0, 16.0]


def test_process_exits_cleanly_with_a_graph_still_running(tmp_path):
    script = tmp_path / "leave_running.py"
    script.write_text(
        "import torch, xladev\n"
        "x = torch.randn(256, 256, device='xla')\n"
        "for _ in range(3):\n"
        "    x = (x @ x).tanh()\n"
        "    xladev.mark_step()\n"
        "import atexit, xladev.debug.metrics as met\n"
        "atexit.register(lambda: print('executions', met.counter_value('ExecuteGraph')))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "executions 3" in result.stdout
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def failing_op():
    """A real op whose compiled graph fails while running: its lowering calls back into Python, which raises."""
    import jax

    from xladev.runtime.lowering.registry import LOWERINGS, lowers

    library = torch.library.Library("xladev_async_test", "DEF")
    library.define("refuse(Tensor x) -> Tensor")
    library.impl("refuse", lambda x: x.clone(), "CPU")
    library.impl("refuse", lambda x: torch.empty_like(x), "Meta")
    op = torch.ops.xladev_async_test.refuse.default

    def refuse(value):
        raise ValueError("the host callback refused")

    @lowers(op)
    def _lower(ctx, x):
        return jax.pure_callback(refuse, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    yield op
    LOWERINGS.pop(op, None)
    del library


@pytest.mark.parametrize("sync", [False, True], ids=["overlapped", "XLADEV_SYNC_EXECUTION"])
def test_a_graph_failing_while_running_names_its_hash_and_the_process_goes_on(failing_op, dev, tmp_path, sync):
    from xladev.runtime.execute.execution import XlaExecutionError

    xladev.mark_step(wait=True)
    hlo = tmp_path / "failed.hlo.txt"
    with xladev.config.override(sync_execution=sync, save_hlo_file=str(hlo)):
        # XLA's CPU client runs a graph with host callbacks at dispatch, so this one fails in the barrier;
        # a graph failing later would fail the next read, barrier or metrics query the same way.
        with pytest.raises(XlaExecutionError, match=r"graph [0-9a-f]{32} failed while running: .*"
                                                    r"ValueError: the host callback refused\. HLO saved to"):
            bad = failing_op(torch.ones(4, device=dev) * 3)
            xladev.mark_step()
            bad.cpu()
    assert hlo.exists() and "custom_call" in hlo.read_text().lower()
    # Nothing is lost for the graphs after it: a new step computes and reads normally.
    good = torch.arange(4.0, device=dev) * 2
    xladev.mark_step()
    assert good.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
