"""Orthogonal polynomials of torch.special (Chebyshev T/U/V/W and shifted, Hermite H/He, Laguerre, Legendre).

PyTorch defines each elementwise for a degree n that is a tensor (or a scalar) in the promoted floating
dtype, truncated toward zero to an integer:
  * n < 0 gives 0 (so does a NaN, infinite or out-of-int64-range n: the CPU's float-to-int conversion
    gives INT64_MIN there);
  * closed forms at the ends of the interval (|x| == 1, or x in {0, 1} for the shifted kinds);
  * Chebyshev kinds inside the interval and above a small degree: the trigonometric forms
    (T_n = cos(n t), U_n = sin((n+1) t)/sin t, ... with t = acos x), as on the CPU;
  * Hermite: NaN above degree 128 (float32) or 512 (float64);
  * otherwise the three-term recurrence from P_0 = 1 and P_1.
The recurrence runs here as one `lax.while_loop` over all elements up to the largest degree still in
progress; an element stops at its own degree or when it becomes NaN (as the CPU's loop does: NaN then
stays NaN, so stopping only saves steps). Each step rounds as the CPU's does (same operation order in
the promoted dtype), so overflow to inf and NaN happen at the same degree.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import promote
from xladev.runtime.lowering.special_bessel import lowers_float_only

aten = torch.ops.aten

# Above this degree the CPU returns NaN for Hermite polynomials (per computation dtype).
_HERMITE_LIMIT = {jnp.dtype(jnp.float32): 128, jnp.dtype(jnp.float64): 512}


def _degree(n):
    """n (already in the promoted dtype) as the CPU's int64 degree: truncated, -1 where not representable."""
    finite = jnp.isfinite(n) & (jnp.abs(n) < 2.0 ** 63)
    return jnp.where(finite, jnp.trunc(jnp.where(finite, n, 0)), -1).astype(jnp.int64)


def _recurrence(x, n, first, step: Callable, active):
    """P_n(x) from P_0 = 1 and P_1 = `first` with P_{j+1} = step(j, P_{j-1}, P_j), j = 1 .. n-1.

    Args:
      x: the points (promoted floating dtype), broadcast with n.
      n: int64 degrees.
      first: P_1(x).
      step: `fn(j, p_prev, p)` for the int64 scalar j.
      active: where the recurrence's value is used; other elements do not keep the loop running.

    Returns:
      P_n(x) where n >= 2 and `active`; P_1 elsewhere (callers pick their own value there).
    """

    def running(j, q):
        return active & (j < n) & ~jnp.isnan(q)

    def cond(state):
        j, _, q = state
        return jnp.any(running(j, q))

    def body(state):
        j, p, q = state
        go = running(j, q)
        r = step(j, p, q)
        return j + 1, jnp.where(go, q, p), jnp.where(go, r, q)

    start = (jnp.asarray(1, jnp.int64), jnp.ones_like(x), first)
    return lax.while_loop(cond, body, start)[2]


def _odd(n):
    return (n % 2) != 0


def _arccos(y):
    """acos correctly rounded to y's dtype.

    The trigonometric forms multiply t = acos y by the degree, so t's rounding is amplified n times:
    XLA's float32 acos is up to 2 ulp off (for 1 argument in 5), which moves T_100 by ~3e-5 where it
    crosses zero. Computed in float64 and rounded, t is correctly rounded, as the CPU's libm acos
    nearly always is.
    """
    if y.dtype == jnp.float32:
        return jnp.arccos(y.astype(jnp.float64)).astype(jnp.float32)
    return jnp.arccos(y)


@dataclasses.dataclass(frozen=True)
class _Chebyshev:
    """One Chebyshev kind: P_n = 2y P_{n-1} - P_{n-2} from P_0 = 1, y = x or 2x - 1 (shifted).

    first: P_1 from y;
    trig: the trigonometric form inside (-1, 1) used above degree `trig_above`, from (y, n, t = acos y);
    at_plus_one, at_minus_one: the values at y = 1 and y = -1, from (n, y).
    """

    first: Callable
    trig_above: int
    trig: Callable
    at_plus_one: Callable
    at_minus_one: Callable


