"""torch.fft on `xla`: every transform family matches eager CPU, forward and backward, with no CPU fallback.

The three aten ops behind torch.fft (`_fft_r2c`, `_fft_c2c`, `_fft_c2r`, see lowering/fft.py) are
reached through the public functions with each normalization, explicit sizes (cropping and zero
padding), dims that are not the last ones, more than three transformed dims (XLA transforms at most
three at once), real and complex inputs, float32 and float64; stft/istft and gradients run the same
ops backwards.

Tolerance: a float32 FFT of length n computes each output with an absolute error of at most about
log2(n) rounding steps on values of size ||x||_2 (each butterfly level rounds once, and the levels'
errors add), so |device - cpu| ≤ K · log2(n) · ε · ||x||_2 · scale, where ||x||_2 ≤ sqrt(n) · max|x|
bounds the input of one transform, `scale` is the normalization applied (1, 1/sqrt(n) or 1/n), ε is
the dtype's machine epsilon and K = 8 covers both sides' rounding and the twiddle factors' own error.
A wrong normalization, direction or conjugation is off by O(||y||), far above this.
"""

from __future__ import annotations

import math

import pytest
import torch

import xladev
from xladev.events import Fallback

F = torch.fft
K = 8


def _bound(x: torch.Tensor, n: int, norm: str | None, dtype=torch.float32) -> float:
    eps = torch.finfo(dtype).eps
    # norm=None scales a forward transform by 1 and an inverse one by 1/n: 1 bounds both.
    scale = {None: 1.0, "ortho": 1 / math.sqrt(n), "forward": 1 / n}[norm]
    return K * max(math.log2(n), 1.0) * eps * math.sqrt(n) * float(x.abs().max()) * scale


def _assert_close(actual: torch.Tensor, expected: torch.Tensor, bound: float) -> None:
    assert actual.device.type == "xla"
    actual = actual.cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    err = float((actual.detach() - expected.detach()).abs().max()) if expected.numel() else 0.0
    assert err <= bound, f"max |device - cpu| = {err:.3g} > bound {bound:.3g}"


def _no_fallbacks(events, allowed=()) -> None:
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback) if e.name not in allowed] == []


torch.manual_seed(0)
_REAL = torch.randn(4, 6, 10)
_CPLX = torch.randn(4, 6, 10, dtype=torch.complex64)

# (name, function, input, transform length n for the bound, norm)
CASES = [
    ("fft", lambda t: F.fft(t), _CPLX, 10, None),
    ("fft-real-padded", lambda t: F.fft(t, n=12), _REAL, 12, None),
    ("ifft-ortho", lambda t: F.ifft(t, norm="ortho"), _CPLX, 10, "ortho"),
    ("ifft-real", lambda t: F.ifft(t, dim=1), _REAL, 6, None),
    ("fft2-forward", lambda t: F.fft2(t, norm="forward"), _CPLX, 60, "forward"),
    ("ifftn-cropped", lambda t: F.ifftn(t, s=(3, 5), norm="forward"), _CPLX, 15, "forward"),
    ("fftn-dims-0-2", lambda t: F.fftn(t, dim=(0, 2)), _CPLX, 40, None),
    ("fftn-4d", lambda t: F.fftn(t.reshape(2, 2, 6, 10)), _CPLX, 240, None),
    ("rfft", lambda t: F.rfft(t), _REAL, 10, None),
    ("rfft2-sized", lambda t: F.rfft2(t, s=(5, 7)), _REAL, 35, None),
    ("rfftn-ortho", lambda t: F.rfftn(t, norm="ortho"), _REAL, 240, "ortho"),
    ("irfft", lambda t: F.irfft(t), _CPLX, 18, None),
    ("irfft-odd-forward", lambda t: F.irfft(t, n=9, norm="forward"), _CPLX, 9, "forward"),
    ("irfftn", lambda t: F.irfftn(t, dim=(0, 1)), _CPLX, 40, None),
    ("hfft", lambda t: F.hfft(t), _CPLX, 18, None),
    ("hfftn-ortho", lambda t: F.hfftn(t, norm="ortho"), _CPLX, 24 * 18, "ortho"),
    ("ihfft", lambda t: F.ihfft(t), _REAL, 10, None),
    ("ihfftn", lambda t: F.ihfftn(t, dim=(1, 2)), _REAL, 60, None),
]


