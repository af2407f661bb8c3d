"""PyTorch/XLA's profiler scope rule on the real device: no step barrier inside an open `xp.Trace`.

PyTorch/XLA (torch/csrc/lazy/core/ir_metadata.cpp, reached from XLAGraphExecutor::MarkStep) raises
RuntimeError "Expecting scope to be empty but it is conv1.1" when `xm.mark_step()` / `torch_xla.sync()` runs
inside `xp.Trace("conv1")` (its test/test_operations.py XpTraceTest), names nested scopes `outer.1/inner.1`,
lets `reset_scope=False` through, and closes a StepTrace's own scope before its exit marks the step.
These tests run xladev's Trace/StepTrace/trace_me on the xla device, with xladev's API and through the
torch_xla alias: the error, its scope names, the user's lines in it, and that nothing is lost by it.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
from types import SimpleNamespace

import pytest
import torch

import xladev
import xladev.debug.metrics as met
import xladev.debug.profiler as xp
from xladev.cli.run import ALIAS_DIR
from xladev.debug import _profiler_scopes
from xladev.runtime.graph.op_ledger import recorder

HERE = "test_profiler_scopes.py"


def _line(fn, marker: str) -> int:
    """The line number of the line of `fn` holding `marker`."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def _pending(t: torch.Tensor) -> bool:
    return "aten::" in xladev.debug.get_tensors_text([t])


def _marked() -> int:
    return met.counter_value("MarkStep") or 0


@pytest.fixture(autouse=True)
def clean_step():
    xladev.mark_step()  # nothing pending from earlier tests, and the scope numbering starts again at 1
    yield
    assert _profiler_scopes.current_scope() == ""  # every scope closed, the error's included
    assert not getattr(recorder.scope_stack, "names", [])


def test_sync_inside_a_trace_raises_before_syncing_and_loses_nothing():
    device = xladev.device()
    a = torch.arange(3.0).to(device)
    before = _marked()
    with pytest.raises(RuntimeError, match=r"^Expecting scope to be empty but it is conv1\.1\n") as caught:
        with xp.Trace("conv1"):  # opened
            b = a * 2 + 1
            xladev.mark_step()  # the barrier
    error = caught.value
    assert isinstance(error, xp.TraceScopeError) and error.scope == "conv1.1"
    this = test_sync_inside_a_trace_raises_before_syncing_and_loses_nothing
    opened, barrier = _line(this, "# opened"), _line(this, "# the barrier")
    message = str(error)
    assert error.barrier_site == f"{HERE}:{barrier} ({this.__name__})"
    assert f"xladev.mark_step() at {HERE}:{barrier} " in message
    assert f"'conv1', an xp.Trace opened at {HERE}:{opened} " in message
    assert "move the sync after the `with xp.Trace(...)` block" in message and "xp.StepTrace" in message
    assert "reset_scope=False" not in message  # xladev's own mark_step has no such argument
    # Refused before anything happened: no step counted, the tensor still pending.
    assert _marked() == before and _pending(b)
    xladev.mark_step()
    assert _marked() == before + 1 and not _pending(b)
    assert b.cpu().tolist() == [1.0, 3.0, 5.0]


def test_step_trace_exit_marks_the_step_without_error():
    device = xladev.device()
    a = torch.ones(2).to(device)
    before = _marked()
    with xp.StepTrace("train", step_num=0):
        with xp.Trace("forward"):
            b = a + 1
        c = b * 3
    assert _marked() == before + 1 and not _pending(c)
    assert c.cpu().tolist() == [6.0, 6.0]


def test_nested_scopes_are_named_outermost_first_with_pytorch_xla_numbers():
    device = xladev.device()
    a = torch.ones(2).to(device)
    with pytest.raises(xp.TraceScopeError) as caught:
        with xp.Trace("outer"):  # outer
            with xp.Trace("inner"):
                pass
            with xp.Trace("inner"):  # the second inner at this depth: inner.2
                b = a - 1
                xladev.mark_step()
    this = test_nested_scopes_are_named_outermost_first_with_pytorch_xla_numbers
    assert caught.value.scope == "outer.1/inner.2"
    assert (f"scopes 'outer', an xp.Trace opened at {HERE}:{_line(this, '# outer')} (test_nested_scopes_are_named"
            in str(caught.value))
    assert f"'inner', an xp.Trace opened at {HERE}:{_line(this, '# the second inner')} " in str(caught.value)
    assert _pending(b)

    # A StepTrace inside a Trace: its own scope is closed before its barrier, the enclosing one is not.
    xladev.mark_step()  # a barrier that ran starts the numbering again
    with pytest.raises(xp.TraceScopeError) as caught:
        with xp.Trace("epoch"):
            with xp.StepTrace("train", step_num=1):  # its exit
                c = a * 5
    assert caught.value.scope == "epoch.1"
    assert f"the exit of an xp.StepTrace (it marks the step) at {HERE}:{_line(this, '# its exit')} " in str(
        caught.value)
    assert _pending(c)
    xladev.mark_step()
    assert c.cpu().tolist() == [5.0, 5.0]


