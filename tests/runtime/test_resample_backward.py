"""Grid sampling (2-d, 3-d), anti-aliased and bicubic resizing, and F.bilinear on `xla`: forward and
backward (input and grid gradients) match eager CPU with no CPU fallback. Real compiles, no mocks.

Each test records all its cases and runs them as one graph (`xladev.mark_step`), to keep the compile
count small. Grid sampling's cases come in two groups: the default run's covers every mode, padding
mode and align_corners value (across 2-d and 3-d); the rest run with `-m slow` (a grid_sample case
costs 0.5-4 s of compile, bicubic the most).

Tolerances come from float32 rounding: an output is a weighted sum of `taps` input values (4 or 8
corners, 16 bicubic taps, the filter's support when anti-aliasing), so XLA's and ATen's orders of
summation may differ by taps · ε · scale, doubled for the rounding of the weights themselves; `scale`
is the largest magnitude of the compared tensor (at least 1).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import xladev
from xladev.events import Fallback

EPS = torch.finfo(torch.float32).eps


def assert_close(got, want, taps, what):
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    want = want.detach().double()
    scale = max(float(want.abs().max()), 1.0)
    error = float((got.detach().cpu().double() - want).abs().max())
    assert error <= 2 * taps * EPS * scale, f"{what}: max error {error:.3g} > {2 * taps * EPS * scale:.3g}"


def check(cases, events, taps):
    """cases: (name, fn, leaves). The gradients are of a fixed weighted sum of fn's output."""
    events.clear()
    pending = []
    for name, fn, leaves in cases:
        runs = []
        for device in (xladev.device(), "cpu"):
            inputs = [t.clone().to(device).requires_grad_() for t in leaves]
            out = fn(*inputs)
            weight = torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(device)
            runs.append([out.detach()] + list(torch.autograd.grad((out * weight).sum(), inputs)))
        pending.append((name, runs))
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    for name, (on_xla, on_cpu) in pending:
        for i, (got, want) in enumerate(zip(on_xla, on_cpu)):
            assert_close(got, want, taps, f"{name} result {i}")


def _grid(generator, *shape):
    # Some points outside [-1, 1], so every padding mode does something.
    return torch.rand(*shape, generator=generator) * 2.6 - 1.3


# (mode, padding_mode, align_corners) per group. "default": each 2-d mode and padding mode once with
# align_corners=False, the 3-d modes with align_corners=True; "more" (slow): the other combinations.
GRID_2D = {"default": [("bilinear", "zeros", False), ("nearest", "border", False), ("bicubic", "reflection", False)],
           "more": [("bilinear", "reflection", True), ("bicubic", "border", True)]}
GRID_3D = {"default": [("bilinear", "zeros", True), ("nearest", "reflection", True)],
           "more": [("bilinear", "border", False), ("bilinear", "reflection", False)]}
GROUPS = ["default", pytest.param("more", marks=pytest.mark.slow)]


def _grid_sample_cases(prefix, combinations, x, grid):
    return [(f"{prefix}-{mode}-{padding}-ac{align}", lambda a, b, m=mode, p=padding, ac=align:
             F.grid_sample(a, b, mode=m, padding_mode=p, align_corners=ac), [x, grid])
            for mode, padding, align in combinations]


@pytest.mark.parametrize("group", GROUPS)
def test_grid_sample_2d(events, group):
    g = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 6, generator=g), _grid(g, 2, 4, 3, 2)
    check(_grid_sample_cases("2d", GRID_2D[group], x, grid), events, taps=16)


@pytest.mark.parametrize("group", GROUPS)
def test_grid_sample_3d(events, group):
    g = torch.Generator().manual_seed(1)
    x, grid = torch.randn(2, 2, 4, 5, 3, generator=g), _grid(g, 2, 3, 2, 4, 3)
    check(_grid_sample_cases("3d", GRID_3D[group], x, grid), events, taps=8)


def test_resize_antialias_and_bicubic(events):
    x = torch.randn(2, 3, 9, 7, generator=torch.Generator().manual_seed(2))
    cases = []
    for mode, antialias, align, size in [("bilinear", True, False, (4, 3)), ("bilinear", True, True, (13, 5)),
                                         ("bicubic", True, False, (5, 10)), ("bicubic", True, True, (3, 2)),
                                         ("bicubic", False, False, (13, 11)), ("bicubic", False, True, (4, 5))]:
        cases.append((f"{mode}-aa{antialias}-ac{align}-{size}", lambda a, m=mode, aa=antialias, ac=align, s=size:
                      F.interpolate(a, size=s, mode=m, antialias=aa, align_corners=ac), [x]))
    cases.append(("bilinear-aa-scale0.3", lambda a: F.interpolate(a, scale_factor=0.3, mode="bilinear", antialias=True,
                                                                  recompute_scale_factor=False), [x]))
    # a 9 → 3 downscale spreads the filter over 3·2 + 1 input pixels per axis (7·7 = 49 taps), bicubic 13·13
    check(cases, events, taps=169)


def test_bilinear_layer(events):
    g = torch.Generator().manual_seed(3)
    leaves = [torch.randn(2, 3, 4, generator=g), torch.randn(2, 3, 5, generator=g),
              torch.randn(6, 4, 5, generator=g), torch.randn(6, generator=g)]
    check([("bilinear", F.bilinear, leaves)], events, taps=20)  # 4·5 products per output


def test_bilinear_layer_integers(dev):
    g = torch.Generator().manual_seed(4)
    a, b, w = (torch.randint(-3, 3, shape, generator=g) for shape in [(2, 4), (2, 5), (6, 4, 5)])
    assert torch.equal(F.bilinear(a.to(dev), b.to(dev), w.to(dev)).cpu(), F.bilinear(a, b, w))
