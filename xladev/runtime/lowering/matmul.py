"""Matrix products and convolutions (forward, and backward through jax's own vjp)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.graph import backend
from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES, MetaUnsupported

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


def _grouped_mm_shape(a, b, offs=None, bias=None, out_dtype=None):
    """The output of `_grouped_mm`, checked as the CPU kernel checks (torch's meta kernel follows CUDA's, which
    takes bfloat16 only)."""
    if a.dtype not in _GROUPED_MM_DTYPES or b.dtype != a.dtype:
        raise RuntimeError(f"grouped_mm: expected mat_a and mat_b of one dtype among float32, bfloat16 and float16, "
                           f"got {a.dtype} and {b.dtype}")
    if a.dim() not in (2, 3) or b.dim() not in (2, 3):
        raise RuntimeError(f"grouped_mm: multiplicands must be 2-D or 3-D, got {a.dim()}-D and {b.dim()}-D")
    if bias is not None:
        raise RuntimeError("grouped_mm: bias is not supported")
    if (a.dim() == 2 or b.dim() == 2) != (offs is not None):
        raise RuntimeError("grouped_mm: offs is required when a multiplicand is 2-D, and only then")
    if offs is not None and (offs.dim() != 1 or offs.dtype != torch.int32):
        raise RuntimeError(f"grouped_mm: offs must be a 1-D int32 tensor, got {offs.dim()}-D {offs.dtype}")
    if a.dim() == 3 or b.dim() == 3:
        if a.shape[-1] != b.shape[-2]:
            raise RuntimeError("grouped_mm: contraction dimension of mat_a and mat_b must match")
        groups = a.shape[0] if a.dim() == 3 else b.shape[0]
        if (offs.shape[0] if offs is not None else b.shape[0]) != groups:
            raise RuntimeError("grouped_mm: matrix batch sizes have to match")
    elif a.shape[1] != b.shape[0]:
        raise RuntimeError("grouped_mm: contraction dimension of mat_a and mat_b must match")
    if a.dim() == 2:
        shape = (offs.shape[0], a.shape[0], b.shape[1]) if b.dim() == 2 else (a.shape[0], b.shape[-1])
    else:
        shape = (a.shape[1], b.shape[1]) if b.dim() == 2 else (a.shape[0], a.shape[1], b.shape[-1])
    return a.new_empty(shape, dtype=out_dtype or a.dtype)


_GROUPED_MM_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SHAPE_RULES[aten._grouped_mm.default] = _grouped_mm_shape


@lowers(aten._grouped_mm.default)
def _grouped_mm(ctx, a, b, offs=None, bias=None, out_dtype=None):
    """torch's grouped matrix product (`F.grouped_mm`: mixture-of-experts layers) through jax's ragged dot.

    `offs` holds each group's end along the dimension it splits: a's rows for (2-D, 3-D), the contracted
    dimension for (2-D, 2-D) (one (M, N) product per group, as the backward asks for weight gradients), b's
    columns for (3-D, 2-D). Rows and columns past the last end come out zero, where torch leaves them
    unwritten. (3-D, 3-D) is a batched product.
    """
    dtype = ctx.out_dtype
    a, b = a.astype(dtype), b.astype(dtype)
    if offs is None:
        return jnp.matmul(a, b, precision=lax.Precision.HIGHEST)
    sizes = jnp.diff(offs.astype(jnp.int32), prepend=jnp.zeros((1,), jnp.int32))
    if a.ndim == 2 and b.ndim == 3:
        return lax.ragged_dot(a, b, sizes, precision=lax.Precision.HIGHEST)
    if a.ndim == 2 and b.ndim == 2:
        numbers = lax.RaggedDotDimensionNumbers(dot_dimension_numbers=(([1], [0]), ([], [])),
                                                lhs_ragged_dimensions=[1], rhs_group_dimensions=[])
        return lax.ragged_dot_general(a, b, sizes, numbers, precision=lax.Precision.HIGHEST)
    # (3-D, 2-D): group g makes columns [offs[g-1], offs[g]) from a[g]; as rows of the transposed product.
    return lax.ragged_dot(b.T, jnp.swapaxes(a, 1, 2), sizes, precision=lax.Precision.HIGHEST).T


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
