"""torch.special's Bessel, Airy, zeta functions and orthogonal polynomials on `xla` match eager CPU.

Every function runs on dense grids across its ranges (small and large arguments, negative ones, the
zeros of the oscillating functions, poles, the branch boundaries of the approximations, 0, -0, +-inf,
NaN), in float32 and float64 (the Bessel/Airy and polynomial grids in float64 with `-m slow`), with real
compiles and no CPU fallback. The device evaluates the same approximations as the CPU kernels (see
lowering/special_bessel.py and special_polynomials.py), so the tolerances only cover rounding:

* float32: the coverage tolerance (rtol 1e-4, atol 1e-5).
* float64: both sides evaluate one formula in float64 and differ only by libm rounding (a few ulp of
  sin, cos, exp, log), which an oscillating function's phase (|x| for J/Y, |x|^1.5 for Ai) amplifies
  in absolute terms: atol 64 eps (1 + phase) with the functions' amplitudes <= 1, rtol 1e-12.
* Orthogonal polynomials above degree 33 in float32: their trigonometric forms multiply acos(x) by n
  and the CPU's float32 acos is not always correctly rounded (the device's is), and recurrences of
  hundreds of steps accumulate a few ulp per step either way; both are bounded by 8 n eps E, E the
  polynomial's envelope near x (1 for T, 1/sin t for U, 1/cos(t/2) for V, 1/sin(t/2) for W, with
  t = acos x, capped by the values at the ends). float64 is compared at rtol 1e-10 for all degrees.
* zeta with negative non-integer q sums terms of both signs as large as d^-x (d: q's distance to
  the nearest integer) that cancel; jax's and the CPU's sums keep ~eps of the largest term.

One PyTorch quirk is not reproduced: for x = NaN and n >= 2 several CPU polynomial kernels skip their
recurrence and return an uninitialised value (inf on this machine); the device returns NaN there,
and the tests check that instead.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import xladev
from xladev.events import Fallback

EPS32 = torch.finfo(torch.float32).eps
EPS64 = torch.finfo(torch.float64).eps

# The dense-grid sweeps compile one large graph per dtype (1.5-3 s each). float32 runs by default: the
# same formulas as float64 plus float32's own detours through float64 (divisions by constants, acos);
# the float64 sweeps (at rtol 1e-12 / 1e-10) run with `-m slow`.
DTYPES_F64_SLOW = [pytest.param(torch.float32, id="f32"),
                   pytest.param(torch.float64, id="f64", marks=pytest.mark.slow)]

UNARY = ("airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
         "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
         "spherical_bessel_j0")
CHEBYSHEV = tuple(f"{shift}chebyshev_polynomial_{kind}" for shift in ("", "shifted_") for kind in "tuvw")
POLYNOMIALS = CHEBYSHEV + ("hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                           "legendre_polynomial_p")
# Kernels that may return an uninitialised value for x = NaN, n >= 2 (the recurrence stops before its first
# step; T's kernel initialises its result in some PyTorch versions, not in others).
UNINITIALISED_AT_NAN = tuple(n for n in POLYNOMIALS if not n.startswith("hermite"))


def _unary_grid() -> np.ndarray:
    # Bessel zeros near 2.4, 3.8, 5.5, ...; Ai zeros at -2.34, -4.09, ...; branch edges at 1e-5 (J0),
    # 0.5 (spherical j0), 2 (K), 2.09 / 8.32 / 103.892 (Ai), 5 (J, Y).
    edges = [0.0, -0.0, 1e-5, 0.5, 2.0, 2.09, -2.09, 5.0, 8.3203353, 103.892, 103.9, 2.404825557695773,
             3.8317059702075125, 0.8935769662791675, -2.338107410459767, -4.087949444130971, 1e6, 1e30, -1e30,
             np.inf, -np.inf, np.nan]
    edges += list(np.nextafter(np.array(edges[2:11]), np.inf)) + list(np.nextafter(np.array(edges[2:11]), -np.inf))
    return np.concatenate([np.linspace(-30, 30, 2401), np.linspace(-1000, 1000, 401),
                           np.geomspace(1e-8, 1e4, 241), -np.geomspace(1e-8, 1e4, 241), edges])


def _run(events, calls):
    """Each `(fn, args)` of `calls` on the device, all in one graph; returns the results' CPU copies,
    after checking that no op fell back to the CPU."""
    dev = xladev.device()
    outs = [fn(*[a.to(dev) if isinstance(a, torch.Tensor) else a for a in args]) for fn, args in calls]
    xladev.mark_step()
    results = [o.cpu() for o in outs]
    assert [e.name for e in events.of(Fallback)] == []
    return results


def _within(actual, expected, rtol, atol):
    """|actual - expected| <= atol + rtol |expected| (tolerances may be tensors), NaN where both are NaN."""
    close = (actual.double() - expected.double()).abs() <= atol + rtol * expected.double().abs()
    return close | (actual == expected) | (actual.isnan() & expected.isnan())


def _assert_close(actual, expected, rtol, atol, what):
    close = _within(actual, expected, rtol, atol)
    bad = (~close).nonzero()
    assert not len(bad), f"{what}: {len(bad)} of {close.numel()} differ, e.g. (index, device, cpu) " + str(
        [(tuple(i.tolist()), actual[tuple(i)].item(), expected[tuple(i)].item()) for i in bad[:5]])


@pytest.mark.parametrize("dtype", DTYPES_F64_SLOW)
def test_unary_functions_match_cpu_on_dense_grid(events, dtype):
    x = torch.tensor(_unary_grid(), dtype=dtype)
    fns = [getattr(torch.special, name) for name in UNARY]
    calls = [(fn, (x,)) for fn in fns]
    if dtype == torch.float32:  # integers promote to float32
        calls.append((torch.special.bessel_y1, (torch.arange(-12, 13),)))
    results = _run(events, calls)
    if dtype == torch.float32:
        rtol, atol = 1e-4, 1e-5
        ints = torch.arange(-12, 13)
        _assert_close(results.pop(), torch.special.bessel_y1(ints), rtol, atol, "bessel_y1 of int64")
    else:
        phase = 1 + x.double().abs() ** 1.5  # Ai's phase; covers J/Y's |x|
        rtol, atol = 1e-12, 64 * EPS64 * torch.where(x.abs() < 1e29, phase, 1.0)
    for name, fn, actual in zip(UNARY, fns, results):
        expected = fn(x)
        assert actual.dtype == expected.dtype == dtype
        _assert_close(actual, expected, rtol, atol, name)


def _zeta_grid(dtype):
    xs = np.concatenate([np.linspace(-3, 12, 61), [1.0, 1 + 1e-6, 1.001, 20, 50, 100, 300, np.inf, -np.inf, np.nan]])
    qs = np.concatenate([np.linspace(-5, 5, 41), [1e-8, 1e-3, 0.1, 10, 1e3, 1e6, 1e12, np.inf, -np.inf, np.nan,
                                                  -2.5, -0.5, -1e-3]])
    x, q = np.meshgrid(xs, qs)
    return torch.tensor(x, dtype=dtype), torch.tensor(q, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_zeta_matches_cpu(events, dtype):
    x, q = _zeta_grid(dtype)
    q_values, x_values = torch.tensor([1.0, 2.0, 0.5, -2.5, -3.0]), torch.tensor([2.0, 3.0, 1.0, 0.5, 4.0])
    calls = [(torch.special.zeta, (x, q))]
    if dtype == torch.float32:  # the scalar overloads
        calls += [(lambda t: torch.special.zeta(2.0, t), (q_values,)),
                  (lambda t: torch.special.zeta(t, 1.5), (x_values,))]
    actual, *scalar_results = _run(events, calls)
    expected = torch.special.zeta(x, q)
    # Cancellation for q < 0: terms up to d^-x with d = q's distance to the nearest integer.
    d = (q.double() - q.double().round()).abs()
    largest = torch.where((q < 0) & (d > 0) & x.isfinite(), d ** -x.double(), torch.zeros_like(d))
    rtol, atol = (1e-4, 1e-5) if dtype == torch.float32 else (1e-12, 1e-300)
    _assert_close(actual, expected, rtol, atol + 64 * EPS64 * largest, "zeta")
    if scalar_results:
        _assert_close(scalar_results[0], torch.special.zeta(2.0, q_values), rtol, atol, "zeta(scalar, tensor)")
        _assert_close(scalar_results[1], torch.special.zeta(x_values, 1.5), rtol, atol, "zeta(tensor, scalar)")


def _polynomial_grid(dtype, degrees):
    xs = np.concatenate([np.linspace(-3, 3, 121), np.linspace(-1, 1, 101), np.linspace(-0.02, 1.02, 53),
                         [1.0, -1.0, 0.0, -0.0, 1 - 1e-7, -1 + 1e-7, 1e-7, 1 + 1e-6, 9.0, -9.0, 100.0, 1e10,
                          np.inf, -np.inf, np.nan]])
    x, n = np.meshgrid(xs, np.asarray(degrees, dtype=np.float64))
    return torch.tensor(x, dtype=dtype), torch.tensor(n, dtype=dtype)


# Degrees: negative, fractional (truncated), the thresholds of the trigonometric forms (4, 6, 8),
# Hermite's NaN limits (128 in float32, 512 in float64), and n that no int64 holds.
SPECIAL_DEGREES = [-3, -1, -0.5, 0, 0.7, 1, 1.9, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 33, np.nan, np.inf,
                   -np.inf, 1e20]
HIGH_DEGREES = [50, 100, 127, 128, 129, 300, 512, 513]


def _check_polynomials(events, x, n, tolerance):
    fns = [getattr(torch.special, name) for name in POLYNOMIALS]
    for name, fn, actual in zip(POLYNOMIALS, fns, _run(events, [(fn, (x, n)) for fn in fns])):
        expected = fn(x, n)
        assert actual.dtype == expected.dtype == x.dtype
        if name in UNINITIALISED_AT_NAN:
            skipped = x.isnan() & (n >= 2) & (n < 2.0 ** 63)
            assert bool(actual[skipped].isnan().all()), name
            expected = torch.where(skipped, actual, expected)
        rtol, atol = tolerance(name, x, n)
        _assert_close(actual, expected, rtol, atol, name)


def _envelope(name, x, n):
    """A bound on |P_n| near x inside the interval: 1 for T, Legendre and Laguerre's scale; for U, V, W the
    1/sin(t), 1/cos(t/2), 1/sin(t/2) of their trigonometric forms (t = acos y), capped by the end values."""
    y = (2 * x.double() - 1) if name.startswith("shifted") else x.double()
    inside = 1 - y.clamp(-1, 1) ** 2
    kind = name[-1] if "chebyshev" in name else ""
    bounds = {"u": ((1 / inside.sqrt()), n + 1), "v": ((2 / (1 + y.clamp(-1, 1))).sqrt(), 2 * n + 1),
              "w": ((2 / (1 - y.clamp(-1, 1))).sqrt(), 2 * n + 1)}
    if kind not in bounds:
        return torch.ones_like(y)
    envelope, cap = bounds[kind]
    return torch.minimum(envelope, cap.double())


def _float32_tolerance(name, x, n):
    """The coverage tolerance up to degree 33 (and for Hermite, which matches at every degree); above,
    8 n eps times the polynomial's envelope (see the module docstring)."""
    high = (n > 33) & n.isfinite() & (n < 2.0 ** 63) & (not name.startswith("hermite"))
    bound = torch.where(high, 8 * n.double() * EPS32 * _envelope(name, x, n.double()), 0.0)
    return torch.clamp(bound, min=1e-4), torch.clamp(bound, min=1e-5)


