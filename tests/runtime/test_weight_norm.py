"""Weight normalisation (wav2vec2's positional convolution, HiFi-GAN) trains on the device without a CPU fallback."""

from __future__ import annotations

import copy

import pytest
import torch

import xladev
import xladev.debug.metrics as met
from tests.parity_bounds import assert_gradients_close


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_weight_norm_gradients_match_eager_without_fallback(dim):
    torch.manual_seed(0)
    cpu = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=dim)
    dev = copy.deepcopy(cpu).to(xladev.device())
    x = torch.randn(2, 4, 9)
    xladev.mark_step()
    met.clear_counters()
    cpu(x).square().sum().backward()
    dev(x.to(xladev.device())).square().sum().backward()
    xladev.mark_step()
    assert not [name for name in met.counter_names() if name.startswith("aten::")]
    assert_gradients_close({n: p.grad.cpu() for n, p in dev.named_parameters()},
                           {n: p.grad for n, p in cpu.named_parameters()})
