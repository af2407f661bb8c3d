"""Gradient scaling on the device: ATen's two amp ops recorded (not run on the CPU), the sync-free optimizers,
and `xladev.amp.GradScaler` stepping without reading a value back to the host.

Oracles: ATen's own CPU kernels of `_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_`,
and torch.optim's SGD, Adam and AdamW on the CPU fed the same gradients. Tolerances: rule 6 of
tests/models/tolerances.py (an update rounds at most 16 times relative to its size and 4 times relative
to the weight), plus, for Adam, the float32 bias corrections 1 − βᵗ that a device computes (torch's CPU
Adam computes them in float64 on the host): βᵗ is within 4u·βᵗ (a pow), the difference rounds once, so the
correction is within u·(4βᵗ + 1 − βᵗ)/(1 − βᵗ) relative, and the update (÷ correction₁, ÷ √correction₂)
within that of β₁ plus half that of β₂.
"""

from __future__ import annotations

import copy

import pytest
import torch

import xladev
import xladev.amp as amp
import xladev.debug.metrics as met
from tests.models.tolerances import U, adam_reach_terms, update_rounding

F32, BF16, I32 = torch.float32, torch.bfloat16, torch.int32


def _dev(t):
    return t.to(xladev.device())


def _fallbacks():
    return {n: met.counter_value(n) for n in met.counter_names() if n.startswith("aten::_amp")}


@pytest.mark.parametrize("case", ["finite", "inf", "nan", "earlier inf"])
def test_unscale_and_check_matches_atens_cpu_kernel_without_a_cpu_fallback(case):
    torch.manual_seed(0)
    grads = [torch.randn(3, 4) * 1e3, torch.randn(5).to(BF16) * 1e3, torch.randn(2, 2) * 1e3]
    found = torch.zeros(1)
    if case == "inf":
        grads[1][2] = float("inf")
    elif case == "nan":
        grads[2][0, 1] = float("nan")
    elif case == "earlier inf":
        found.fill_(1.0)
    inv_scale = torch.full((1,), 1 / 1024)
    on_device = [_dev(g) for g in grads]
    found_on_device, before = _dev(found), _fallbacks()
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale)
    torch._amp_foreach_non_finite_check_and_unscale_(on_device, found_on_device, _dev(inv_scale))
    assert _fallbacks() == before  # recorded on the device, not run on the CPU
    assert found_on_device.cpu().tolist() == found.tolist() == [0.0 if case == "finite" else 1.0]
    for have, want in zip(on_device, grads):
        assert have.dtype == want.dtype
        torch.testing.assert_close(have.cpu(), want, rtol=0, atol=0, equal_nan=True)  # one exact multiply each


def test_update_scale_matches_atens_cpu_kernel_step_by_step():
    scale, tracker = torch.full((1,), 2.0 ** 10), torch.zeros(1, dtype=I32)
    d_scale, d_tracker = _dev(scale), _dev(tracker)
    before = _fallbacks()
    # Infs at steps 2 and 6; growth every 3 clean steps; the last growth would overflow float32 and is refused.
    for step, inf in enumerate([0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0]):
        if step == 9:
            scale.fill_(3e38)
            d_scale.fill_(3e38)
        found = torch.full((1,), float(inf))
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 3)
        torch._amp_update_scale_(d_scale, d_tracker, _dev(found), 2.0, 0.5, 3)
        assert (d_scale.cpu().item(), d_tracker.cpu().item()) == (scale.item(), tracker.item()), step
    assert _fallbacks() == before
    assert scale.item() == torch.tensor(3e38).item() and tracker.item() == 0  # refused to grow to inf, and reset the tracker


def test_bad_arguments_get_atens_errors():
    g = [_dev(torch.ones(2))]
    for found, inv, message in [(torch.zeros(1, dtype=I32), torch.ones(1), "found_inf must be a float tensor."),
                                (torch.zeros(2), torch.ones(1), "found_inf must be a 1-element tensor."),
                                (torch.zeros(1), torch.ones(1, dtype=torch.float64), "inv_scale must be a float tensor.")]:
        with pytest.raises(RuntimeError, match=message):
            torch._amp_foreach_non_finite_check_and_unscale_(g, _dev(found), _dev(inv))
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor."):
        torch._amp_update_scale_(_dev(torch.ones(1)), _dev(torch.zeros(1)), _dev(torch.zeros(1)), 2.0, 0.5, 3)


# --- the sync-free optimizers against torch.optim on the CPU ------------------------------------------------

