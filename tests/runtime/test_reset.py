"""`executor.reset()` starts the runtime afresh: nothing compiled, cached, counted or pending from before."""

from __future__ import annotations

import torch

import xladev
import xladev.events
from xladev.events import Compile, Execute, Recompile
from xladev.runtime.api.runtime_state import executor


def _step(x, w, scale):
    y = torch.relu(x @ w) * scale + 0.25  # two Python scalars: graph inputs, uploaded through the scalar cache
    loss = y.sum()
    xladev.mark_step()  # one trigger site for every graph of this test
    return y, loss


def test_reset_clears_the_runtime_and_the_next_step_compiles_again(dev, events):
    x_cpu, w_cpu = torch.randn(4, 3), torch.randn(3, 5)
    x, w = x_cpu.to(dev), w_cpu.to(dev)
    _step(x, w, 1.5)
    _step(x[:2], w, 1.5)  # another graph at the same site: a recompilation
    assert events.of(Recompile)
    ran = []
    xladev.add_step_closure(lambda: ran.append(True))
    assert executor.cache and executor.by_hash and executor.scalars and executor.closures
    assert executor.site_history.sites and executor.step > 0

    executor.reset()

    assert not executor.cache and not executor.by_hash and not executor.scalars and not executor.closures
    assert not executor.site_history.sites and not executor.in_flight
    assert executor.step == 0 and not ran  # the closure was dropped, not run
    events.clear()
    y, loss = _step(x[:2], w, 2.5)
    xladev.wait_device_ops()
    # Compiled again (no cache), counted from step 0, and not a recompilation (no site history).
    compiled = events.of(Compile)
    assert len(compiled) == 1 and compiled[0].step == 0
    assert [e.cached for e in events.of(Execute)] == [False]
    assert not events.of(Recompile)
    assert executor.step == 1 and list(executor.by_hash) == [compiled[0].graph_hash]
    expected = torch.relu(x_cpu[:2] @ w_cpu) * 2.5 + 0.25
    torch.testing.assert_close(y.cpu(), expected)
    torch.testing.assert_close(loss.cpu(), expected.sum())
    assert not ran


def test_reset_keeps_device_tensors_and_their_pending_values(dev):
    a = torch.arange(6.0).reshape(2, 3)
    t = a.to(dev)
    xladev.mark_step()
    pending = t * 3 - 1  # recorded, not run: the next barrier after the reset computes it
    executor.reset()
    torch.testing.assert_close(pending.cpu(), a * 3 - 1)
    torch.testing.assert_close(t.cpu(), a)


def test_reset_announces_the_graphs_still_running_then_forgets_them(dev):
    xladev.mark_step(wait=True)
    executed = []
    with xladev.events.bus.subscribe(executed.append, Execute, late_executions_ok=True):
        x = torch.randn(64, 64, device=dev)
        y = (x @ x).tanh()
        xladev.mark_step()
        assert executor.in_flight, "the barrier should have returned with its graph still unannounced"
        assert not executed
        executor.reset()
        assert not executor.in_flight
        assert len(executed) == 1  # announced, as any barrier would have, not dropped
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu()).tanh(), rtol=1e-5, atol=1e-5)