@pytest.mark.parametrize("name,fn,x,n,norm", CASES, ids=[c[0] for c in CASES])
def test_transform_matches_cpu(name, fn, x, n, norm, dev, events):
    expected = fn(x)
    actual = fn(x.to(dev))
    _assert_close(actual, expected, _bound(x, n, norm))
    _no_fallbacks(events)


def test_float64_and_complex128(dev, events):
    x = _REAL.double()
    z = _CPLX.to(torch.complex128)
    _assert_close(F.rfftn(x.to(dev)), F.rfftn(x), _bound(x, 240, None, torch.float64))
    _assert_close(F.ifftn(z.to(dev)), F.ifftn(z), _bound(z, 240, None, torch.float64))
    _assert_close(F.irfft(z.to(dev), n=11), F.irfft(z, n=11), _bound(z, 11, None, torch.float64))
    _no_fallbacks(events)


def test_rfft_abs_sum_backward(dev, events):
    """Gradients through a real → complex transform: x → rfft → abs → sum."""
    x_cpu = torch.randn(3, 16, requires_grad=True)
    x_dev = x_cpu.detach().to(dev).requires_grad_(True)
    F.rfft(x_cpu).abs().sum().backward()
    F.rfft(x_dev).abs().sum().backward()
    # Each gradient entry is an inverse transform of unit phases (|·| ≤ 1) over 16 bins.
    _assert_close(x_dev.grad, x_cpu.grad, _bound(torch.ones(16), 16, None))
    _no_fallbacks(events)


@pytest.mark.parametrize("which", ["irfft", "hfft", "fft-complex-leaf"])
def test_backward_matches_cpu(which, dev, events):
    z_cpu = torch.randn(3, 9, dtype=torch.complex64, requires_grad=True)
    z_dev = z_cpu.detach().to(dev).requires_grad_(True)
    weight = torch.linspace(-1, 1, 16)

    def loss(z):
        w = weight.to(z.device)
        if which == "irfft":
            return (F.irfft(z, n=16, norm="ortho") * w).sum()
        if which == "hfft":
            return (F.hfft(z, n=16) * w).sum()
        return torch.view_as_real(F.fft(z, norm="forward")).pow(2).sum()

    loss(z_cpu).backward()
    loss(z_dev).backward()
    _assert_close(z_dev.grad, z_cpu.grad, 4 * _bound(z_cpu.detach(), 16, None))
    _no_fallbacks(events)


def test_stft_istft(dev, events):
    """stft forward and backward, and istft (its inverse) forward: the stft output comes back."""
    signal = torch.randn(2, 64, requires_grad=True)
    window = torch.hann_window(16)
    spec_cpu = torch.stft(signal, 16, hop_length=4, window=window, return_complex=True)
    s_dev = signal.detach().to(dev).requires_grad_(True)
    spec_dev = torch.stft(s_dev, 16, hop_length=4, window=window.to(dev), return_complex=True)
    bound = _bound(signal.detach(), 16, None)
    _assert_close(spec_dev, spec_cpu, bound)
    spec_cpu.abs().sum().backward()
    spec_dev.abs().sum().backward()
    # Each gradient entry adds the inverse transforms (unit phases, |·| ≤ 1) of the 13 frames covering it.
    _assert_close(s_dev.grad, signal.grad, 13 * _bound(torch.ones(16), 16, None))
    back = torch.istft(spec_dev.detach(), 16, hop_length=4, window=window.to(dev), length=64)
    _assert_close(back, signal.detach(), 4 * bound)
    # istft checks that the window's overlap-added envelope has no zero (`torch.equal` on a value,
    # read on the host); that check is not part of the transforms.
    _no_fallbacks(events, allowed=("aten::equal",))
