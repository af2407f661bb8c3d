"""Complex tensors on `xla`: arithmetic, the complex views and conjugation match eager CPU, with no fallback.

complex64 and complex128 arithmetic (add, mul, matmul, abs, exp, sum) is compared with eager CPU;
`view_as_real` / `view_as_complex` / `.real` / `.imag` / `.conj()` are views on the device too
(lowering/complex.py, runtime/lowering/views.py): writing through them changes the base exactly as in eager
PyTorch, which is checked by running the same writes on both sides.

Tolerances: ε is the real dtype's machine epsilon. A complex product rounds each of its two real
products and their sum (≤ 4ε·|a||b| with slack); exp rounds exp, cos and sin (a few ε of |exp z|);
a matmul or sum of k terms is within k·ε·Σ|terms| (summation order differs between XLA and ATen).
Views and conjugation move values without arithmetic: they are compared exactly.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.events import Fallback


def _eps(dtype: torch.dtype) -> float:
    return torch.finfo(dtype.to_real() if dtype.is_complex else dtype).eps


def _assert_close(actual, expected, bound: float = 0.0) -> None:
    assert actual.device.type == "xla"
    actual = actual.detach().cpu()
    expected = expected.detach().resolve_conj().resolve_neg()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    err = float((actual - expected).abs().max()) if expected.numel() else 0.0
    assert err <= bound, f"max |device - cpu| = {err:.3g} > bound {bound:.3g}"


def _product_bound(a, b, k: int) -> float:
    """k-term complex dot products: k·4ε on each Σ|a||b| ≤ k·max|a|·max|b|."""
    return 4 * k * _eps(a.dtype) * k * float(a.abs().max() * b.abs().max())


def _no_fallbacks(events) -> None:
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_arithmetic_matches_cpu(dtype, dev, events):
    torch.manual_seed(0)
    a, b = torch.randn(5, 7, dtype=dtype), torch.randn(7, 3, dtype=dtype)
    c = torch.randn(5, 7, dtype=dtype)
    da, db, dc = a.to(dev), b.to(dev), c.to(dev)
    eps = _eps(dtype)
    big = float(a.abs().max() * c.abs().max())
    _assert_close(da + dc, a + c, 2 * eps * float((a.abs() + c.abs()).max()))
    _assert_close(da * dc, a * c, 4 * eps * big)
    _assert_close(da @ db, a @ b, _product_bound(a, b, 7))
    _assert_close(da.abs(), a.abs(), 4 * eps * float(a.abs().max()))
    _assert_close(da.exp(), a.exp(), 8 * eps * float(a.exp().abs().max()))
    _assert_close(da.sum(), a.sum(), 35 * eps * float(a.abs().sum()))
    _assert_close(da.sum(1), a.sum(1), 7 * eps * float(a.abs().sum()))
    _no_fallbacks(events)


def test_mixed_real_and_complex_promote(dev, events):
    z, x = torch.randn(4, 3, dtype=torch.complex64), torch.randn(4, 3, dtype=torch.float64)
    out = z.to(dev) * x.to(dev) + 1j
    _assert_close(out, z * x + 1j, 4 * _eps(torch.complex128) * float((z.abs() * x.abs()).max() + 1))
    _no_fallbacks(events)


# Each function gets a fresh copy of the same complex tensor on each side and returns what to compare:
# the base after writes through a view shows whether the write reached it.
def _write_real_view(t):
    torch.view_as_real(t)[..., 0] = 1
    return t


def _scale_real_view_in_place(t):
    torch.view_as_real(t).mul_(2)
    return t


def _write_imag(t):
    t.imag.fill_(3)
    return t


def _write_real_of_row(t):
    t[1].real.copy_(torch.arange(4.0, device=t.device))
    return t


def _write_through_conj(t):
    y = t.conj()
    y[0] = 1 + 2j  # stores the conjugate, 1 - 2j, in t
    return t


def _write_imag_of_conj(t):
    t.conj().imag.fill_(3)  # imag of conj(t) is -imag(t)
    return t


def _complex_view_of_real_view(t):
    pairs = torch.view_as_real(t)
    torch.view_as_complex(pairs)[1, 2] = 7j
    return torch.cat([t.reshape(-1), torch.view_as_complex(pairs.clone()).reshape(-1)])


def _write_through_view_as_complex(t):
    pairs = torch.view_as_real(t).clone()
    torch.view_as_complex(pairs).mul_(1j)  # (re, im) → (-im, re)
    return pairs


VIEW_CASES = {
    "read-view_as_real": lambda t: torch.view_as_real(t),
    "read-real-imag": lambda t: torch.stack([t.real, t.imag]),
    "read-conj-imag": lambda t: t.conj().imag,
    "read-view_as_real-of-slice": lambda t: torch.view_as_real(t[:, 1:3]).transpose(0, 2),
    "resolve_conj": lambda t: t.conj().resolve_conj(),
    "conj_physical": lambda t: t.conj_physical(),
    "conj_physical_": lambda t: t.conj_physical_(),
    "write-view_as_real": _write_real_view,
    "mul_-view_as_real": _scale_real_view_in_place,
    "write-imag": _write_imag,
    "write-real-of-row": _write_real_of_row,
    "write-through-conj": _write_through_conj,
    "write-imag-of-conj": _write_imag_of_conj,
    "view_as_complex-of-view_as_real": _complex_view_of_real_view,
    "write-view_as_complex": _write_through_view_as_complex,
}


@pytest.mark.parametrize("name", list(VIEW_CASES))
def test_views_and_writes_match_cpu(name, dev, events):
    fn = VIEW_CASES[name]
    z = torch.randn(3, 4, dtype=torch.complex64, generator=torch.Generator().manual_seed(1))
    expected = fn(z.clone())
    actual = fn(z.clone().to(dev))
    _assert_close(actual, expected)  # no arithmetic: exact
    _no_fallbacks(events)


def test_conjugate_is_materialised_on_device(dev, events):
    """Device tensors carry no conjugate bit: `.conj()`'s value is the conjugate itself (a documented
    difference from eager PyTorch, where it is a lazy bit); products with it are still right."""
    z = torch.randn(3, 4, dtype=torch.complex64)
    w = torch.randn(4, 2, dtype=torch.complex64)
    dz, dw = z.to(dev), w.to(dev)
    assert not dz.conj().is_conj()
    _assert_close(dz.conj() @ dw, z.conj() @ w, _product_bound(z, w, 4))
    _assert_close(dz.mH @ dz, z.mH @ z, _product_bound(z, z, 3))
    _assert_close(torch.dot(dz[0].conj(), dz[1]), torch.dot(z[0].conj(), z[1]), _product_bound(z, z, 4))
    _no_fallbacks(events)


def test_complex_and_polar_forward_and_backward(dev, events):
    torch.manual_seed(2)
    re, im = torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)  # im broadcasts

    def loss(r, i):
        c = torch.complex(r, i)
        p = torch.polar(r.abs(), i)
        return c, p, (c * p).abs().sum() + torch.view_as_real(c).pow(2).sum()

    c_cpu, p_cpu, l_cpu = loss(re, im)
    d_re, d_im = re.detach().to(dev).requires_grad_(True), im.detach().to(dev).requires_grad_(True)
    c_dev, p_dev, l_dev = loss(d_re, d_im)
    scale = float(re.detach().abs().max() + im.detach().abs().max())
    eps = _eps(torch.float32)
    _assert_close(c_dev, c_cpu)
    _assert_close(p_dev, p_cpu, 4 * eps * scale)
    l_cpu.backward()
    l_dev.backward()
    _assert_close(d_re.grad, re.grad, 64 * eps * scale ** 3)
    _assert_close(d_im.grad, im.grad, 3 * 64 * eps * scale ** 3)  # im's gradient sums 3 rows
    _no_fallbacks(events)


def test_gradient_through_view_as_complex(dev, events):
    pairs = torch.randn(5, 2, requires_grad=True)
    d_pairs = pairs.detach().to(dev).requires_grad_(True)
    for p in (pairs, d_pairs):
        z = torch.view_as_complex(p)
        (z * z).abs().sum().backward()  # |z|² summed: gradient 2·(re, im)
    _assert_close(d_pairs.grad, pairs.grad, 8 * _eps(torch.float32) * float(pairs.detach().abs().max()))
    _no_fallbacks(events)


def test_reductions_and_angle_keep_the_imaginary_part(dev, events):
    """Regression: angle, var, std and vdot once cast complex inputs to real (dropping the imaginary part)."""
    torch.manual_seed(3)
    z, w = torch.randn(16, dtype=torch.complex64), torch.randn(16, dtype=torch.complex64)
    zx, wx = z.to(dev), w.to(dev)
    eps = _eps(z.dtype)
    scale = float(z.abs().max())
    _assert_close(torch.angle(zx), torch.angle(z), 4 * eps * 3.2)  # |angle| <= pi, a few roundings
    # var/std: 16 squared moduli summed (16·ε relative) around a mean of the same size.
    _assert_close(torch.var(zx), torch.var(z), 16 * 4 * eps * scale ** 2)
    _assert_close(torch.std(zx), torch.std(z), 16 * 4 * eps * scale)
    _assert_close(torch.vdot(zx, wx), torch.vdot(z, w), _product_bound(z, w, 16))
    _no_fallbacks(events)


def test_sgn_of_infinite_and_nan_complex_values_matches_eager(dev):
    inf, nan = float("inf"), float("nan")
    values = torch.tensor([complex(inf, inf), complex(nan, nan), 0j, complex(inf, 0), complex(-inf, 0), 3 + 4j,
                           complex(0, -2)], dtype=torch.complex64)
    expected = values.sgn()
    got = values.to(dev).sgn().cpu()
    # Bit-for-bit class agreement: nan where eager has nan (both parts), the same finite values elsewhere.
    assert torch.equal(got.real.isnan(), expected.real.isnan()) and torch.equal(got.imag.isnan(), expected.imag.isnan())
    finite = ~expected.real.isnan()
    torch.testing.assert_close(got[finite], expected[finite])