def _sign(n, value):
    return jnp.where(_odd(n), -value, value)


def _float(n, like):
    """An int64 degree or loop counter in like's dtype (the CPU converts it the same way)."""
    return n.astype(like.dtype)


def _trig_t(y, n, t):
    return jnp.cos(_float(n, y) * t)


def _trig_u(y, n, t):
    s = jnp.sin(t)
    n1 = _float(n + 1, y)
    # sin t is 0 only where y rounds to +-1 inside the branch: the limit (n+1) cos((n+1)t)/y.
    return jnp.where(s != 0, jnp.sin(n1 * t) / s, n1 * jnp.cos(n1 * t) / y)


def _trig_v(y, n, t):
    half = t / 2.0
    value = jnp.cos((_float(n, y) + 0.5) * t) / jnp.cos(half)
    # sin(t/2) rounds to 1 next to y = -1: V_n(-1) = (-1)^n (2n + 1).
    return jnp.where(jnp.sin(half) != 1.0, value, _sign(n, _float(2 * n + 1, y)))


def _trig_w(y, n, t):
    # cos(t/2) rounds to 1 next to y = 1: W_n(1) = 2n + 1 (y > 0 there).
    return _trig_w_with_limit(y, n, t, jnp.where(y > 0, _float(2 * n + 1, y), _sign(n, jnp.ones_like(y))))


def _trig_w_shifted(y, n, t):
    # PyTorch's shifted W gives (-1)^n, not 2n + 1, where cos(t/2) rounds to 1 (next to x = 1).
    return _trig_w_with_limit(y, n, t, _sign(n, jnp.ones_like(y)))


def _trig_w_with_limit(y, n, t, limit):
    half = t / 2.0
    value = jnp.sin((_float(n, y) + 0.5) * t) / jnp.sin(half)
    return jnp.where(jnp.cos(half) != 1.0, value, limit)


# Each kind's P_1, trigonometric form and values at y = +-1 (T: 1, +-1; U: n+1, +-(n+1); V: 1, +-(2n+1);
# W: 2n+1, +-1, with the sign (-1)^n at -1).
_ONE = lambda n, y: jnp.ones_like(y)  # noqa: E731
_T = dict(first=lambda y: y, trig=_trig_t, at_plus_one=_ONE, at_minus_one=lambda n, y: _sign(n, jnp.ones_like(y)))
_U = dict(first=lambda y: y + y, trig=_trig_u, at_plus_one=lambda n, y: _float(n + 1, y),
          at_minus_one=lambda n, y: _sign(n, _float(n + 1, y)))
_V = dict(first=lambda y: y + y - 1.0, trig=_trig_v, at_plus_one=_ONE,
          at_minus_one=lambda n, y: _sign(n, _float(2 * n + 1, y)))
_W = dict(first=lambda y: y + y + 1.0, trig=_trig_w, at_plus_one=lambda n, y: _float(2 * n + 1, y),
          at_minus_one=lambda n, y: _sign(n, jnp.ones_like(y)))

# Degrees above which the trigonometric form replaces the recurrence (PyTorch's thresholds).
_CHEBYSHEV = {
    aten.special_chebyshev_polynomial_t: (False, _Chebyshev(trig_above=6, **_T)),
    aten.special_chebyshev_polynomial_u: (False, _Chebyshev(trig_above=8, **_U)),
    aten.special_chebyshev_polynomial_v: (False, _Chebyshev(trig_above=8, **_V)),
    aten.special_chebyshev_polynomial_w: (False, _Chebyshev(trig_above=8, **_W)),
    aten.special_shifted_chebyshev_polynomial_t: (True, _Chebyshev(trig_above=6, **_T)),
    aten.special_shifted_chebyshev_polynomial_u: (True, _Chebyshev(trig_above=6, **_U)),
    aten.special_shifted_chebyshev_polynomial_v: (True, _Chebyshev(trig_above=6, **_V)),
    aten.special_shifted_chebyshev_polynomial_w: (True, _Chebyshev(trig_above=4, **{**_W, "trig": _trig_w_shifted})),
}


