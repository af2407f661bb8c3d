"""LayerNorm and BatchNorm on bfloat16 and float16 tensors, forward and backward, against eager CPU.

PyTorch normalises half-precision inputs in float32 (its statistics stay float32) and rounds only the results, and
xladev does the same: each result is then the rounding of a float32 computation, within half a unit in the last
place of the exact value (u_h relative: 2⁻⁸ for bfloat16, 2⁻¹¹ for float16) plus the float32 noise of the sums
over the normalised elements (at most 64 here: 64·u relative to the values' scale). The exact value is eager CPU
in float64 on the same half-precision inputs; the check allows one unit (2·u_h). (ATen's own half-precision
kernel is no reference at this scale: its input gradient is several units off in places.)

Before: LayerNorm's backward failed to compile on bfloat16 (its float32 statistics met a bfloat16 gradient), and
BatchNorm's backward ran in bfloat16, where its cancellations lost what float32 keeps.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import xladev
from tests.models.tolerances import U

UNIT = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def _layer_norm():
    return nn.LayerNorm(64), (4, 64)


def _batch_norm():
    return nn.BatchNorm1d(8), (16, 8, 4)


def _state(module: nn.Module) -> dict:
    torch.manual_seed(1)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    state["weight"] = torch.empty_like(state["weight"]).uniform_(0.5, 1.5)
    state["bias"] = torch.empty_like(state["bias"]).uniform_(-0.5, 0.5)
    if "running_mean" in state:  # for evaluation mode: statistics of their own
        state["running_mean"] = torch.empty_like(state["running_mean"]).uniform_(-1, 1)
        state["running_var"] = torch.empty_like(state["running_var"]).uniform_(0.5, 2)
    return state


def _run(make, training, dtype, device, x, w, state):
    module, _ = make()
    module = module.to(dtype)
    module.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()})
    module = module.to(device).train(training)
    inp = x.to(dtype).to(device).requires_grad_()
    out = module(inp)
    acc = torch.float64 if dtype == torch.float64 else torch.float32  # the loss's own sum adds no half rounding
    (out.to(acc) * w.to(device).to(acc)).sum().backward()
    return {"output": out, "input grad": inp.grad, "weight grad": module.weight.grad, "bias grad": module.bias.grad}


@pytest.mark.parametrize("make,training", [(_layer_norm, True), (_batch_norm, True), (_batch_norm, False)],
                         ids=["layer_norm", "batch_norm-train", "batch_norm-eval"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_norms_in_half_precision_are_float32_rounded_once(make, training, dtype):
    module, shape = make()
    # The weights and statistics both sides see, rounded once to the half precision.
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in _state(module).items()}
    torch.manual_seed(0)
    x = (torch.randn(shape) * 3 + 1).to(dtype)  # the inputs both sides see, rounded once
    w = torch.randn(shape).to(dtype)
    exact = _run(make, training, torch.float64, "cpu", x.double(), w, state)
    have = _run(make, training, dtype, xladev.device(), x, w, state)
    xladev.mark_step()
    for name, value in have.items():
        assert value.dtype == dtype, name
        got, want = value.cpu().double(), exact[name].detach()
        bound = 2 * UNIT[dtype] * want.abs() + 64 * U * want.abs().max()
        worst = int(((got - want).abs() - bound).argmax())
        assert ((got - want).abs() <= bound).all(), (
            f"{name}: element {worst} is {float(got.flatten()[worst])}, the exact value "
            f"{float(want.flatten()[worst])}: more than one unit in the last place off")
