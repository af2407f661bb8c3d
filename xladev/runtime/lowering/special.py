"""More elementwise math: NaN-aware min/max, sign and distance helpers, special functions, shrinkage.

Each follows PyTorch's definition where it differs from numpy's (digamma at 0, angle of a real
number, integer powers with negative exponents are in elementwise.py).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jsp

import torch

from xladev.runtime.lowering.registry import lowers, lowers_promoted, promote

aten = torch.ops.aten


# ---- binary ----------------------------------------------------------------------------------------
lowers_promoted(jnp.fmax, aten.fmax.default)  # NaN loses unless both are NaN
lowers_promoted(jnp.fmin, aten.fmin.default)
lowers_promoted(jnp.copysign, aten.copysign.Tensor, aten.copysign.Scalar)
lowers_promoted(jnp.hypot, aten.hypot.default)
lowers_promoted(jnp.nextafter, aten.nextafter.default)


@lowers(aten.xlogy.Tensor, aten.xlogy.Scalar_Other, aten.xlogy.Scalar_Self)
def _xlogy(ctx, x, y):
    x, y = promote(ctx, x, y)
    # PyTorch: 0 where x == 0 (unless y is NaN), NaN where y is NaN.
    out = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log(y))
    return jnp.where(jnp.isnan(y), jnp.nan, out)


@lowers(aten.special_xlog1py.default, aten.special_xlog1py.self_scalar, aten.special_xlog1py.other_scalar)
def _xlog1py(ctx, x, y):
    x, y = promote(ctx, x, y)
    out = jnp.where(x == 0, jnp.zeros_like(x), x * jnp.log1p(y))
    return jnp.where(jnp.isnan(y), jnp.nan, out)


@lowers(aten.heaviside.default)
def _heaviside(ctx, x, values):
    x, values = promote(ctx, x, values)
    return jnp.where(x == 0, values, (x > 0).astype(x.dtype))


lowers_promoted(jnp.logaddexp, aten.logaddexp.default)
lowers_promoted(jnp.logaddexp2, aten.logaddexp2.default)


# ---- unary -----------------------------------------------------------------------------------------
@lowers(aten.angle.default)
def _angle(ctx, x):
    if jnp.iscomplexobj(x):
        return jnp.angle(x)
    (x,) = promote(ctx, x)
    # For real numbers: pi for negatives, 0 otherwise, NaN stays NaN.
    out = jnp.where(x < 0, jnp.asarray(math.pi, x.dtype), jnp.zeros_like(x))
    return jnp.where(jnp.isnan(x), x, out)


@lowers(aten.polygamma.default)
def _polygamma(ctx, n, x):
    (x,) = promote(ctx, x)
    if n == 0:
        return _digamma_value(x)
    # In float64: the reflection subtracts large, nearly equal terms for negative x.
    return _polygamma_value(n, x.astype(jnp.float64)).astype(x.dtype)


def _cot_derivative_coefficients(n: int) -> list[float]:
    """Coefficients of P with d^n/dx^n cot(pi x) = P(cot(pi x)), from d/dx c = -pi (1 + c^2)."""
    coefficients = [0.0, 1.0]
    for _ in range(n):
        derivative = [i * c for i, c in enumerate(coefficients)][1:] or [0.0]
        # multiply by -pi (1 + c^2)
        out = [0.0] * (len(derivative) + 2)
        for i, c in enumerate(derivative):
            out[i] += -math.pi * c
            out[i + 2] += -math.pi * c
        coefficients = out
    return coefficients


def _polygamma_value(n: int, x):
    """psi^(n)(x) for n >= 1; negative x through the reflection formula (jax's series needs x > 0).

    psi_n(1 - x) + (-1)^(n+1) psi_n(x) = (-1)^n pi d^n/dx^n cot(pi x)
    """
    direct = jsp.polygamma(n, jnp.where(x > 0, x, jnp.ones_like(x)))
    reflected_arg = jnp.where(x > 0, jnp.ones_like(x), 1 - x)
    cot = 1 / jnp.tan(math.pi * x)
    series = jnp.zeros_like(x)
    for c in reversed(_cot_derivative_coefficients(n)):
        series = series * cot + c
    sign = -1.0 if n % 2 else 1.0  # (-1)^n
    reflected = -sign * (sign * math.pi * series - jsp.polygamma(n, reflected_arg))
    pole = (x <= 0) & (x == jnp.floor(x)) & jnp.isfinite(x)
    out = jnp.where(x > 0, direct, reflected)
    out = jnp.where(pole, jnp.asarray(jnp.inf if n % 2 else -jnp.inf, x.dtype), out)
    # psi_n tends to 0 at +inf and has no limit at -inf.
    return jnp.where(x == jnp.inf, jnp.zeros_like(x), jnp.where(x == -jnp.inf, jnp.nan, out))


def _digamma_value(x):
    # PyTorch: digamma(+-0) is -+inf (numpy/jax say NaN); negative integers stay NaN.
    return jnp.where(x == 0, jnp.copysign(jnp.asarray(jnp.inf, x.dtype), -x), jsp.digamma(x))


@lowers(aten.digamma.default)
def _digamma(ctx, x):
    (x,) = promote(ctx, x)
    return _digamma_value(x)


_SPECIAL = {
    "special_i0e": jsp.i0e, "special_i1": jsp.i1, "special_i1e": jsp.i1e, "special_ndtri": jsp.ndtri,
    "special_log_ndtr": jsp.log_ndtr, "special_ndtr": jsp.ndtr, "special_erfcx": jsp.erfcx,
    "special_entr": jsp.entr,
}
for _name, _fn in _SPECIAL.items():
    def _special(ctx, x, _fn=_fn):
        (x,) = promote(ctx, x)
        return _fn(x)

    lowers(getattr(aten, _name).default)(_special)


@lowers(aten.igamma.default)
def _igamma(ctx, a, x):
    a, x = promote(ctx, a, x)
    # An infinite shape puts all the mass at infinity: P(inf, x) = 0 for finite x (jax says NaN).
    return jnp.where((a == jnp.inf) & jnp.isfinite(x), jnp.zeros_like(a), jsp.gammainc(a, x))


@lowers(aten.igammac.default)
def _igammac(ctx, a, x):
    a, x = promote(ctx, a, x)
    return jnp.where((a == jnp.inf) & jnp.isfinite(x), jnp.ones_like(a), jsp.gammaincc(a, x))


# ---- shrinkage and their gradients --------------------------------------------------------------------
# Written as "inside [-lambd, lambd]" tests, as ATen does, so NaN (never inside) passes through.
def _inside(x, lambd):
    return (x >= -lambd) & (x <= lambd)


@lowers(aten.hardshrink.default)
def _hardshrink(ctx, x, lambd=0.5):
    return jnp.where(_inside(x, lambd), jnp.zeros_like(x), x)


@lowers(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def _shrink_backward(ctx, grad, x, lambd):
    return jnp.where(_inside(x, lambd), jnp.zeros_like(grad), grad)


@lowers(aten.softshrink.default)
def _softshrink(ctx, x, lambd=0.5):
    return jnp.where(_inside(x, lambd), jnp.zeros_like(x), x - jnp.sign(x) * lambd)


# ---- integer bit and number theory ops ----------------------------------------------------------------
def _bits(dtype) -> int:
    return jnp.iinfo(dtype).bits


@lowers(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar, aten.bitwise_left_shift.Scalar_Tensor)
def _left_shift(ctx, x, y):
    x, y = promote(ctx, x, y)
    # Shifting by the width or more (or by a negative amount) gives 0, as eager does.
    in_range = (y >= 0) & (y < _bits(x.dtype))
    return jnp.where(in_range, jnp.left_shift(x, jnp.where(in_range, y, 0)), jnp.zeros_like(x))


@lowers(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
        aten.bitwise_right_shift.Scalar_Tensor)
def _right_shift(ctx, x, y):
    x, y = promote(ctx, x, y)
    # Arithmetic shift; by the width or more (or a negative amount): the sign fill (0 or -1).
    in_range = (y >= 0) & (y < _bits(x.dtype))
    fill = jnp.where(x < 0, -jnp.ones_like(x), jnp.zeros_like(x)) if jnp.issubdtype(x.dtype, jnp.signedinteger) \
        else jnp.zeros_like(x)
    return jnp.where(in_range, jnp.right_shift(x, jnp.where(in_range, y, 0)), fill)


lowers_promoted(jnp.gcd, aten.gcd.default)
lowers_promoted(jnp.lcm, aten.lcm.default)


@lowers(aten.frexp.Tensor)
def _frexp(ctx, x):
    mantissa, exponent = jnp.frexp(x.astype(ctx.dtype_of(0)))
    return mantissa, exponent.astype(ctx.dtype_of(1))
