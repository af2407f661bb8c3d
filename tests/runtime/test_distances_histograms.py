"""cdist, pdist, dist and the histograms on `xla` against eager CPU, with no fallback.

Tolerances. A p-norm distance over M coordinates is a sum of M rounded terms, then a root: its
relative error is at most about (M + 2)·ε (ε: float32's machine epsilon); gradients add a division
and a power, a few ε more, so both are compared at 4·(M + 2)·ε relative (with the same absolute
bound scaled by the largest value, for entries that cancel to ~0). cdist's p = 2 product form
|a|² + |b|² - 2a·b (used past 25 rows, as PyTorch does) makes an absolute error in the *squared*
distance of about 4·M·ε·(|a|² + |b|²) on both devices, so squared distances are compared at twice
that. Histogram counts are exact; weighted and density histograms sum a few float32 terms
(relative 8·ε·n for n per bin).
Real compiles and runs, no mocks.
"""

from __future__ import annotations

import math

import pytest
import torch

import xladev
from xladev.events import Fallback

EPS = torch.finfo(torch.float32).eps
M = 5


def points(*shape, seed=0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def close(got, want, terms: int):
    bound = 4 * (terms + 2) * EPS
    scale = max(want.abs().max().item(), 1.0) if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=bound, atol=bound * scale, equal_nan=True)


def no_fallback(events):
    assert not events.of(Fallback), [e.name for e in events.of(Fallback)]


def grads_both(fn, inputs):
    """fn(*inputs) and the input gradients of its weighted sum, on the device and on the CPU."""
    out = []
    for device in (xladev.device(), "cpu"):
        leaves = [t.clone().to(device).requires_grad_() for t in inputs]
        value = fn(*leaves)
        weight = torch.linspace(0.5, 1.5, value.numel()).reshape(value.shape).to(device)
        grads = torch.autograd.grad((value * weight).sum(), leaves)
        xladev.mark_step()
        out.append((value.detach().cpu(), [g.cpu() for g in grads]))
    return out


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, math.inf, 0.5, 3.0])
def test_cdist_direct(p, events):
    a, b = points(2, 4, M), points(2, 3, M, seed=1)
    b[0, 1] = a[0, 2]  # a zero distance: the gradient's 0/0 case
    (dv, dg), (cv, cg) = grads_both(lambda x, y: torch.cdist(x, y, p), [a, b])
    no_fallback(events)
    close(dv, cv, M)
    for g, w in zip(dg, cg):
        close(g, w, M + 3)


@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist"])
def test_cdist_euclidean_paths(mode, events):
    a, b = points(30, M), points(7, M, seed=1)  # 30 rows > 25: the product form when allowed
    (dv, dg), (cv, cg) = grads_both(lambda x, y: torch.cdist(x, y, 2.0, compute_mode=mode), [a, b])
    no_fallback(events)
    norms = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :]
    torch.testing.assert_close(dv ** 2, cv ** 2, rtol=0, atol=8 * M * EPS * norms.max().item())
    for g, w in zip(dg, cg):
        close(g, w, 2 * M)


@pytest.mark.parametrize("p", [0.0, 2.0, math.inf, 0.5])
def test_pdist(p, events):
    x = points(5, M)
    x[3] = x[1]  # a zero distance
    (dv, dg), (cv, cg) = grads_both(lambda t: torch.nn.functional.pdist(t, p), [x])
    no_fallback(events)
    close(dv, cv, M)
    close(dg[0], cg[0], M + 3)


@pytest.mark.parametrize("p", [0, 3.5, math.inf, -math.inf])
def test_dist(p, events):
    a, b = points(3, 4), points(4, seed=1)
    b[1] = a[0, 1]
    if p == 0:  # a count: PyTorch defines no gradient (its autograd graph does not use the inputs)
        got, want = on_both(lambda x, y: torch.dist(x, y, p), a, b)
        no_fallback(events)
        assert got.cpu().item() == want.item() == 11
        return
    (dv, dg), (cv, cg) = grads_both(lambda x, y: torch.dist(x, y, p), [a, b])
    no_fallback(events)
    close(dv, cv, 12)
    for g, w in zip(dg, cg):
        close(g, w, 15)