def _chebyshev(kind: _Chebyshev, shifted: bool, x, n):
    """A Chebyshev polynomial of `kind` at x (shifted: at 2x - 1; its ends are tested on x itself)."""
    y = x + x - 1.0 if shifted else x
    two_y = y + y
    if shifted:
        plus_one, minus_one = x == 1.0, x == 0.0
    else:
        plus_one, minus_one = (jnp.abs(x) == 1.0) & (x > 0), (jnp.abs(x) == 1.0) & ~(x > 0)
    inside = (n > kind.trig_above) & (jnp.abs(y) < 1.0)
    first = kind.first(y)
    loop = _recurrence(y, n, first, lambda j, p, q: two_y * q - p, ~(plus_one | minus_one | inside))
    out = jnp.where(n == 0, jnp.ones_like(y), jnp.where(n == 1, first, loop))
    out = jnp.where(inside, kind.trig(y, n, _arccos(y)), out)
    out = jnp.where(minus_one, kind.at_minus_one(n, y), out)
    out = jnp.where(plus_one, kind.at_plus_one(n, y), out)
    return jnp.where(n < 0, jnp.zeros_like(y), out)


def _hermite_h(x, n):
    two_x = x + x
    loop = _recurrence(x, n, two_x, lambda j, p, q: two_x * q - _float(2 * j, x) * p, n > 1)
    out = jnp.where(n > _HERMITE_LIMIT[jnp.dtype(x.dtype)], jnp.nan, loop)
    return _low_degrees(n, two_x, out)


def _hermite_he(x, n):
    loop = _recurrence(x, n, x, lambda j, p, q: x * q - _float(j, x) * p, n > 1)
    out = jnp.where(n > _HERMITE_LIMIT[jnp.dtype(x.dtype)], jnp.nan, loop)
    return _low_degrees(n, x, out)


def _laguerre_l(x, n):
    one_minus_x = 1.0 - x

    def step(j, p, q):
        k = _float(j, x)
        return ((_float(j + j, x) + one_minus_x) * q - k * p) / _float(j + 1, x)

    at_zero = x == 0
    out = _low_degrees(n, one_minus_x, _recurrence(x, n, one_minus_x, step, ~at_zero))
    return jnp.where(n < 0, jnp.zeros_like(x), jnp.where(at_zero, jnp.ones_like(x), out))


def _legendre_p(x, n):
    def step(j, p, q):
        return (_float(j + j + 1, x) * x * q - _float(j, x) * p) / _float(j + 1, x)

    end = jnp.abs(x) == 1.0
    out = _low_degrees(n, x, _recurrence(x, n, x, step, ~end))
    out = jnp.where(end, jnp.where((x > 0) | ~_odd(n), jnp.ones_like(x), -jnp.ones_like(x)), out)
    return jnp.where(n < 0, jnp.zeros_like(x), out)


def _low_degrees(n, first, out):
    """0 for n < 0, 1 for n = 0, `first` for n = 1, `out` above."""
    out = jnp.where(n == 1, first, out)
    out = jnp.where(n == 0, jnp.ones_like(first), out)
    return jnp.where(n < 0, jnp.zeros_like(first), out)


def _register(packet, fn: Callable) -> None:
    def lower(ctx, x, n):
        x, n = promote(ctx, x, n)
        x, n = jnp.broadcast_arrays(x, n)
        return fn(x, _degree(n))

    lowers_float_only(packet.default, packet.x_scalar, packet.n_scalar)(lower)


for _packet, (_shifted, _kind) in _CHEBYSHEV.items():
    _register(_packet, lambda x, n, _kind=_kind, _shifted=_shifted: _chebyshev(_kind, _shifted, x, n))
_register(aten.special_hermite_polynomial_h, _hermite_h)
_register(aten.special_hermite_polynomial_he, _hermite_he)
_register(aten.special_laguerre_polynomial_l, _laguerre_l)
_register(aten.special_legendre_polynomial_p, _legendre_p)
