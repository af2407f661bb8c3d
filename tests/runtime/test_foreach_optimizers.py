"""torch's optimizers take their foreach path on `xla`, and a `_foreach_` op is one recorded op.

Real optimizers, real compiles: SGD with momentum, Adam and AdamW train a small model on `xla` and on eager
CPU from the same seed and data; the weights agree within what float32 rounding and the optimizer's step
allow (tests/parity_bounds). The ops recorded per optimizer step do not grow with the number of parameters.
"""

from __future__ import annotations

import pytest
import torch
from torch.optim.optimizer import _default_to_fused_or_foreach

import xladev
from tests.parity_bounds import (
    GRAD_REL, assert_adam_params_close, assert_gradients_close, assert_sgd_params_close, gradient_scale)
from xladev.events import Fallback, Ops, bus

STEPS = 8
OPTIMIZERS = {
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1),
    # torch's fused kernels (runtime/record/fused_optimizers.py), against eager CPU's fused kernels.
    "adam_fused": lambda params: torch.optim.Adam(params, lr=1e-2, fused=True),
    "adamw_fused": lambda params: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, amsgrad=True, fused=True),
    "sgd_fused": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, fused=True),
}
# The most ops an optimizer step records (the foreach ops of torch's code; a fused step also computes its
# bias corrections on the device, from a vector of the step counts).
MOST_OPS = {"sgd_momentum": 3, "adam": 7, "adamw": 8, "adam_fused": 21, "adamw_fused": 23, "sgd_fused": 4}


def _model(depth: int, width: int = 16) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.Tanh()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def _batches(width: int = 16):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(32, width, generator=gen), torch.randn(32, 1, generator=gen)) for _ in range(STEPS)]


def _train(name: str, device: torch.device, depth: int = 2):
    """Trains on `device`; returns (model, optimizer, ops recorded by each optimizer step)."""
    model = _model(depth).to(device)
    optimizer = OPTIMIZERS[name](model.parameters())
    step_ops = []
    for x, y in _batches():
        loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
        loss.backward()
        if device.type == "xla":
            xladev.mark_step()  # forward and backward in their own graph: the next one is the optimizer's alone
            seen: list[Ops] = []
            with bus.subscribe(seen.append, (Ops,)):
                optimizer.step()
                optimizer.zero_grad()
                xladev.mark_step()
            step_ops.append(sum(sum(e.counts.values()) for e in seen))
        else:
            optimizer.step()
            optimizer.zero_grad()
    return model, optimizer, step_ops


def test_torch_chooses_the_foreach_path_for_device_parameters(dev):
    params = list(torch.nn.Linear(4, 4).to(dev).parameters())
    assert _default_to_fused_or_foreach(params, differentiable=False, use_fused=False) == (False, True)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_foreach_training_matches_eager_cpu(name):
    xladev.mark_step()
    xla_model, _, _ = _train(name, xladev.device())
    cpu_model, cpu_optimizer, _ = _train(name, torch.device("cpu"))
    names = {id(p): n for n, p in cpu_model.named_parameters()}
    cpu = {n: p.detach() for n, p in cpu_model.named_parameters()}
    xla = {n: p.detach().cpu() for n, p in xla_model.named_parameters()}
    if name.startswith("sgd"):
        # The gradient scale of the last step (zero_grad left None): the first batch's, from a fresh model.
        model = _model(2)
        x, y = _batches()[0]
        torch.nn.functional.mse_loss(model(x), y).backward()
        scale = gradient_scale({n: p.grad for n, p in model.named_parameters()})
        assert_sgd_params_close(xla, cpu, cpu_optimizer, scale, STEPS)
    else:
        assert_adam_params_close(xla, cpu, cpu_optimizer, names, STEPS)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_ops_per_optimizer_step_do_not_grow_with_the_parameters(name):
    xladev.mark_step()
    _, _, small = _train(name, xladev.device(), depth=1)  # 4 parameters
    _, _, large = _train(name, xladev.device(), depth=6)  # 14 parameters
    # Step 0 creates the optimizer's state (one op per state tensor); every later step is the same few ops.
    steady = small[1:] + large[1:]
    assert len(set(steady)) == 1, f"ops per optimizer step: {small} with 4 parameters, {large} with 14"
    assert steady[0] <= MOST_OPS[name], f"{steady[0]} ops per step: the optimizer's math is a handful of foreach ops"


def test_a_foreach_op_is_one_recorded_op_with_the_per_tensor_results(dev):
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(3, 4, generator=gen) for _ in range(5)]
    other = [torch.rand(3, 4, generator=gen) + 0.5 for _ in range(5)]
    xla, xla_other = [t.to(dev) for t in cpu], [t.to(dev) for t in other]
    xladev.mark_step()
    seen: list[Ops] = []
    with bus.subscribe(seen.append, (Ops,)):
        torch._foreach_addcdiv_(xla, xla_other, xla_other, [0.5, -1.0, 2.0, 0.25, 3.0])
        sums = torch._foreach_add(xla, xla_other, alpha=2.0)
        xladev.mark_step()
    counts = {k: v for e in seen for k, v in e.counts.items()}
    assert counts == {"aten::_foreach_addcdiv": 1, "aten::_foreach_add": 1}
    torch._foreach_addcdiv_(cpu, other, other, [0.5, -1.0, 2.0, 0.25, 3.0])
    want = torch._foreach_add(cpu, other, alpha=2.0)
    for have, expect in zip(xla + list(sums), cpu + list(want)):
        # A few float32 operations on values of order 1: a few ulps.
        torch.testing.assert_close(have.cpu(), expect, rtol=8 * 2.0 ** -24, atol=8 * 2.0 ** -24)


