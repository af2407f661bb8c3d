"""Training on the backend `PJRT_DEVICE` names, against eager CPU: the checks to run on a GPU.

The rest of the suite runs on jax's CPU backend, and some of it counts CPU devices. This file holds on any
backend: with the suite it runs on the CPU; on a machine with a GPU (jax's CUDA plugin) run it, with
test_dynamo_backend.py, as `PJRT_DEVICE=CUDA python -m pytest tests/runtime/test_any_backend.py`
(tools/bench/cuda_check.sh does, before the benchmarks). Bounds come from float32 rounding (tests/parity_bounds.py),
which covers a GPU's other summation orders and transcendental functions as it covers another CPU's.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import xladev
from examples._common import train_step
from tests import parity_bounds
from xladev.runtime.graph import backend

# jax's platform names per PJRT_DEVICE (jax calls its CUDA backend's devices "gpu").
_PLATFORMS = {"CPU": {"cpu"}, "CUDA": {"gpu", "cuda"}, "GPU": {"gpu", "cuda"}}


def test_the_xla_device_is_on_the_backend_pjrt_device_names():
    assert backend.jax_devices()[0].platform in _PLATFORMS[xladev.config.pjrt_device]
    assert torch.ones(2, device=xladev.device()).device.type == "xla"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.uint8, torch.bool, torch.complex64])
def test_each_dtype_goes_to_the_device_and_back_unchanged(dtype):
    values = torch.tensor([[-3.5, 0.0, 1.25], [7.0, -0.5, 2.0]])
    host = values.to(dtype) if dtype is not torch.uint8 else values.abs().to(dtype)
    back = host.to(xladev.device()).cpu()
    assert back.dtype == dtype and torch.equal(back, host)
    # One op on the device, then back: the value XLA computes for this dtype.
    assert torch.equal((host.to(xladev.device()) * 1).cpu(), host * 1)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(24, 48), nn.GELU(), nn.LayerNorm(48), nn.Linear(48, 5))


@pytest.mark.parametrize("path", ["lazy", "torch.compile"])
def test_training_matches_eager_cpu(path):
    steps, dev = 4, xladev.device()
    cpu = _model()
    model = copy.deepcopy(cpu).to(dev)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.05, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    forward = torch.compile(model, backend="xladev") if path == "torch.compile" else model
    optimizer_step = torch.compile(opt.step, backend="xladev") if path == "torch.compile" else opt.step
    generator = torch.Generator().manual_seed(1)
    grad_scale = 0.0
    for _ in range(steps):
        x, y = torch.randn(16, 24, generator=generator), torch.randint(0, 5, (16,), generator=generator)
        expected = train_step(cpu, opt_cpu, nn.functional.cross_entropy, x, y)
        grad_scale = max(grad_scale, parity_bounds.gradient_scale({n: p.grad for n, p in cpu.named_parameters()}))
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(forward(x.to(dev)), y.to(dev))
        loss.backward()
        optimizer_step()
        xladev.mark_step()
        assert loss.item() == pytest.approx(expected.item(), rel=parity_bounds.loss_rtol(), abs=0)
    parity_bounds.assert_sgd_params_close({n: p.detach().cpu() for n, p in model.named_parameters()},
                                          {n: p.detach() for n, p in cpu.named_parameters()}, opt_cpu, grad_scale,
                                          steps)


def test_dropout_draws_from_the_device_generator_reproducibly():
    dev = xladev.device()
    x = torch.ones(64, 64, device=dev)
    xladev.manual_seed(7)
    first = nn.functional.dropout(x, 0.5).cpu()
    xladev.manual_seed(7)
    again = nn.functional.dropout(x, 0.5).cpu()
    assert torch.equal(first, again)
    kept = first != 0
    # Kept values are scaled by 1 / (1 - p); about half are kept (4096 draws: 10 standard deviations is 320).
    assert torch.equal(first[kept], torch.full_like(first[kept], 2.0)) and abs(int(kept.sum()) - 2048) < 320
