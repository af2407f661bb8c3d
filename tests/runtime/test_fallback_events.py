"""CPU fallback, the runtime's events and their causes, and clear errors for bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import xladev
from xladev.events import (
    CauseKind, Fallback, Compile, Execute, Ops, Step, TransferFromDevice,
    TransferToDevice,
)


def test_fallback_ops_match_eager_and_are_counted(dev, events):
    x = torch.tensor([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]])
    values, counts = torch.unique_consecutive(x.to(dev).round(), return_counts=True)
    expected = torch.unique_consecutive(x.round(), return_counts=True)
    torch.testing.assert_close(values.cpu(), expected[0])
    torch.testing.assert_close(counts.cpu(), expected[1])
    selected = x.to(dev)[x.to(dev) > 0]          # masked selection goes through nonzero
    torch.testing.assert_close(selected.cpu(), x[x > 0])
    names = [e.name for e in events.of(Fallback)]
    assert "aten::unique_consecutive" in names
    assert any(n.startswith("aten::nonzero") or n.startswith("aten::masked_select") or n.startswith("aten::index")
               for n in names), names
    # the results live on the device and keep working lazily
    assert (selected * 2).sum().item() == pytest.approx(float((x[x > 0] * 2).sum()))


def test_masked_selection_backward_and_masked_assignment_of_vectors(dev):
    # Regression: index_put with a boolean mask and as many values as the mask selects has a
    # data-dependent shape; it must run on the CPU, not fail to compile.
    x_cpu = torch.tensor([[1.0, -2.0], [3.0, -4.0]], requires_grad=True)
    x_dev = x_cpu.detach().to(dev).requires_grad_()
    for x in (x_cpu, x_dev):
        (x[x > 0] * 3).sum().backward()
    torch.testing.assert_close(x_dev.grad.cpu(), x_cpu.grad)
    target = torch.zeros(2, 2)
    mask = torch.tensor([[True, False], [False, True]])
    on_dev = target.to(dev)
    on_dev[mask.to(dev)] = torch.tensor([5.0, 6.0]).to(dev)
    target[mask] = torch.tensor([5.0, 6.0])
    torch.testing.assert_close(on_dev.cpu(), target)
    on_dev[mask.to(dev)] = 7.0          # a scalar value stays lowered (a where)
    target[mask] = 7.0
    torch.testing.assert_close(on_dev.cpu(), target)


def test_inplace_fallback_writes_back_through_aliases(dev):
    base = torch.arange(6.0).to(dev)
    view = base[2:5]
    # aten.exponential_ has a lowering; pick an in-place op without one: index_reduce_.
    index = torch.tensor([0, 2]).to(dev)
    view.index_fill_(0, index, -1.0)
    cpu = torch.arange(6.0)
    cpu[2:5].index_fill_(0, torch.tensor([0, 2]), -1.0)
    torch.testing.assert_close(base.cpu(), cpu)


def _step_events(log):
    kinds = []
    for e in log.events:
        if isinstance(e, (Compile, Execute, Step, TransferFromDevice, Fallback)):
            kinds.append(type(e).__name__)
    return kinds


def test_events_for_plain_step(dev, events):
    from xladev.runtime.api.runtime_state import executor

    executor.reset()  # a graph another test of this process compiled would be a cache hit, with no compile event
    w = torch.ones(4, device=dev)
    w.mul_(3)
    xladev.mark_step()
    kinds = _step_events(events)
    assert kinds == ["Compile", "Execute", "Step"]
    compiled, executed = events.of(Compile)[0], events.of(Execute)[0]
    assert compiled.graph_hash == executed.graph_hash and len(compiled.graph_hash) == 32
    assert compiled.cause.kind is CauseKind.USER_MARK_STEP
    assert compiled.compile_ns > 0 and executed.execute_ns > 0 and not executed.cached
    assert compiled.memory["output"] == 16
    assert compiled.frames and compiled.frames[0].name == "mark_step"
    assert any(f.file == __file__ for f in compiled.frames)
    ops = events.of(Ops)[0]
    assert ops.counts.get("aten::mul") == 1
    assert events.of(Step)[0].cause.kind is CauseKind.USER_MARK_STEP


def test_events_for_item_in_step(dev, events):
    x = torch.ones(3, device=dev)
    loss = (x * 2).sum()
    value = loss.item()
    assert value == 6.0
    transfers = events.of(TransferFromDevice)
    assert len(transfers) == 1 and transfers[0].kind == ".item()" and transfers[0].nbytes == 4
    executed = events.of(Execute)[0]
    assert executed.cause.kind is CauseKind.VALUE_ACCESS and executed.cause.detail == ".item()"
    assert any(f.file == __file__ for f in transfers[0].frames)


def test_events_for_print(dev, events, capsys):
    t = torch.ones(2, device=dev) + 1
    print(t)
    assert "tensor([2., 2.], device='xla:0')" in capsys.readouterr().out
    assert events.of(Execute)[0].cause.detail == "print"
    assert events.of(TransferFromDevice)[0].kind == "print"


@pytest.mark.parametrize("access,kind", [
    (lambda t: t.cpu(), ".cpu()"), (lambda t: t.numpy(), ".numpy()"), (lambda t: t.tolist(), ".tolist()"),
    (lambda t: bool(t.sum() > 0), "bool() in control flow"), (lambda t: float(t.sum()), "float()"),
])
def test_each_value_access_names_its_kind(dev, events, access, kind):
    access(torch.ones(2, device=dev) * 3)
    assert events.of(Execute)[0].cause.detail == kind


def test_events_for_fallback(dev, events):
    x = torch.tensor([[1.0, 5.0, 3.0]]).to(dev) * 2
    torch.unique_consecutive(x, return_counts=True)  # data-dependent output shape: stays on the CPU
    fallback = events.of(Fallback)
    assert [f.name for f in fallback] == ["aten::unique_consecutive"]
    executed = events.of(Execute)[0]
    assert executed.cause.kind is CauseKind.FALLBACK and executed.cause.detail == "aten::unique_consecutive"
    assert events.of(TransferFromDevice)[0].kind == "aten::unique_consecutive"
    # the input's upload, then its three outputs going back to the device: three values (float32), the
    # inverse indices (empty: not asked for) and three counts (int64)
    assert [t.nbytes for t in events.of(TransferToDevice)] == [12, 12, 0, 24]


def test_events_for_changed_input_shape(dev, events):
    w = torch.ones(4, 4, device=dev)
    xladev.mark_step()   # w becomes device data, so the steps below share one graph per shape
    events.clear()
    for batch in (2, 2, 3):
        x = torch.ones(batch, 4).to(dev)
        y = x @ w
        xladev.mark_step()
    compiles = events.of(Compile)
    executes = events.of(Execute)
    assert len(executes) == 3 and [e.cached for e in executes] == [False, True, False]
    assert len(compiles) == 2 and compiles[0].graph_hash != compiles[1].graph_hash
    assert len(events.of(TransferToDevice)) >= 3


def test_events_for_device_loader(dev, events):
    batches = [torch.full((2, 3), float(i)) for i in range(3)]
    seen = []
    w = torch.ones(3, device=dev)
    for batch in xladev.DeviceLoader(batches, dev):
        assert batch.device == dev
        w = w + batch.sum(0)
        seen.append(1)
    steps = events.of(Step)
    assert len(seen) == 3 and len(steps) == 3
    assert all(s.cause.kind is CauseKind.DEVICE_LOADER for s in steps)
    assert w.tolist() == [1.0 + 0 + 2 + 4] * 3


def test_step_closure_runs_after_barrier_without_extra_graph(dev, events):
    seen = []
    loss = torch.ones(3, device=dev).sum() * 2
    xladev.add_step_closure(lambda t: seen.append(t.item()), args=(loss,))
    assert seen == []
    xladev.mark_step()
    assert seen == [6.0]
    assert len(events.of(Execute)) == 1   # the closure read device data: no extra execution
    xladev.add_step_closure(lambda: seen.append("async"), run_async=True)
    xladev.mark_step()
    xladev.wait_device_ops()
    assert seen[-1] == "async"


def test_optimizer_step_with_barrier(dev, events):
    p = torch.nn.Parameter(torch.ones(2, device=dev))
    opt = torch.optim.SGD([p], lr=0.5)
    p.sum().backward()
    xladev.optimizer_step(opt, barrier=True)
    assert events.of(Step)[0].cause.kind is CauseKind.OPTIMIZER_STEP
    assert p.tolist() == [0.5, 0.5]


def test_mixing_devices_is_a_clear_error(dev):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*xla:0 and cpu"):
        torch.ones(3, device=dev) + torch.ones(3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.median(torch.ones(2, 3, device=dev), dim=1, out=(torch.ones(2), torch.ones(2, dtype=torch.long)))
    # a CPU scalar tensor mixes, as in eager PyTorch
    assert (torch.ones(2, device=dev) * torch.tensor(3.0)).tolist() == [3.0, 3.0]


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)


def test_unknown_pjrt_device_is_a_clear_error():
    result = _run_python("import xladev; xladev.device()", PJRT_DEVICE="TPUX")
    assert result.returncode != 0
    assert "PJRT_DEVICE='TPUX' is not valid" in result.stderr
    assert "CPU, CUDA" in result.stderr


def test_cuda_without_plugin_is_a_clear_error():
    result = _run_python("import torch, xladev; torch.ones(1, device='xla')", PJRT_DEVICE="CUDA")
    if result.returncode == 0:
        pytest.skip("this machine has jax's CUDA backend")
    assert "PJRT_DEVICE=CUDA" in result.stderr and "not available" in result.stderr


def test_failed_compile_names_graph_hash_and_keeps_process_usable(dev, events, tmp_path, monkeypatch):
    from xladev.events import CompileFailed
    from xladev.runtime.lowering.registry import LOWERINGS

    op = torch.ops.aten.cosh.default
    original = LOWERINGS[op].lower

    def broken(ctx, x):
        raise ValueError("deliberately broken lowering")

    monkeypatch.setattr(LOWERINGS[op], "lower", broken)
    monkeypatch.setattr(xladev.config, "_values", dict(xladev.config._values, save_hlo_file=str(tmp_path / "bad.hlo")))
    bad = torch.cosh(torch.ones(2, device=dev))
    with pytest.raises(xladev.XlaCompileError) as info:
        bad.cpu()
    failed = events.of(CompileFailed)[0]
    assert failed.graph_hash in str(info.value)
    assert str(tmp_path / "bad.hlo") in str(info.value)
    assert (tmp_path / "bad.hlo").read_text().startswith("// lowering to HLO failed")
    monkeypatch.setattr(LOWERINGS[op], "lower", original)
    del bad
    ok = torch.ones(2, device=dev) + 1
    assert ok.tolist() == [2.0, 2.0]
    xladev.mark_step()
