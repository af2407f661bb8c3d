"""Matrix products and convolutions (forward, and backward through jax's own vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime import backend
from xladev.runtime.lowering.registry import lowers
from xladev.runtime.meta import SHAPE_RULES, MetaUnsupported

aten = torch.ops.aten


def _matmul(a, b, out_dtype):
    a, b = a.astype(out_dtype), b.astype(out_dtype)
    precision = lax.Precision.HIGHEST
    return jnp.matmul(a, b, precision=precision)


@lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(ctx, a, b):
    return _matmul(a, b, ctx.out_dtype)


@lowers(aten.dot.default)
def _dot(ctx, a, b):
    return jnp.dot(a.astype(ctx.out_dtype), b.astype(ctx.out_dtype), precision=lax.Precision.HIGHEST)


@lowers(aten.vdot.default)
def _vdot(ctx, a, b):
    # vdot conjugates its first argument (a no-op for real inputs).
    return jnp.vdot(a.astype(ctx.out_dtype), b.astype(ctx.out_dtype), precision=lax.Precision.HIGHEST)


@lowers(aten.mv.default)
def _mv(ctx, a, v):
    return _matmul(a, v, ctx.out_dtype)


@lowers(aten.addmm.default, aten.baddbmm.default, aten.addbmm.default)
def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    product = _matmul(a, b, ctx.out_dtype)
    if ctx.node.op.aten is aten.addbmm.default:
        product = product.sum(axis=0)
    return _combine(bias.astype(ctx.out_dtype), product, beta, alpha)


@lowers(aten.addmv.default)
def _addmv(ctx, bias, a, v, beta=1, alpha=1):
    return _combine(bias.astype(ctx.out_dtype), _matmul(a, v, ctx.out_dtype), beta, alpha)


def _combine(bias, product, beta, alpha):
    if not (isinstance(alpha, (int, float)) and alpha == 1):
        product = product * alpha
    if isinstance(beta, (int, float)) and beta == 0:
        return product
    if not (isinstance(beta, (int, float)) and beta == 1):
        bias = bias * beta
    return bias + product


@lowers(aten.outer.default)
def _outer(ctx, a, b):
    return jnp.outer(a, b).astype(ctx.out_dtype)


def _conv(x, w, stride, padding, dilation, transposed, output_padding, groups):
    spatial = x.ndim - 2
    stride, padding, dilation = (tuple(v) * (spatial if len(v) == 1 else 1) for v in (stride, padding, dilation))
    dims = ("NCH", "OIH", "NCH") if spatial == 1 else (("NCHW", "OIHW", "NCHW") if spatial == 2 else ("NCDHW", "OIDHW", "NCDHW"))
    if not transposed:
        return lax.conv_general_dilated(
            x, w, window_strides=stride, padding=[(p, p) for p in padding], rhs_dilation=dilation,
            dimension_numbers=dims, feature_group_count=groups, precision=lax.Precision.HIGHEST)
    # A transposed convolution is the gradient of a convolution with respect to its input.
    output_padding = tuple(output_padding) * (spatial if len(output_padding) == 1 else 1)
    in_per_group = w.shape[0] // groups
    w_g = w.reshape((groups, in_per_group) + w.shape[1:])
    w_g = jnp.swapaxes(w_g, 1, 2).reshape((groups * w.shape[1], in_per_group) + w.shape[2:])
    w_flipped = jnp.flip(w_g, axis=tuple(range(2, w.ndim)))
    pads = [
        (dilation[i] * (w.shape[2 + i] - 1) - padding[i], dilation[i] * (w.shape[2 + i] - 1) - padding[i] + output_padding[i])
        for i in range(spatial)
    ]
    return lax.conv_general_dilated(
        x, w_flipped, window_strides=(1,) * spatial, padding=pads, lhs_dilation=stride, rhs_dilation=dilation,
        dimension_numbers=dims, feature_group_count=groups, precision=lax.Precision.HIGHEST)


def _convolution_shape(x, w, *rest):
    """The meta kernel of convolution, except that integer convolutions do not lower on a GPU.

    XLA's GPU backend convolves through cuDNN, which has no integer kernels (compiling one fails); the
    CPU backend has them. On a GPU the op runs on the CPU fallback instead (eager CUDA PyTorch refuses
    integer convolutions outright).
    """
    if not (x.dtype.is_floating_point or x.dtype.is_complex) and backend.jax_devices()[0].platform != "cpu":
        raise MetaUnsupported("integer convolution: XLA's GPU backend has no integer convolution")
    return aten.convolution.default(x, w, *rest)


SHAPE_RULES[aten.convolution.default] = _convolution_shape


@lowers(aten.convolution.default)
def _convolution(ctx, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    dtype = ctx.out_dtype
    out = _conv(x.astype(dtype), w.astype(dtype), stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        out = out + bias.astype(dtype).reshape((1, -1) + (1,) * (out.ndim - 2))
    return out


@lowers(aten.convolution_backward.default)
def _convolution_backward(ctx, grad, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    def forward(x_, w_):
        return _conv(x_, w_, stride, padding, dilation, transposed, output_padding, groups)

    _, vjp = jax.vjp(forward, x, w)
    gx, gw = vjp(grad.astype(x.dtype))
    gb = jnp.sum(grad, axis=(0,) + tuple(range(2, grad.ndim))) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] else None, gb)
