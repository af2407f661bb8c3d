"""index_reduce, put, equal/allclose and the small static-shape ops on `xla` against eager CPU.

index_reduce's prod and mean combine at most 3 float32 values per slot (a few ε, compared at 1e-6
relative); amax/amin, put without accumulation, copies and index lists are exact. equal and allclose
must read back one bool, not fall back with their inputs.
Real compiles and runs, no mocks.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.events import Fallback, TransferFromDevice

EPS = torch.finfo(torch.float32).eps


def no_fallback(events):
    assert not events.of(Fallback), [e.name for e in events.of(Fallback)]


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce, events):
    dev = xladev.device()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, generator=g)
    src = torch.randn(4, 3, generator=g)
    index = torch.tensor([0, 2, 0, 4])  # slot 0 twice, slots 1 and 3 untouched
    for include_self in (True, False):
        got = x.to(dev).index_reduce(0, index.to(dev), src.to(dev), reduce, include_self=include_self)
        want = x.index_reduce(0, index, src, reduce, include_self=include_self)
        torch.testing.assert_close(got.cpu(), want, rtol=4 * 3 * EPS, atol=4 * 3 * EPS)
    ints = torch.tensor([[7, -3], [2, 9], [4, 4]])
    got = ints.to(dev).index_reduce(1, torch.tensor([1, 1]).to(dev), ints.to(dev), reduce)
    assert torch.equal(got.cpu(), ints.index_reduce(1, torch.tensor([1, 1]), ints, reduce))
    xladev.mark_step()
    no_fallback(events)


def test_index_reduce_backward(events):
    dev = xladev.device()
    x, src = torch.rand(4, 2) + 0.5, torch.rand(3, 2) + 0.5
    index = torch.tensor([1, 3, 1])
    grads = []
    for device in (dev, "cpu"):
        a, b = x.to(device).requires_grad_(), src.to(device).requires_grad_()
        a.index_reduce(0, index.to(device), b, "prod").sum().backward()
        xladev.mark_step()
        grads.append((a.grad.cpu(), b.grad.cpu()))
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=8 * EPS, atol=8 * EPS)
    no_fallback(events)


@pytest.mark.parametrize("accumulate", [False, True])
def test_put(accumulate, events):
    dev = xladev.device()
    x = torch.arange(12.0).reshape(3, 4)
    index = torch.tensor([[0, -1], [5, 7]]) if not accumulate else torch.tensor([0, -1, 5, 0])
    source = torch.tensor([10.0, 20.0, 30.0, 40.0]).reshape(index.shape)
    got = x.to(dev).put(index.to(dev), source.to(dev), accumulate=accumulate)
    assert torch.equal(got.cpu(), x.put(index, source, accumulate=accumulate))
    no_fallback(events)


def test_equal_and_allclose_read_one_bool(events):
    dev = xladev.device()
    a = torch.randn(64, 32)
    da = a.to(dev)
    xladev.mark_step()
    events.clear()
    assert torch.equal(da, (da * 1.0)) is True
    assert torch.equal(da, da + 1) is False
    assert torch.equal(da, da[:1]) is False
    assert torch.allclose(da, da * (1 + 2e-6)) is True is torch.allclose(a, a * (1 + 2e-6))
    assert torch.allclose(da, da + 1e-2) is False is torch.allclose(a, a + 1e-2)
    no_fallback(events)
    reads = events.of(TransferFromDevice)
    assert len(reads) == 4 and all(r.nbytes <= 1 for r in reads), reads
    with pytest.raises(RuntimeError, match="Float did not match Double"):
        torch.allclose(da, da.double())


def test_cov_corrcoef_no_fallback(events):
    """cov sums n products of centred values: each side is within (n + 2)·ε·Σ|products| / (n - 1) of the
    exact value (the mean adds its own n-term sum), so the two differ by at most twice that; corrcoef
    divides by σ_i σ_j (a sqrt and two divisions: a few ε more, relative)."""
    torch.manual_seed(0)
    x = torch.randn(3, 6)
    n = x.shape[1]
    centred = (x - x.mean(dim=1, keepdim=True)).abs()
    magnitude = centred @ centred.T / (n - 1)
    cov_bound = 2 * (n + 2) * EPS * magnitude
    sigma = torch.cov(x).diagonal().sqrt()
    corr_bound = 2 * (n + 6) * EPS * magnitude / (sigma[:, None] * sigma[None, :])
    for fn, bound in ((torch.cov, cov_bound), (torch.corrcoef, corr_bound)):
        got = fn(x.to(xladev.device())).cpu()
        error = (got - fn(x)).abs()
        assert bool((error <= bound).all()), f"{fn.__name__}: error {error.max():.3g}, bound {bound.min():.3g}"
    no_fallback(events)


def test_static_shape_ops(events):
    dev = xladev.device()
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, 3.0]])
    d = x.to(dev)
    for size in (2, 5):
        assert torch.equal(torch.nonzero_static(d, size=size).cpu(), torch.nonzero_static(x, size=size))
    pieces = torch.split_with_sizes_copy(d, [1, 2], 1)
    for got, want in zip(pieces, torch.split_with_sizes_copy(x, [1, 2], 1)):
        assert torch.equal(got.cpu(), want)
    for got, want in zip(torch.unbind_copy(d, 1), torch.unbind_copy(x, 1)):
        assert torch.equal(got.cpu(), want)
    src = torch.tensor([[7.0, 8.0], [9.0, 10.0]])
    got = torch.as_strided_scatter(d, src.to(dev), (2, 2), (1, 3), 1)
    assert torch.equal(got.cpu(), torch.as_strided_scatter(x, src, (2, 2), (1, 3), 1))
    out = torch.empty(5, device=dev)
    torch.logspace(-1, 2, 5, base=3.0, out=out)
    torch.testing.assert_close(out.cpu(), torch.logspace(-1, 2, 5, base=3.0), rtol=4 * EPS, atol=0)
    with pytest.raises(RuntimeError, match="split_with_sizes"):
        torch.split_with_sizes_copy(d, [1, 1], 1)
    no_fallback(events)


def test_masked_write_of_a_broadcast_row_is_lowered(events):
    """`x[mask] = row` needs no count of True elements: lowered. One value per True element does: CPU."""
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    mask = x[:, 0] > 0
    row = torch.randn(3)
    expected = x.clone()
    expected[mask] = row
    device = x.to("xla")
    device[mask.to("xla")] = row.to("xla")
    assert torch.equal(device.cpu(), expected)
    no_fallback(events)

    per_element = torch.arange(float((x > 0).sum()))
    expected = x.clone()
    expected[x > 0] = per_element
    device = x.to("xla")
    device[(x > 0).to("xla")] = per_element.to("xla")
    assert torch.equal(device.cpu(), expected)
    assert [e.name for e in events.of(Fallback)] == ["aten::index_put_"]


@pytest.mark.parametrize("r, with_replacement", [(2, False), (3, True), (0, False), (6, False)])
def test_combinations_gather_a_static_table(r, with_replacement, events):
    """combinations (PyTorch's composite uses masked_select) runs as a gather of index tuples: same values,
    same gradient, no fallback."""
    torch.manual_seed(0)
    x = torch.randn(5, requires_grad=True)
    device_x = x.detach().to("xla").requires_grad_()
    expected = torch.combinations(x, r, with_replacement)
    actual = torch.combinations(device_x, r, with_replacement)
    assert torch.equal(actual.detach().cpu(), expected.detach())
    if expected.numel():
        weights = torch.arange(float(expected.numel())).reshape(expected.shape)
        (expected * weights).sum().backward()
        (actual * weights.to("xla")).sum().backward()
        # Each gradient entry sums at most C(8, 2) = 28 exact integer weights: exact in float32.
        assert torch.equal(device_x.grad.cpu(), x.grad)
    no_fallback(events)


@pytest.mark.parametrize("op", [torch.max, torch.min])
def test_max_min_of_an_empty_dimension_raise_as_eager(dev, op):
    # XLA would reduce an empty dimension to -inf/+inf with index 0; eager refuses, and so must the device,
    # with eager's exception type and message, at the call (not later, at compile time).
    empty = torch.rand(2, 0, 4)
    for tensor in (empty, empty.to(dev)):
        with pytest.raises(IndexError, match=rf"{op.__name__}\(\): Expected reduction dim 1 to have non-zero size"):
            op(tensor, dim=1)
        with pytest.raises(RuntimeError, match=r"Expected reduction dim to be specified for input.numel\(\) == 0"):
            op(tensor)
    values, indices = op(torch.rand(2, 3, 4).to(dev), dim=1)  # a non-empty one still reduces
    assert values.shape == indices.shape == (2, 4)
