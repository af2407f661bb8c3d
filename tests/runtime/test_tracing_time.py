"""An op's tracing time leaves out the compiles, executions, transfers and CPU kernels that run inside it.

A `.item()` or a CPU fallback op runs the pending graph in the middle of its op: the graph compiles, runs and
is copied to the host before the op returns. Those spans are timed as themselves (compile, execution,
transfer, fallback); the op's tracing time is what is left, so the time breakdown counts each span once.
"""

from __future__ import annotations

import time

import torch

from xladev.events import FallbackOp, GraphCompiled, GraphExecuted, OpsRecorded, TransferFromDevice, TransferToDevice


def _spans_ns(events) -> int:
    """The measured spans the events report: compiles, executions, transfers both ways and CPU kernels."""
    return (sum(e.compile_ns for e in events.of(GraphCompiled)) + sum(e.execute_ns for e in events.of(GraphExecuted))
            + sum(e.duration_ns for e in events.of(TransferFromDevice))
            + sum(e.duration_ns for e in events.of(TransferToDevice))
            + sum(e.cpu_ns for e in events.of(FallbackOp)))


def _timed(events, fn) -> tuple[int, int, int]:
    """Runs `fn` and publishes its ops; returns (wall ns, tracing ns, spans ns) of what it did."""
    events.clear()
    start = time.perf_counter_ns()
    fn()
    wall = time.perf_counter_ns() - start
    from xladev.runtime.execution import execution

    execution.flush_ops()  # the ops recorded by `fn`, published now (a barrier would add a graph of its own)
    return wall, sum(e.tracing_ns for e in events.of(OpsRecorded)), _spans_ns(events)


def test_a_read_that_compiles_inside_its_op_is_not_counted_as_tracing(dev, events):
    # A shape of its own, so the read compiles a new graph inside `aten::_local_scalar_dense`.
    x = torch.arange(37.0).to(dev)

    def read():
        ((x * 3 + 1).sum()).item()

    wall, tracing, spans = _timed(events, read)
    assert events.of(GraphCompiled) and events.of(TransferFromDevice)
    # Every span ran inside `read`, each counted once: together they fit in its wall time.
    assert 0 <= tracing and tracing + spans <= wall, (tracing, spans, wall)


def test_a_cpu_fallback_inside_an_op_is_not_counted_as_tracing(dev, events):
    x = torch.tensor([[3.0, -1.0, 2.0, 7.0], [0.5, 4.0, -2.0, 1.5], [2.5, -3.0, 1.0, 0.0]]).to(dev)

    def select():
        selected = (x * 2 - 1)[x > 0]  # nonzero runs on the CPU: the pending graph compiles inside the op
        assert selected.shape[0] == 8

    wall, tracing, spans = _timed(events, select)
    assert events.of(FallbackOp) and events.of(GraphCompiled)
    assert 0 <= tracing and tracing + spans <= wall, (tracing, spans, wall)