def on_both(fn, *inputs):
    dev = xladev.device()
    got = fn(*[t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs])
    want = fn(*inputs)
    xladev.mark_step()
    return got, want


def flat(result):
    if isinstance(result, torch.Tensor):
        return [result.cpu()]
    return [t for r in result for t in flat(r)]


HISTOGRAMS = {
    "histc_data_range": lambda x, w: torch.histc(x, 7),
    "histc_range": lambda x, w: torch.histc(x, 6, -1.0, 1.5),
    "histogram_bins": lambda x, w: torch.histogram(x, 5),
    "histogram_range_weight_density": lambda x, w: torch.histogram(x, 4, range=(-1.0, 1.0), weight=w, density=True),
    "histogram_edges": lambda x, w: torch.histogram(x, x.new_tensor([-2.0, -0.5, 0.0, 0.25, 2.0]), weight=w),
    "histogramdd_density": lambda x, w: torch.histogramdd(x.reshape(-1, 2), [2, 3], range=[-1.0, 1.0, -2.0, 0.5],
                                                          weight=w[::2], density=True),
    "histogramdd_edges": lambda x, w: torch.histogramdd(x.reshape(-1, 2), [x.new_tensor([-1.0, 0.0, 1.0]),
                                                                         x.new_tensor([-3.0, 0.5, 3.0])]),
}


@pytest.mark.parametrize("name", list(HISTOGRAMS))
def test_histograms(name, events):
    x = points(40)
    x[:4] = torch.tensor([-1.0, 1.0, 0.0, 0.25])  # on edges: the last bin keeps its right edge
    w = points(40, seed=2).abs()
    got, want = on_both(HISTOGRAMS[name], x, w)
    no_fallback(events)
    for g, c in zip(flat(got), flat(want)):
        assert g.shape == c.shape and g.dtype == c.dtype
        torch.testing.assert_close(g.cpu(), c, rtol=8 * 40 * EPS, atol=8 * 40 * EPS)


def test_histogram_of_nan_data_is_nan_not_a_count(events):
    # PyTorch raises for a non-finite range taken from the data; a lazy graph makes it all NaN instead.
    x = torch.tensor([1.0, float("nan"), 2.0]).to(xladev.device())
    assert torch.histc(x, 3).cpu().isnan().all()
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, 3, 2.0, 1.0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
@pytest.mark.parametrize("bins,low,high", [(4, 0, 4), (7, 0, 0), (5, 2, 11), (3, 6, 6)])
def test_histc_of_integers_counts_as_cuda_does(dtype, bins, low, high, events):
    # The CPU has no integer histc; CUDA has, and transformers' Mixtral calls it off the CPU (its experts' token
    # counts). The oracle: the CPU's float64 histc of the same values, whose bins agree with CUDA's integer
    # arithmetic for small integers; the counts in the input's dtype, as CUDA's.
    x = torch.randint(0, 12, (60,), generator=torch.Generator().manual_seed(bins + low + high)).to(dtype)
    x[:3] = torch.tensor([low, high, 6])  # on the range's ends, and the (6, 6) case's single value
    got = torch.histc(x.to(xladev.device()), bins, low, high).cpu()
    no_fallback(events)
    want = torch.histc(x.double(), bins, low, high)
    assert got.dtype == dtype and torch.equal(got, want.to(dtype))


def test_histc_of_booleans_is_refused_as_on_every_device():
    with pytest.raises(RuntimeError, match="not implemented for 'Bool'"):
        torch.histc(torch.ones(3, dtype=torch.bool).to(xladev.device()), 3)