@pytest.mark.parametrize("dtype", DTYPES_F64_SLOW)
def test_polynomials_match_cpu(events, dtype):
    x, n = _polynomial_grid(dtype, SPECIAL_DEGREES + HIGH_DEGREES)
    float64_tolerance = lambda name, x, n: (1e-10, 1e-10)  # noqa: E731
    _check_polynomials(events, x, n, _float32_tolerance if dtype == torch.float32 else float64_tolerance)


def test_polynomial_scalar_and_integer_overloads(events):
    x = torch.linspace(-1.5, 1.5, 31)
    n = torch.arange(-2, 12)
    calls = [
        (lambda n: torch.special.chebyshev_polynomial_u(0.3, n), (n,)),      # x_scalar
        (lambda x: torch.special.legendre_polynomial_p(x, 7), (x,)),         # n_scalar
        (lambda x: torch.special.hermite_polynomial_h(x, 5.7), (x,)),        # fractional scalar degree
        (torch.special.laguerre_polynomial_l, (torch.arange(-3, 11), n)),    # integers -> float32
    ]
    for (fn, args), actual in zip(calls, _run(events, calls)):
        expected = fn(*args)
        assert actual.dtype == expected.dtype == torch.float32
        _assert_close(actual, expected, 1e-4, 1e-5, "overload")


def test_half_precision_raises_as_on_cpu():
    """PyTorch has float32/float64 kernels only; its meta kernels accept bfloat16, so the device must
    not compute there: the op runs on the CPU and raises PyTorch's own error."""
    x = torch.ones(3, dtype=torch.bfloat16)
    for fn in (torch.special.bessel_j0, lambda t: torch.special.hermite_polynomial_h(t, 2),
               lambda t: torch.special.zeta(t, 2.0)):
        with pytest.raises(NotImplementedError) as on_cpu:
            fn(x)
        with pytest.raises(NotImplementedError) as on_device:
            fn(x.to(xladev.device())).cpu()
        assert str(on_device.value) == str(on_cpu.value)
