"""Elementwise ops: arithmetic, comparisons, unary math, activations and their backward formulas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers, lowers_promoted, promote

aten = torch.ops.aten


def _scaled(y, alpha):
    if isinstance(alpha, (int, float)) and alpha == 1:
        return y
    return y * alpha


def _common(*values):
    dtype = jnp.result_type(*values)
    return tuple(jnp.asarray(v).astype(dtype) for v in values)


# ---- arithmetic ------------------------------------------------------------------------------
@lowers(aten.add.Tensor, aten.add.Scalar)
def _add(ctx, x, y, alpha=1):
    x, y = promote(ctx, x, y)
    if ctx.out_dtype == jnp.bool_:
        return jnp.logical_or(x, y)
    return x + _scaled(y, alpha)


@lowers(aten.sub.Tensor, aten.sub.Scalar)
def _sub(ctx, x, y, alpha=1):
    x, y = promote(ctx, x, y)
    return x - _scaled(y, alpha)


@lowers(aten.rsub.Tensor, aten.rsub.Scalar)
def _rsub(ctx, x, y, alpha=1):
    x, y = promote(ctx, x, y)
    return y - _scaled(x, alpha)


@lowers(aten.mul.Tensor, aten.mul.Scalar)
def _mul(ctx, x, y):
    x, y = promote(ctx, x, y)
    if ctx.out_dtype == jnp.bool_:
        return jnp.logical_and(x, y)
    return x * y


@lowers(aten.div.Tensor, aten.div.Scalar)
def _div(ctx, x, y):
    x, y = promote(ctx, x, y)
    return x / y


@lowers(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, x, y, rounding_mode=None):
    x, y = promote(ctx, x, y)
    if rounding_mode is None:
        return x / y
    if jnp.issubdtype(ctx.out_dtype, jnp.integer):
        if rounding_mode == "floor":
            return jnp.floor_divide(x, y)
        return lax.div(x, y)
    q = x / y
    return jnp.floor(q) if rounding_mode == "floor" else jnp.trunc(q)


lowers_promoted(jnp.floor_divide, aten.floor_divide.default, aten.floor_divide.Scalar)
lowers_promoted(jnp.remainder, aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
lowers_promoted(jnp.fmod, aten.fmod.Tensor, aten.fmod.Scalar)


@lowers(aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar)
def _pow(ctx, x, y):
    x, y = promote(ctx, x, y)
    if ctx.out_dtype == jnp.bool_:
        return jnp.logical_or(x, jnp.logical_not(y))
    if not jnp.issubdtype(ctx.out_dtype, jnp.integer):
        return jnp.power(x, y)
    # Integer powers: a negative exponent gives 0 except for bases 1 and -1 (as in eager PyTorch).
    positive = jnp.power(x, jnp.maximum(y, 0))
    one = jnp.ones_like(x)
    odd = (y % 2) != 0
    negative = jnp.where(x == 1, one, jnp.where(x == -1, jnp.where(odd, -one, one), jnp.zeros_like(x)))
    return jnp.where(y < 0, negative, positive)


lowers_promoted(jnp.maximum, aten.maximum.default)
lowers_promoted(jnp.minimum, aten.minimum.default)
lowers_promoted(jnp.arctan2, aten.atan2.default)


@lowers(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(ctx, start, end, weight):
    start, end, weight = promote(ctx, start, end, weight)
    return start + weight * (end - start)


@lowers(aten.addcmul.default)
def _addcmul(ctx, x, t1, t2, value=1):
    x, t1, t2 = promote(ctx, x, t1, t2)
    return x + value * t1 * t2


@lowers(aten.addcdiv.default)
def _addcdiv(ctx, x, t1, t2, value=1):
    x, t1, t2 = promote(ctx, x, t1, t2)
    return x + value * (t1 / t2)


# ---- comparisons and logic -------------------------------------------------------------------
def _comparison(fn):
    def lower(ctx, x, y):
        x, y = _common(x, y)
        return fn(x, y)

    return lower


for _name, _fn in [("eq", jnp.equal), ("ne", jnp.not_equal), ("lt", jnp.less), ("le", jnp.less_equal),
                   ("gt", jnp.greater), ("ge", jnp.greater_equal)]:
    _packet = getattr(aten, _name)
    lowers(_packet.Tensor, _packet.Scalar)(_comparison(_fn))

for _name, _fn in [("logical_and", jnp.logical_and), ("logical_or", jnp.logical_or),
                   ("logical_xor", jnp.logical_xor)]:
    lowers(getattr(aten, _name).default)(_comparison(_fn))

for _name, _fn in [("bitwise_and", jnp.bitwise_and), ("bitwise_or", jnp.bitwise_or),
                   ("bitwise_xor", jnp.bitwise_xor)]:
    _packet = getattr(aten, _name)

    def _bitwise(ctx, x, y, _fn=_fn):
        x, y = promote(ctx, x, y)
        return _fn(x, y)

    lowers(_packet.Tensor, _packet.Scalar)(_bitwise)


@lowers(aten.logical_not.default)
def _logical_not(ctx, x):
    return jnp.logical_not(x)


@lowers(aten.bitwise_not.default)
def _bitwise_not(ctx, x):
    return jnp.logical_not(x) if x.dtype == jnp.bool_ else jnp.bitwise_not(x)


@lowers(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, cond, x, y):
    x, y = promote(ctx, x, y)
    return jnp.where(cond, x, y)


@lowers(aten.isnan.default)
def _isnan(ctx, x):
    return jnp.isnan(x)


@lowers(aten.isinf.default)
def _isinf(ctx, x):
    return jnp.isinf(x)


@lowers(aten.isfinite.default)
def _isfinite(ctx, x):
    return jnp.isfinite(x) if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.ones(x.shape, bool)


# ---- unary math --------------------------------------------------------------------------------
_UNARY_FLOAT = {
    "exp": jnp.exp, "exp2": jnp.exp2, "expm1": jnp.expm1, "log": jnp.log, "log2": jnp.log2, "log10": jnp.log10,
    "log1p": jnp.log1p, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan,
    "asin": jnp.arcsin, "acos": jnp.arccos, "atan": jnp.arctan, "sinh": jnp.sinh, "cosh": jnp.cosh,
    "tanh": jnp.tanh, "asinh": jnp.arcsinh, "acosh": jnp.arccosh, "atanh": jnp.arctanh,
    "sigmoid": jax.nn.sigmoid, "erf": jax.scipy.special.erf, "erfc": jax.scipy.special.erfc,
    "erfinv": jax.scipy.special.erfinv, "reciprocal": jnp.reciprocal, "lgamma": jax.scipy.special.gammaln,
    "sinc": jnp.sinc, "i0": jnp.i0,
}
for _name, _fn in _UNARY_FLOAT.items():
    lowers_promoted(_fn, getattr(aten, _name).default)


def _real_sign(x):
    """Eager's sign: (0 < x) - (x < 0), so NaN (and -0.0) give 0, where jnp.sign gives NaN (and -0.0)."""
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


