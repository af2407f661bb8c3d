"""Interpolation (nearest, nearest-exact, linear/bilinear/trilinear) and reflect/replicate padding.

Source indices and weights depend only on static sizes, so they are computed with numpy at trace
time in the same precision as eager's CPU kernels (float32 for float32 inputs) and become constants;
the graph only gathers and blends. Backward passes are the vjp of the same functions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


def _scale(in_size, out_size, align_corners, scale, dtype):
    """`area_pixel_compute_scale` of ATen's UpSample.h."""
    if align_corners:
        return dtype((in_size - 1) / (out_size - 1)) if out_size > 1 else dtype(0)
    if scale is not None and scale > 0:
        return dtype(1.0 / scale)
    return dtype(in_size) / dtype(out_size)


def _nearest_index(in_size, out_size, scale, exact):
    dst = np.arange(out_size, dtype=np.float32)
    if not exact:
        if out_size == in_size:
            return np.arange(out_size)
        if out_size == 2 * in_size:
            return np.arange(out_size) >> 1
    s = _scale(in_size, out_size, False, scale, np.float32)
    src = np.floor((dst + np.float32(0.5)) * s) if exact else np.floor(dst * s)
    return np.minimum(src.astype(np.int64), in_size - 1)


def _linear_weights(in_size, out_size, align_corners, scale, dtype):
    s = _scale(in_size, out_size, align_corners, scale, dtype)
    dst = np.arange(out_size, dtype=dtype)
    src = s * dst if align_corners else np.maximum(s * (dst + dtype(0.5)) - dtype(0.5), dtype(0))
    i0 = np.minimum(src.astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    w1 = (src - i0).astype(dtype)
    return i0, i1, (dtype(1) - w1).astype(dtype), w1


def _weights_dtype(x):
    return np.float64 if x.dtype == jnp.float64 else np.float32


def _spatial_scales(scales, spatial):
    scales = list(scales) if scales is not None else []
    return (scales + [None] * spatial)[:spatial]


def _nearest(x, output_size, scales, exact):
    spatial = len(output_size)
    for i, (out, scale) in enumerate(zip(output_size, _spatial_scales(scales, spatial))):
        axis = x.ndim - spatial + i
        x = jnp.take(x, _nearest_index(x.shape[axis], out, scale, exact), axis=axis)
    return x


def _linear(x, output_size, align_corners, scales):
    spatial = len(output_size)
    dtype = _weights_dtype(x)
    for i, (out, scale) in enumerate(zip(output_size, _spatial_scales(scales, spatial))):
        axis = x.ndim - spatial + i
        i0, i1, w0, w1 = _linear_weights(x.shape[axis], out, align_corners, scale, dtype)
        shape = [1] * x.ndim
        shape[axis] = out
        w0 = jnp.asarray(w0.reshape(shape), x.dtype)
        w1 = jnp.asarray(w1.reshape(shape), x.dtype)
        x = jnp.take(x, i0, axis=axis) * w0 + jnp.take(x, i1, axis=axis) * w1
    return x


def _nearest_forward(exact):
    def lower(ctx, x, output_size, *scales):
        return _nearest(x, tuple(output_size), scales, exact)

    return lower


def _nearest_backward(exact):
    def lower(ctx, grad, output_size, input_size, *scales):
        zeros = jnp.zeros(tuple(input_size), grad.dtype)
        _, vjp = jax.vjp(lambda v: _nearest(v, tuple(output_size), scales, exact), zeros)
        return vjp(grad)[0]

    return lower


for _dims in (1, 2, 3):
    lowers(getattr(aten, f"upsample_nearest{_dims}d").default)(_nearest_forward(False))
    lowers(getattr(aten, f"_upsample_nearest_exact{_dims}d").default)(_nearest_forward(True))
    lowers(getattr(aten, f"upsample_nearest{_dims}d_backward").default)(_nearest_backward(False))
    lowers(getattr(aten, f"_upsample_nearest_exact{_dims}d_backward").default)(_nearest_backward(True))


@lowers(aten.upsample_linear1d.default, aten.upsample_bilinear2d.default, aten.upsample_trilinear3d.default)
def _upsample_linear(ctx, x, output_size, align_corners, *scales):
    return _linear(x, tuple(output_size), align_corners, scales)


@lowers(aten.upsample_linear1d_backward.default, aten.upsample_bilinear2d_backward.default,
        aten.upsample_trilinear3d_backward.default)
def _upsample_linear_backward(ctx, grad, output_size, input_size, align_corners, *scales):
    zeros = jnp.zeros(tuple(input_size), grad.dtype)
    _, vjp = jax.vjp(lambda v: _linear(v, tuple(output_size), align_corners, scales), zeros)
    return vjp(grad)[0]


# ---- reflect / replicate padding ------------------------------------------------------------------
def _pad(x, padding, mode):
    """`padding` as in F.pad: (left, right) pairs from the last dimension backwards; negative widths crop.

    Output position j of a padded axis reads input position j - left, clamped (replicate) or
    mirrored without repeating the edge (reflect), as ATen's padding kernels do.
    """
    for i in range(len(padding) // 2):
        axis = x.ndim - 1 - i
        n = x.shape[axis]
        before, after = padding[2 * i], padding[2 * i + 1]
        source = np.arange(n + before + after) - before
        if mode == "reflect":
            source = np.abs(source)
            source = np.where(source >= n, 2 * (n - 1) - source, source)
        x = jnp.take(x, np.clip(source, 0, n - 1), axis=axis)
    return x


def _pad_forward(mode):
    def lower(ctx, x, padding):
        return _pad(x, tuple(padding), mode)

    return lower


def _pad_backward(mode):
    def lower(ctx, grad, x, padding):
        _, vjp = jax.vjp(lambda v: _pad(v, tuple(padding), mode), x)
        return vjp(grad.astype(x.dtype))[0]

    return lower


for _dims in (1, 2, 3):
    lowers(getattr(aten, f"reflection_pad{_dims}d").default)(_pad_forward("reflect"))
    lowers(getattr(aten, f"replication_pad{_dims}d").default)(_pad_forward("replicate"))
    lowers(getattr(aten, f"reflection_pad{_dims}d_backward").default)(_pad_backward("reflect"))
    lowers(getattr(aten, f"replication_pad{_dims}d_backward").default)(_pad_backward("replicate"))