def test_trace_me_function_and_device_loader_barriers_are_refused_too():
    device = xladev.device()

    @xp.trace_me("conv2")
    def step(x):
        y = x * 2
        xladev.mark_step()
        return y

    with pytest.raises(xp.TraceScopeError, match=r"^Expecting scope to be empty but it is conv2\.1") as caught:
        step(torch.ones(2).to(device))  # called here
    this = test_trace_me_function_and_device_loader_barriers_are_refused_too
    assert f"'conv2', an @xp.trace_me function called at {HERE}:{_line(this, '# called here')} " in str(caught.value)

    batches = [torch.full((2,), float(i)) for i in range(3)]
    seen = []
    # A refused barrier does not start the numbering again (PyTorch/XLA's reset fails too): the second scope.
    with pytest.raises(xp.TraceScopeError, match=r"but it is epoch\.2\n") as caught:
        with xp.Trace("epoch"):
            for x in xladev.DeviceLoader(batches, device):  # the loader marks the step at the next batch
                seen.append(x + 1)
    assert "the device loader's barrier at the next batch" in str(caught.value) and len(seen) == 1
    xladev.mark_step()
    assert seen[0].cpu().tolist() == [1.0, 1.0]


def test_a_later_correct_loop_trains_to_the_right_values():
    """A loop whose first step syncs inside a Trace: after the error it runs as it should, nothing lost."""
    device = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    reference = [p.detach().clone() for p in model.parameters()]
    moved = torch.nn.Linear(4, 2).to(device)
    moved.load_state_dict(model.state_dict())

    def step(m, inputs, targets, opt):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(inputs), targets).backward()
        opt.step()

    cpu_opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dev_opt = torch.optim.SGD(moved.parameters(), lr=0.1)
    xd, yd = x.to(device), y.to(device)
    with pytest.raises(xp.TraceScopeError):
        with xp.Trace("train_step"):
            step(moved, xd, yd, dev_opt)
            xladev.mark_step()  # wrong: inside the Trace
    step(model, x, y, cpu_opt)
    xladev.mark_step()  # the refused step's updates are computed here
    for _ in range(2):
        with xp.Trace("train_step"):
            step(moved, xd, yd, dev_opt)
        xladev.mark_step()  # right: after the Trace
        step(model, x, y, cpu_opt)
    for got, want, start in zip(moved.parameters(), model.parameters(), reference):
        assert not torch.equal(want, start)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


def test_reads_and_other_threads_scopes_are_not_barriers():
    device = xladev.device()
    a = torch.ones(3).to(device)
    with xp.Trace("read"):
        assert (a * 4).sum().item() == 12.0  # a value read syncs what it needs, it is no step barrier

    entered, release = threading.Event(), threading.Event()

    def other():  # scopes are per thread, as PyTorch/XLA's
        with xp.Trace("elsewhere"):
            entered.set()
            release.wait(30)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert entered.wait(30)
        before = _marked()
        b = a + 1
        xladev.mark_step()
        assert _marked() == before + 1 and not _pending(b)
    finally:
        release.set()
        thread.join(30)


@pytest.fixture()
def alias():
    """torch_xla, xm and xp of the alias, with its folder on sys.path for this test only."""
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("a real torch_xla is importable here; the alias is tested where it is not")
    sys.path.insert(0, ALIAS_DIR)
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.profiler as alias_xp

        yield SimpleNamespace(torch_xla=torch_xla, xm=xm, xp=alias_xp)
    finally:
        sys.path.remove(ALIAS_DIR)
        for name in [m for m in sys.modules if m == "torch_xla" or m.startswith("torch_xla.")]:
            del sys.modules[name]
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "torch_xla._xladev"]


def test_through_the_alias_as_pytorch_xla_and_reset_scope_false(alias):
    device = alias.torch_xla.device()
    a = torch.ones(2, device=device)
    for sync, name in ((alias.torch_xla.sync, "torch_xla.sync()"), (alias.xm.mark_step, "xm.mark_step()")):
        with pytest.raises(RuntimeError, match=r"^Expecting scope to be empty but it is conv1\.\d") as caught:
            with alias.xp.Trace("conv1"):
                b = a * 7
                sync()
        assert f"xladev: {name} at {HERE}:" in str(caught.value)
        assert "pass reset_scope=False to xm.mark_step() / torch_xla.sync()" in str(caught.value)
        assert _pending(b)

    before = _marked()
    with alias.xp.Trace("on_purpose"):
        c = a * 9
        alias.xm.mark_step(reset_scope=False)
        d = c + 1
        alias.torch_xla.sync(reset_scope=False)
    assert _marked() == before + 2 and not _pending(c) and not _pending(d)
    assert d.cpu().tolist() == [10.0, 10.0] and b.cpu().tolist() == [7.0, 7.0]