_UNARY_SAME = {
    "neg": jnp.negative, "abs": jnp.abs, "sign": _real_sign, "square": jnp.square,
    "floor": jnp.floor, "ceil": jnp.ceil, "trunc": jnp.trunc, "frac": lambda x: x - jnp.trunc(x),
    "relu": jax.nn.relu, "positive": lambda x: x,
}
for _name, _fn in _UNARY_SAME.items():
    def _unary_same(ctx, x, _fn=_fn):
        if x.dtype == jnp.bool_ or (jnp.issubdtype(x.dtype, jnp.integer) and _fn in (jnp.floor, jnp.ceil, jnp.trunc)):
            return x
        return _fn(x)

    lowers(getattr(aten, _name).default)(_unary_same)


@lowers(aten.round.default)
def _round(ctx, x):
    return jnp.round(x)


@lowers(aten.round.decimals)
def _round_decimals(ctx, x, decimals=0):
    return jnp.round(x, decimals)


@lowers(aten.sgn.default)
def _sgn(ctx, x):
    if x.dtype == jnp.bool_:
        return x
    if jnp.iscomplexobj(x):
        # Eager divides by |z| as a complex number: for inf+0j both parts come out nan, where jnp.sign's division
        # by a real |z| leaves the imaginary part 0.
        return jnp.where(x == 0, jnp.zeros_like(x), x / jnp.abs(x).astype(x.dtype))
    return _real_sign(x)


@lowers(aten.signbit.default)
def _signbit(ctx, x):
    return jnp.signbit(x)


