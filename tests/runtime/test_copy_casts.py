"""`copy_` converts between any two dtypes on `xla` exactly as eager CPU does, in every direction.

Unlike an in-place op (`add_`, `out=`), `copy_` may write any dtype into any other: toward zero from
floating point to integers, modulo 2ⁿ between integers, nonzero to True, the real part from complex to
real, round to nearest even between floating types (overflow to ±inf). Each conversion is one correctly
rounded operation, so results are compared exactly (NaN equal to NaN).

Every ordered pair of the dtypes below is checked host→device, device→device and device→host. Pairs
whose eager result is undefined behaviour in C++ are left out value by value (`_defined`): a floating
value whose truncation the integer dtype cannot hold (a negative float into uint8, NaN, ±inf, 1e10 into
int32). Eager's answer for those comes from whatever the compiler and vector unit do, so it is no oracle.

Device-side conversions of a whole direction are recorded first and run as one graph (one compile).
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

import xladev
from xladev.events import Fallback

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128]

# Truncation both ways, negatives, wraparound between integer widths, ±0.5 (0 in any integer dtype),
# values past float16's and float32's range (±inf there), and the specials. Large integers stay clear of
# ties that rounding through float32 would break differently (eager makes bfloat16 and float16 from a
# float32), so the conversions are single roundings on both sides.
_REALS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.7, 2.5, 3.99, -3.99, 1 / 3, 127.0, -128.0, 200.9, 255.0,
          256.0, 300.0, -129.0, 65504.0, 70000.5, -70000.5, 2.0 ** 31 + 5, -(2.0 ** 31) - 7, 2.0 ** 40 + 3,
          3.0e38, 1.0e39, -1.0e300, math.inf, -math.inf, math.nan]
_COMPLEX_IMAG = [0.0, 2.0, -0.5, 1.0e39]  # cycled over the real parts: nonzero imaginary parts, one past float32


def _source(dtype: torch.dtype) -> torch.Tensor:
    """The host values of a source dtype: every candidate the dtype holds exactly (integers, bool) or
    rounds to (floating types, which round once on the host for both devices)."""
    if dtype == torch.bool:
        return torch.tensor([False, True, True, False])
    if dtype.is_complex:
        imag = [_COMPLEX_IMAG[i % len(_COMPLEX_IMAG)] for i in range(len(_REALS))]
        return torch.complex(torch.tensor(_REALS, dtype=torch.float64),
                             torch.tensor(imag, dtype=torch.float64)).to(dtype)
    if dtype.is_floating_point:
        return torch.tensor(_REALS, dtype=torch.float64).to(dtype)
    info = torch.iinfo(dtype)
    ints = sorted({int(v) for v in _REALS if math.isfinite(v) and info.min <= int(v) <= info.max})
    return torch.tensor(ints + [info.min, info.max], dtype=dtype)


def _defined(src: torch.Tensor, dst_dtype: torch.dtype) -> torch.Tensor:
    """Mask of the source values whose conversion to `dst_dtype` C++ defines (see the module docstring)."""
    if not (src.dtype.is_floating_point or src.dtype.is_complex) or dst_dtype.is_floating_point \
            or dst_dtype.is_complex or dst_dtype == torch.bool:
        return torch.ones(src.shape, dtype=torch.bool)
    real = (src.real if src.dtype.is_complex else src).double()
    info = torch.iinfo(dst_dtype)
    truncated = real.trunc()
    return real.isfinite() & (truncated >= info.min) & (truncated <= info.max)


def _cases():
    """(src dtype, dst dtype, host source values): every ordered pair, with only its defined values."""
    for src_dtype in DTYPES:
        src = _source(src_dtype)
        for dst_dtype in DTYPES:
            yield src_dtype, dst_dtype, src[_defined(src, dst_dtype)]


def _eager(src: torch.Tensor, dst_dtype: torch.dtype) -> torch.Tensor:
    return torch.zeros(src.shape, dtype=dst_dtype).copy_(src)


def _assert_same(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.device.type == "cpu" and got.dtype == want.dtype and got.shape == want.shape, what
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.fixture(autouse=True)
def _quiet_complex_warning():
    # Eager and the device both warn when a complex value loses its imaginary part (its own test checks it).
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Casting complex values to real discards the imaginary part")
        yield


@pytest.mark.parametrize("direction", ["host to device", "device to device"])
def test_copy_into_device_converts_like_eager(direction, events):
    dev = xladev.device()
    pending = []
    for src_dtype, dst_dtype, src in _cases():
        source = src if direction == "host to device" else src.to(dev)
        dst = torch.zeros(src.shape, dtype=dst_dtype, device=dev)
        assert dst.copy_(source) is dst
        pending.append((src_dtype, dst_dtype, dst, _eager(src, dst_dtype)))
    xladev.mark_step()
    for src_dtype, dst_dtype, got, want in pending:
        _assert_same(got.cpu(), want, f"{direction} {src_dtype} -> {dst_dtype}")
    assert events.of(Fallback) == []


def test_copy_from_device_to_host_converts_like_eager():
    dev = xladev.device()
    for src_dtype, dst_dtype, src in _cases():
        got = torch.zeros(src.shape, dtype=dst_dtype).copy_(src.to(dev))
        _assert_same(got, _eager(src, dst_dtype), f"device to host {src_dtype} -> {dst_dtype}")


def test_copy_broadcasts_and_converts_into_a_view(dev):
    """`x[1:] = floats` on an int tensor: copy_ into a view, broadcast over rows, truncated toward zero."""
    want = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    got = want.to(dev)
    row = torch.tensor([1.9, -2.9, 3.5, -0.5])
    want[1:] = row
    got[1:] = row.to(dev)
    _assert_same(got.cpu(), want, "setitem")


def test_complex_to_real_copy_warns_like_eager(dev):
    src = torch.tensor([1 + 2j, -3 - 1j])
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        got = torch.zeros(2, device=dev).copy_(src.to(dev))
    _assert_same(got.cpu(), torch.tensor([1.0, -3.0]), "complex -> float")


def test_in_place_ops_still_refuse_what_eager_refuses(dev):
    """copy_ converts anything, but an in-place op or `out=` may not write a dtype it cannot hold."""
    floats = torch.tensor([1.5, 2.5, -1.0], device=dev)
    ints = torch.zeros(3, dtype=torch.long, device=dev)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        ints.add_(floats)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.add(floats, 1, out=ints)
    assert ints.cpu().tolist() == [0, 0, 0]
