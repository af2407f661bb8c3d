"""LayerNorm on bfloat16 and float16 tensors, forward and backward, against eager CPU.

PyTorch normalises half-precision inputs in float32 (its mean and rstd are float32) and rounds only the results,
and xladev does the same: each result is then the rounding of a float32 computation, within half a unit in the
last place of the exact value (u_h relative: 2⁻⁸ for bfloat16, 2⁻¹¹ for float16) plus the float32 noise of sums
over the 64 normalised elements (64·u relative to the values' scale). The exact value is eager CPU in float64 on
the same half-precision inputs; the check allows one unit (2·u_h). (ATen's own half-precision kernel is no
reference at this scale: its input gradient is several units off in places.) The backward used to fail to
compile on bfloat16: its float32 statistics met a bfloat16 gradient.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import xladev
from tests.models.tolerances import U

UNIT = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _run(dtype, device, x, w, state):
    module = nn.LayerNorm(64).to(dtype)
    module.load_state_dict(state)
    module = module.to(device)
    inp = x.to(device).requires_grad_()
    out = module(inp)
    acc = torch.float64 if dtype == torch.float64 else torch.float32  # the loss's own sum adds no half rounding
    (out.to(acc) * w.to(device).to(acc)).sum().backward()
    return {"output": out, "input grad": inp.grad, "weight grad": module.weight.grad, "bias grad": module.bias.grad}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_layer_norm_forward_and_backward_in_half_precision_are_float32_rounded_once(dtype):
    torch.manual_seed(0)
    state = {"weight": torch.empty(64).uniform_(0.5, 1.5).to(dtype), "bias": torch.empty(64).uniform_(-0.5, 0.5).to(dtype)}
    x = (torch.randn(4, 64) * 3 + 1).to(dtype)
    w = torch.randn(4, 64).to(dtype)
    exact = _run(torch.float64, "cpu", x.double(), w, {k: v.double() for k, v in state.items()})
    have = _run(dtype, xladev.device(), x, w, state)
    xladev.mark_step()
    for name, value in have.items():
        assert value.dtype == dtype, name
        got, want = value.cpu().double(), exact[name].detach()
        bound = 2 * UNIT[dtype] * want.abs() + 64 * U * want.abs().max()
        worst = int(((got - want).abs() - bound).argmax())
        assert ((got - want).abs() <= bound).all(), (
            f"{name}: element {worst} is {float(got.flatten()[worst])}, the exact value "
            f"{float(want.flatten()[worst])}: more than one unit in the last place off")