@lowers(aten.clamp.default, aten.clamp.Tensor)
def _clamp(ctx, x, min=None, max=None):
    (x,) = promote(ctx, x)
    if min is not None:
        x = jnp.maximum(x, jnp.asarray(min).astype(x.dtype))
    if max is not None:
        x = jnp.minimum(x, jnp.asarray(max).astype(x.dtype))
    return x


@lowers(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(ctx, x, min):
    (x, min) = promote(ctx, x, min)
    return jnp.maximum(x, min)


@lowers(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(ctx, x, max):
    (x, max) = promote(ctx, x, max)
    return jnp.minimum(x, max)


# ---- activations ---------------------------------------------------------------------------------
@lowers(aten.gelu.default)
def _gelu(ctx, x, approximate="none"):
    return jax.nn.gelu(x, approximate=approximate == "tanh")


@lowers(aten.gelu_backward.default)
def _gelu_backward(ctx, grad, x, approximate="none"):
    _, vjp = jax.vjp(lambda v: jax.nn.gelu(v, approximate=approximate == "tanh"), x)
    return vjp(grad.astype(x.dtype))[0]


@lowers(aten.silu.default)
def _silu(ctx, x):
    return jax.nn.silu(x)


@lowers(aten.silu_backward.default)
def _silu_backward(ctx, grad, x):
    s = jax.nn.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


@lowers(aten.threshold_backward.default)
def _threshold_backward(ctx, grad, x, threshold):
    return jnp.where(x <= threshold, jnp.zeros_like(grad), grad)


@lowers(aten.threshold.default)
def _threshold(ctx, x, threshold, value):
    return jnp.where(x <= threshold, jnp.asarray(value).astype(x.dtype), x)


@lowers(aten.sigmoid_backward.default)
def _sigmoid_backward(ctx, grad, y):
    return grad * y * (1 - y)


@lowers(aten.tanh_backward.default)
def _tanh_backward(ctx, grad, y):
    return grad * (1 - y * y)


@lowers(aten.leaky_relu.default)
def _leaky_relu(ctx, x, negative_slope=0.01):
    return jnp.where(x > 0, x, x * negative_slope)


@lowers(aten.leaky_relu_backward.default)
def _leaky_relu_backward(ctx, grad, x, negative_slope, self_is_result):
    return jnp.where(x > 0, grad, grad * negative_slope)


@lowers(aten.elu.default)
def _elu(ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    return jnp.where(x > 0, x * scale, alpha * scale * jnp.expm1(x * input_scale))


@lowers(aten.hardtanh.default)
def _hardtanh(ctx, x, min_val=-1.0, max_val=1.0):
    return jnp.clip(x, min_val, max_val)


@lowers(aten.softplus.default)
def _softplus(ctx, x, beta=1.0, threshold=20.0):
    return jnp.where(x * beta > threshold, x, jnp.log1p(jnp.exp(x * beta)) / beta)


@lowers(aten.mish.default)
def _mish(ctx, x):
    return x * jnp.tanh(jax.nn.softplus(x))


@lowers(aten.logit.default)
def _logit(ctx, x, eps=None):
    (x,) = promote(ctx, x)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x))


@lowers(aten.nan_to_num.default)
def _nan_to_num(ctx, x, nan=None, posinf=None, neginf=None):
    return jnp.nan_to_num(x, nan=0.0 if nan is None else nan, posinf=posinf, neginf=neginf)


# ---- conversions and copies -------------------------------------------------------------------------
@lowers(aten._to_copy.default)
def _to_copy(ctx, x, **kwargs):
    return x.astype(ctx.out_dtype)


@lowers(aten.expand_copy.default)
def _expand_copy(ctx, x, size, implicit=False):
    return jnp.broadcast_to(x, ctx.out_shape)


@lowers(aten.copy.default)
def _copy(ctx, dst, src, non_blocking=False):
    # The functional `copy_` (torch.compile graphs): `src` in `dst`'s shape and dtype; `dst`'s values unused.
    return jnp.broadcast_to(src.astype(ctx.out_dtype), ctx.out_shape)


@lowers(aten.fill.Scalar, aten.fill.Tensor)
def _fill(ctx, x, value):
    return jnp.full(ctx.out_shape, value, dtype=ctx.out_dtype)


@lowers(aten.zero.default)
def _zero(ctx, x):
    return jnp.zeros(ctx.out_shape, ctx.out_dtype)


@lowers(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, x, mask, value):
    return jnp.where(mask, jnp.asarray(value).astype(x.dtype), x)
