"""`xm.optimization_barrier_` / `xladev.runtime.record.opt_barrier.optimization_barrier_`: one `xla::optimization_barrier`
IR node replacing each tensor's value in place, `opt-barrier` in HLO, kept by XLA's CPU compiler to the end."""

from __future__ import annotations

import pytest
import torch

import xladev
import xladev.debug.metrics as met
from xladev.debug import get_tensors_hlo, get_tensors_text
from xladev.events import Execute
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.record.opt_barrier import optimization_barrier_


def test_barrier_is_one_node_whose_outputs_replace_the_tensors(dev):
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    x, y = a.to(dev), b.to(dev)
    before = x @ y
    optimization_barrier_([x, y])
    after = x @ y
    ir = get_tensors_text([before, after])
    assert ir.count("xla::optimization_barrier(") == 1
    # The mm recorded after the barrier reads its outputs; the one before reads the data itself.
    assert "aten::mm(%0, %1)" in ir and "aten::mm(%3.0, %3.1)" in ir, ir
    assert "opt-barrier(" in get_tensors_hlo([after])
    # The values are the same: the barrier only constrains XLA.
    torch.testing.assert_close(after.cpu(), a @ b)
    torch.testing.assert_close(x.cpu(), a, rtol=0, atol=0)
    torch.testing.assert_close(before.cpu(), a @ b)


def test_barrier_on_a_view_and_its_base(dev):
    base = torch.arange(12.0).reshape(3, 4)
    t = base.to(dev)
    row = t[1]
    optimization_barrier_([t, row, t])  # a tensor twice, and a view of it
    row.mul_(2)  # still a view of `t` after the barrier
    expected = base.clone()
    expected[1] *= 2
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(row.cpu(), expected[1], rtol=0, atol=0)


def test_compiled_program_keeps_the_barrier_on_the_cpu(dev, events):
    # XLA's CPU pipeline would expand the barrier after its first CSE pass; the runtime compiles such a graph with
    # that pass off, so the barrier reaches the executable (and the scheduler) as on GPU and TPU.
    x = torch.randn(16, 16).to(dev)
    xladev.mark_step()
    events.clear()
    first = torch.tanh(x @ x)
    optimization_barrier_([x])
    second = torch.tanh(x @ x)
    (first + second).sum().item()
    [ran] = [e for e in events.of(Execute)]
    compiled = compile_cache.by_hash[ran.graph_hash].executable.as_text()
    assert "opt-barrier" in compiled


def test_empty_list_records_nothing(dev):
    met.clear_all()
    optimization_barrier_([])
    assert met.counter_value("xla::optimization_barrier") in (None, 0)


@pytest.mark.parametrize("bad, error, words", [
    (lambda dev: torch.ones(2, device=dev), TypeError, "takes a list of tensors, got XlaTensor"),
    (lambda dev: [torch.ones(2, device=dev), 3.0], TypeError, "item 1 is a float, not a tensor"),
    (lambda dev: [torch.ones(2, device=dev), torch.ones(2)], RuntimeError, "tensor 1 is on cpu"),
])
def test_bad_input_is_named(dev, bad, error, words):
    with pytest.raises(error, match=words):
        optimization_barrier_(bad(dev))


def test_eager_mode_runs_the_barrier_as_it_is_recorded(dev):
    t = torch.randn(5, 5, device=dev)
    xladev.mark_step(wait=True)
    met.clear_all()
    with xladev.config.override(eager_debug_mode=True):
        optimization_barrier_([t])
    xladev.wait_device_ops()
    # As PyTorch/XLA's eager mode: the barrier is a graph of its own, compiled and run at once.
    assert met.metric_data("EagerOpExecuteTime")[0] == 1
