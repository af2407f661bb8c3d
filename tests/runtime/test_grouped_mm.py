"""`torch._grouped_mm` (`F.grouped_mm`), the grouped product of mixture-of-experts layers, lowered to jax's ragged dot.

transformers' MoE layers (Mixtral and the like) call it on any device but the CPU and CUDA's older chips; it ran
on the CPU fallback, op by op. The oracle is eager CPU's own kernel; rows past the last group's end, which torch
leaves unwritten, are not compared (xla writes zeros there).
"""

from __future__ import annotations

import pytest
import torch

import xladev
from tests.models.tolerances import U

G, M, K, N = 3, 7, 8, 4
# Shapes, group ends along the split dimension (with an empty group), and the part of the output the groups cover
# (the first case leaves row 6 past the last end).
CASES = {
    "2-D x 3-D (tokens sorted by expert)": ((M, K), (G, K, N), [2, 2, 6], slice(0, 6)),
    "2-D x 2-D (the weight gradient)": ((M, K), (K, N), [4, 4, 8], slice(None)),
    "3-D x 2-D": ((G, M, K), (K, 8), [4, 4, 8], slice(None)),
    "3-D x 3-D (batched)": ((G, M, K), (G, K, N), None, slice(None)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_grouped_mm_matches_eager_cpu(name):
    a_shape, b_shape, ends, covered = CASES[name]
    generator = torch.Generator().manual_seed(len(name))
    a, b = torch.randn(a_shape, generator=generator), torch.randn(b_shape, generator=generator)
    offs = None if ends is None else torch.tensor(ends, dtype=torch.int32)
    dev = xladev.device()
    got = torch._grouped_mm(a.to(dev), b.to(dev), None if offs is None else offs.to(dev)).cpu()
    want = torch._grouped_mm(a, b, offs)
    assert got.shape == want.shape and got.dtype == want.dtype
    # K products summed in another order: at most 2·K·u of the sum of their magnitudes.
    bound = 2 * K * U * torch._grouped_mm(a.abs(), b.abs(), offs)
    assert ((got[covered] - want[covered]).abs() <= bound[covered]).all()


def test_grouped_mm_gradients_match_eager_cpu():
    generator = torch.Generator().manual_seed(0)
    offs = torch.tensor([2, 2, 6], dtype=torch.int32)
    a = torch.randn(M, K, generator=generator, requires_grad=True)
    b = torch.randn(G, K, N, generator=generator, requires_grad=True)
    weight = torch.randn(M, N, generator=generator)  # a dense output gradient (the CPU kernel needs real strides)
    (torch._grouped_mm(a, b, offs) * weight).sum().backward()
    dev = xladev.device()
    ax, bx = a.detach().to(dev).requires_grad_(), b.detach().to(dev).requires_grad_()
    (torch._grouped_mm(ax, bx, offs.to(dev)) * weight.to(dev)).sum().backward()
    # Each gradient is a grouped product too: summed in another order, 2·n·u of its terms' magnitudes.
    a_abs, b_abs, w_abs = a.detach().abs(), b.detach().abs(), weight.abs()
    bound_a, bound_b = torch.zeros(M, K), torch.zeros(G, K, N)
    ends = offs.tolist()
    for group, (start, end) in enumerate(zip([0] + ends[:-1], ends)):
        bound_a[start:end] = 2 * N * U * (w_abs[start:end] @ b_abs[group].T)
        bound_b[group] = 2 * M * U * (a_abs[start:end].T @ w_abs[start:end])
    assert ((ax.grad.cpu()[:6] - a.grad[:6]).abs() <= bound_a[:6]).all()
    assert ((bx.grad.cpu() - b.grad).abs() <= bound_b).all()
    assert float(bx.grad.cpu()[1].abs().max()) == 0.0  # the empty group's weight gets no gradient
    assert float(ax.grad.cpu()[6].abs().max()) == 0.0  # the row past the last end takes part in nothing


def test_grouped_mm_runs_on_the_device_with_no_fallback():
    import xladev.debug.metrics as met

    met.clear_counters()
    dev = xladev.device()
    out = torch._grouped_mm(torch.randn(M, K).to(dev), torch.randn(G, K, N).to(dev),
                            torch.tensor([2, 4, 7], dtype=torch.int32).to(dev))
    out.cpu()
    assert not [name for name in met.counter_names() if name.startswith("aten::")]


def test_grouped_mm_of_mismatched_or_unsupported_inputs_is_a_clear_error():
    dev = xladev.device()
    with pytest.raises(RuntimeError, match="offs is required"):
        torch._grouped_mm(torch.randn(M, K).to(dev), torch.randn(G, K, N).to(dev))
    with pytest.raises(RuntimeError, match="contraction dimension"):
        torch._grouped_mm(torch.randn(M, K).to(dev), torch.randn(G, K + 1, N).to(dev),
                          torch.tensor([2, 4, 7], dtype=torch.int32).to(dev))
    with pytest.raises(RuntimeError, match="float32, bfloat16 and float16"):
        torch._grouped_mm(torch.randn(M, K, dtype=torch.float64).to(dev),
                          torch.randn(G, K, N, dtype=torch.float64).to(dev),
                          torch.tensor([2, 4, 7], dtype=torch.int32).to(dev))