@pytest.mark.parametrize("order", [2, 1, 3.5, float("inf"), float("-inf"), 0])
def test_foreach_norm_is_one_recorded_op_with_eagers_norms(dev, order):
    """clip_grad_norm_'s `_foreach_norm` over N tensors records one node (before: a power, a sum and a root per
    tensor, 3N ops), and each norm is eager's. The terms |x|^p are nonnegative, each within a couple of ulps
    (two libraries' pow); their sum in another order within n·u of itself; the p-th root (p >= 1) divides
    that relative error by p and adds an ulp or two: (n + 4)·u bounds it. The largest, smallest and count
    norms are exact."""
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(*shape, generator=gen) * 3 for shape in [(64, 64), (7,), (3, 5, 2), (1,)]]
    cpu.append(torch.randn(10, generator=gen, dtype=torch.float64))
    xla = [t.to(dev) for t in cpu]
    xladev.mark_step()
    seen: list[Ops] = []
    with bus.subscribe(seen.append, (Ops,)):
        norms = torch._foreach_norm(xla, order)
        as_double = torch._foreach_norm(xla[:2], order, dtype=torch.float64)
        xladev.mark_step()
    assert {k: v for e in seen for k, v in e.counts.items()} == {"xla::call_jax": 2}
    for have, want, t in zip(norms + as_double, torch._foreach_norm(cpu, order)
                             + torch._foreach_norm(cpu[:2], order, dtype=torch.float64), cpu + cpu[:2]):
        assert (have.dtype, have.shape) == (want.dtype, want.shape)
        unit = 2.0 ** -24 if have.dtype == torch.float32 else 2.0 ** -53
        torch.testing.assert_close(have.cpu(), want, rtol=(t.numel() + 4) * unit, atol=0)


def test_foreach_norm_is_differentiated_as_eager_differentiates_it(dev):
    cpu = [torch.randn(4, 3, generator=torch.Generator().manual_seed(1)).requires_grad_() for _ in range(2)]
    xla = [t.detach().to(dev).requires_grad_() for t in cpu]
    for ts in (cpu, xla):
        sum(torch._foreach_norm(ts)).backward()
    for have, want in zip(xla, cpu):  # x/|x|: a norm of 12 terms and a division, a few ulps of order 1
        torch.testing.assert_close(have.grad.cpu(), want.grad, rtol=0, atol=16 * 2.0 ** -24)


def test_a_list_written_then_read_by_a_later_element_reads_the_new_value(dev):
    """Eager runs a foreach op element by element: element 1 reads element 0's result."""
    cpu = [torch.ones(2), torch.full((2,), 2.0)]
    xla = [t.to(dev) for t in cpu]
    torch._foreach_add_(cpu, [torch.ones(2), cpu[0]])
    torch._foreach_add_(xla, [torch.ones(2, device=dev), xla[0]])
    assert [t.cpu().tolist() for t in xla] == [t.tolist() for t in cpu] == [[2.0, 2.0], [4.0, 4.0]]


@pytest.mark.parametrize("call, message", [
    (lambda a: torch._foreach_add(a, a[:1]), "Tensor lists must have the same number of tensors, got 2 and 1"),
    (lambda a: torch._foreach_mul_(a, [2.0]), "Tensor list must have same number of elements as scalar list."),
])
def test_lists_of_different_lengths_are_refused_as_eager_refuses_them(dev, call, message):
    with pytest.raises(RuntimeError) as cpu_error:
        call([torch.ones(2), torch.ones(2)])
    assert str(cpu_error.value) == message
    with pytest.raises(RuntimeError, match="^" + message.replace(".", r"\.") + "$"):
        call([torch.ones(2, device=dev), torch.ones(2, device=dev)])


def test_clip_grad_norm_and_zero_grad_take_the_foreach_path_as_eager_computes_them(dev):
    """`install()` also puts device tensors on torch.utils._foreach_utils' foreach path (clip_grad_norm_, and
    zero_grad(set_to_none=False))."""
    from torch.utils._foreach_utils import _has_foreach_support

    cpu_model = _model(2)
    xla_model = _model(2).to(dev)
    x, y = _batches()[0]
    for model, device in ((cpu_model, torch.device("cpu")), (xla_model, dev)):
        torch.nn.functional.mse_loss(model(x.to(device)), y.to(device)).backward()
    assert _has_foreach_support([p.grad for p in xla_model.parameters()], dev)
    norms = [torch.nn.utils.clip_grad_norm_(m.parameters(), max_norm=0.1) for m in (cpu_model, xla_model)]
    # Each gradient is within GRAD_REL of the gradient scale G (tests/parity_bounds), and the norm is at least G:
    # the norms agree within GRAD_REL, and the clipped gradients within GRAD_REL of their own scale.
    torch.testing.assert_close(norms[1].cpu(), norms[0], rtol=GRAD_REL, atol=0)
    assert_gradients_close({n: p.grad.cpu() for n, p in xla_model.named_parameters()},
                           {n: p.grad for n, p in cpu_model.named_parameters()})
    torch.optim.SGD(xla_model.parameters(), lr=0.1).zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.cpu().any() for p in xla_model.parameters())


@pytest.mark.parametrize("name", ["adam_fused", "adamw_fused", "sgd_fused"])
def test_a_fused_step_stays_on_the_device(name):
    """`fused=True` runs its kernel as device ops, not as a CPU fallback (Fallback) with transfers."""
    xladev.mark_step()
    seen: list[Fallback] = []
    with bus.subscribe(seen.append, (Fallback,)):
        _train(name, xladev.device(), depth=1)
    assert [e.name for e in seen] == []