OPTIMIZERS = {
    "SGD": (amp.syncfree.SGD, torch.optim.SGD, dict(lr=0.1)),
    "SGD momentum dampening weight decay": (amp.syncfree.SGD, torch.optim.SGD,
                                            dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "SGD nesterov maximize": (amp.syncfree.SGD, torch.optim.SGD,
                              dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True, weight_decay=0.01)),
    "Adam weight decay": (amp.syncfree.Adam, torch.optim.Adam, dict(lr=0.01, weight_decay=0.1)),
    "Adam amsgrad maximize": (amp.syncfree.Adam, torch.optim.Adam, dict(lr=0.01, amsgrad=True, maximize=True)),
    "AdamW": (amp.syncfree.AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
}
SKIPPED = 2  # the step whose found_inf is 1


def _bias_correction_rel(beta: float, t: int) -> float:
    b = beta ** t
    return U * (4 * b + (1 - b)) / (1 - b)


def _allowance(name, settings, theta, buf, taken: int):
    """Rule 6, plus (Adam) the float32 bias corrections of each step taken (module docstring)."""
    lr = settings["lr"]
    if name.startswith("SGD"):
        return update_rounding(theta, lr * buf.abs() if buf is not None else lr, taken)
    b1, b2 = 0.9, 0.999
    corrections = sum(c * (_bias_correction_rel(b1, t) + 0.5 * _bias_correction_rel(b2, t))
                      for t, c in enumerate(adam_reach_terms(taken), start=1))
    return update_rounding(theta, lr, taken) + lr * corrections


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_syncfree_optimizer_is_torch_optim_and_skips_in_the_graph(name):
    ours, theirs, settings = OPTIMIZERS[name]
    torch.manual_seed(0)
    cpu = [torch.randn(4, 3), torch.randn(3)]
    dev = [_dev(p) for p in cpu]
    opt_cpu, opt_dev = theirs(cpu, **settings), ours(dev, **settings)
    grads = [[torch.randn_like(p) for p in cpu] for _ in range(5)]
    taken = 0
    for step, step_grads in enumerate(grads):
        for p, q, g in zip(cpu, dev, step_grads):
            p.grad, q.grad = g.clone(), _dev(g)
        skipped = step == SKIPPED
        if not skipped:
            opt_cpu.step()
            taken += 1
        before = [q.cpu() for q in dev]
        with xladev.debug.allow_execution(False):  # the step itself reads nothing back
            opt_dev.step(found_inf=_dev(torch.tensor(float(skipped))))
        xladev.mark_step()
        if skipped:  # bitwise untouched, state too
            assert all(torch.equal(q.cpu(), b) for q, b in zip(dev, before))
        for i, (p, q) in enumerate(zip(cpu, dev)):
            buf = opt_cpu.state[p].get("momentum_buffer")
            bound = _allowance(name, settings, p, buf, taken)
            torch.testing.assert_close(q.cpu().double(), p.double(), rtol=0, atol=float(bound.max()),
                                       msg=lambda m, s=step, i=i: f"{name}: parameter {i} after step {s}: {m}")
        assert all(opt_dev.state[q]["step"].cpu().item() == taken for q in dev)


def test_syncfree_without_found_inf_is_torch_optims_step_and_a_shaped_found_inf_is_refused():
    p = _dev(torch.ones(3))
    opt = amp.syncfree.SGD([p], lr=0.5)
    p.grad = _dev(torch.ones(3))
    opt.step()
    xladev.mark_step()
    assert p.cpu().tolist() == [0.5] * 3
    with pytest.raises(ValueError, match="The found_inf tensor has to be scalar type"):
        opt.step(found_inf=_dev(torch.zeros(1)))


@pytest.mark.parametrize("name", ["SGD", "Adam weight decay", "AdamW"])
def test_step_hooks_run_once_per_step_with_or_without_found_inf(name):
    ours, theirs, settings = OPTIMIZERS[name]
    theirs([torch.zeros(1, requires_grad=True)], **settings)  # torch hooks the parent class's step on its first instance
    p = _dev(torch.ones(3))
    opt = ours([p], **settings)
    calls = []
    opt.register_step_pre_hook(lambda *args: calls.append("pre"))
    opt.register_step_post_hook(lambda *args: calls.append("post"))
    for found_inf in (None, _dev(torch.tensor(0.0))):
        p.grad = _dev(torch.ones(3))
        opt.step(found_inf=found_inf)
        xladev.mark_step()
    assert calls == ["pre", "post"] * 2


# --- GradScaler: float16 training on the device, skipping the overflowing step --------------------------------


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g)) for _ in range(5)]


# init_scale 2^40 overflows float16 for certain (gradients ~1 times 2^40 > 65504); backing off by 2^-30 gives 2^10,
# far from overflow; growth every 2 clean steps. So on every backend step 0 is skipped and the rest are taken.
SCALER = dict(init_scale=2.0 ** 40, backoff_factor=2.0 ** -30, growth_interval=2)


