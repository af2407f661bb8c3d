"""An op's tracing time leaves out the compiles, executions, transfers and CPU kernels that run inside it.

A `.item()` or a CPU fallback op runs the pending graph in the middle of its op: the graph compiles, runs and
is copied to the host before the op returns. Those spans are timed as themselves (compile, execution,
transfer, fallback); the op's tracing time is what is left, so the time breakdown counts each span once.
"""

from __future__ import annotations

import time

import torch

from xladev.events import Fallback, Compile, Execute, Ops, TransferFromDevice, TransferToDevice


def _spans_ns(events) -> int:
    """The measured spans the events report: compiles, executions, transfers both ways and CPU kernels."""
    return (sum(e.compile_ns for e in events.of(Compile)) + sum(e.execute_ns for e in events.of(Execute))
            + sum(e.duration_ns for e in events.of(TransferFromDevice))
            + sum(e.duration_ns for e in events.of(TransferToDevice))
            + sum(e.cpu_ns for e in events.of(Fallback)))


def _timed(events, fn) -> tuple[int, int, int]:
    """Runs `fn` and publishes its ops; returns (wall ns, tracing ns, spans ns) of what it did."""
    from xladev.runtime.execute.execution import execution

    # The ops recorded before (the test's own uploads) are published now: else the first graph `fn` runs would
    # publish their tracing time inside its window.
    execution.flush_ops()
    events.clear()
    start = time.perf_counter_ns()
    fn()
    wall = time.perf_counter_ns() - start
    execution.flush_ops()  # the ops recorded by `fn`, published now (a barrier would add a graph of its own)
    return wall, sum(e.tracing_ns for e in events.of(Ops)), _spans_ns(events)


def test_a_read_that_compiles_inside_its_op_is_not_counted_as_tracing(dev, events):
    # A shape of its own, so the read compiles a new graph inside `aten::_local_scalar_dense`.
    x = torch.arange(37.0).to(dev)

    def read():
        ((x * 3 + 1).sum()).item()

    wall, tracing, spans = _timed(events, read)
    assert events.of(Compile) and events.of(TransferFromDevice)
    # Every span ran inside `read`, each counted once: together they fit in its wall time.
    assert 0 <= tracing and tracing + spans <= wall, (tracing, spans, wall)


def test_a_cpu_fallback_inside_an_op_is_not_counted_as_tracing(dev, events):
    x = torch.tensor([[3.0, -1.0, 2.0, 7.0], [0.5, 4.0, -2.0, 1.5], [2.5, -3.0, 1.0, 0.0]]).to(dev)

    def select():
        selected = (x * 2 - 1)[x > 0]  # nonzero runs on the CPU: the pending graph compiles inside the op
        assert selected.shape[0] == 8

    wall, tracing, spans = _timed(events, select)
    assert events.of(Fallback) and events.of(Compile)
    assert 0 <= tracing and tracing + spans <= wall, (tracing, spans, wall)


def test_the_wait_for_a_graph_running_behind_a_read_is_not_counted_as_tracing(dev):
    # With listeners that accept late executions, the graph runs while the read waits for it and the execution
    # watcher announces it: that wait is the graph's execution time, reported once, not the read op's tracing
    # time too. A graph long enough to run for milliseconds makes a double count plain.
    import xladev
    from tests.conftest import EventLog
    from xladev.events import bus

    x = torch.randn(384, 384).to(dev)
    xladev.mark_step()
    events = EventLog()
    sub = bus.subscribe(events, wants_frames=True, late_executions_ok=True)
    try:
        assert bus.executions_may_lag
        _check_read_of_a_long_graph(events, x)
    finally:
        sub.close()


def _check_read_of_a_long_graph(events, x):
    def read():
        y = x
        for _ in range(12):
            y = torch.tanh(y @ x)
        y.sum().item()

    wall, tracing, spans = _timed(events, read)
    [executed] = events.of(Execute)
    assert executed.execute_ns > 0 and events.of(TransferFromDevice)
    assert 0 <= tracing and tracing + spans <= wall, (tracing, spans, wall)