def _train_on_device(optimizer_class, **scaler_kwargs):
    model = _mlp().to(xladev.device())
    opt = optimizer_class(model.parameters(), lr=0.05)
    scaler = amp.GradScaler(**SCALER, **scaler_kwargs)
    start = [p.detach().cpu() for p in model.parameters()]
    losses, scales, reads = [], [], []
    for x, y in _batches():
        opt.zero_grad()
        with torch.autocast("xla", dtype=torch.float16):
            out = model(x.to(xladev.device()))
            loss = torch.nn.functional.mse_loss(out, y.to(xladev.device()))
        assert (out.dtype, loss.dtype) == (torch.float16, F32)
        scaler.scale(loss).backward()
        transfers = met.metric_data("TransferFromDeviceTime")
        scaler.step(opt)
        scaler.update()
        reads.append((met.metric_data("TransferFromDeviceTime") or (0,))[0] - (transfers or (0,))[0])
        xladev.mark_step()
        if not losses:
            skipped = [p.detach().cpu() for p in model.parameters()]
            assert all(torch.equal(a, b) for a, b in zip(skipped, start)), "the overflowing step changed a weight"
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, reads, [p.detach().cpu() for p in model.parameters()]


def _train_on_cpu():
    """The same steps on the CPU, with the casts of PyTorch/XLA's policy written out (linear in float16, the
    loss in float32) and torch's own GradScaler, which skips a step by reading the flag back."""
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", **SCALER)
    h16 = torch.float16
    losses, scales, grad_scale = [], [], 0.0
    for x, y in _batches():
        opt.zero_grad()
        l1, l2 = model[0], model[2]
        h = torch.relu(torch.nn.functional.linear(x.to(h16), l1.weight.to(h16), l1.bias.to(h16)))
        out = torch.nn.functional.linear(h, l2.weight.to(h16), l2.bias.to(h16))
        loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)  # unscales the gradients in place
        scaler.update()
        grads = [p.grad for p in model.parameters()]
        if all(torch.isfinite(g).all() for g in grads):
            grad_scale = max(grad_scale, max(float(g.abs().max()) for g in grads))
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, [p.detach() for p in model.parameters()], grad_scale


# float16 roundings along the step (u_h = 2^-11, each may land on the other neighbour: 2·u_h): forward the two
# linear outputs; backward the output gradient's cast, the hidden gradient and the two weight gradients.
F16_ROUNDINGS = 6
F16_EPS = 4 * 2 * 2.0 ** -11 * F16_ROUNDINGS  # κ = 4 as in tests/models/tolerances.py


@pytest.mark.parametrize("optimizer", ["syncfree", "use_zero_grad"])
def test_float16_training_with_the_scaler_reads_nothing_back_and_matches_the_cpu(optimizer):
    if optimizer == "syncfree":
        losses, scales, reads, params = _train_on_device(amp.syncfree.SGD)
    else:
        losses, scales, reads, params = _train_on_device(torch.optim.SGD, use_zero_grad=True)
    assert reads == [0] * 5  # scaler.step and update: no device-to-host transfer
    _assert_matches_cpu(losses, scales, params)


def test_with_a_plain_optimizer_the_scaler_reads_the_flag_back_as_torch_does():
    losses, scales, reads, params = _train_on_device(torch.optim.SGD)
    assert all(r >= 1 for r in reads)  # a read of found_inf per step
    _assert_matches_cpu(losses, scales, params)


def _assert_matches_cpu(losses, scales, params):
    cpu_losses, cpu_scales, cpu_params, grad_scale = _train_on_cpu()
    assert scales == cpu_scales == [2.0 ** 10, 2.0 ** 10, 2.0 ** 11, 2.0 ** 11, 2.0 ** 12]
    for have, want in zip(losses, cpu_losses):
        assert have == pytest.approx(want, rel=F16_EPS)
    for have, want in zip(params, cpu_params):
        # Four steps taken, each moving a weight at most lr·F16_EPS·G apart (G: the largest gradient), plus the
        # rounding of the updates themselves (rule 6).
        bound = 4 * 0.05 * F16_EPS * grad_scale + update_rounding(want.abs().max(), 0.05 * grad_scale, 4)
        torch.testing.assert_close(have, want, rtol=0, atol=float(bound))


def test_the_scaler_has_pytorch_xlas_signature_and_deep_copies():
    scaler = amp.GradScaler(init_scale=4.0, use_zero_grad=True)
    assert scaler.use_zero_grad and scaler._device == "xla" and copy.deepcopy(scaler).get_scale() == 4.0
