"""Interpolation (nearest, nearest-exact, linear/bilinear/trilinear) and reflect/replicate padding.

Source indices and weights depend only on static sizes, so they are computed with numpy at trace
time in the same precision as eager's CPU kernels (float32 for float32 inputs) and become constants;
the graph only gathers and blends. Backward passes are the vjp of the same functions.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES, MetaUnsupported

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


# ---- separable filters as dense matrices: anti-aliased and bicubic resizing -------------------------
def _cubic(x, a):
    """The cubic convolution kernel with parameter a (-0.75 for bicubic, -0.5 for the anti-aliased one)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0))


def _antialias_matrix(in_size, out_size, align_corners, scale, dtype, cubic):
    """[out, in] weights of PyTorch's anti-aliased resize: the filter's support grows with the downscale
    factor, each output's taps are the input pixels under it, normalised to sum to one."""
    s = _scale(in_size, out_size, align_corners, scale, dtype)
    interp = 4 if cubic else 2
    support = (interp * 0.5) * s if s >= 1 else interp * 0.5
    invscale = dtype(1 / s) if s >= 1 else dtype(1)
    weights = np.zeros((out_size, in_size), dtype)
    for i in range(out_size):
        center = s * (i + dtype(0.5))
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        x = ((np.arange(lo, hi, dtype=dtype) - center + dtype(0.5)) * invscale).astype(dtype)
        w = _cubic(x, -0.5) if cubic else np.maximum(0, 1 - np.abs(x))
        total = w.sum(dtype=dtype)
        weights[i, lo:hi] = w / total if total != 0 else w
    return weights


def _bicubic_matrix(in_size, out_size, align_corners, scale, dtype, cubic=True):
    """[out, in] weights of `upsample_bicubic2d`: four taps around the source point, clamped to the edge."""
    s = _scale(in_size, out_size, align_corners, scale, dtype)
    dst = np.arange(out_size, dtype=dtype)
    src = (s * dst if align_corners else s * (dst + dtype(0.5)) - dtype(0.5)).astype(dtype)
    base = np.floor(src)
    t = (src - base).astype(dtype)
    weights = np.zeros((out_size, in_size), dtype)
    rows = np.arange(out_size)
    for k in range(4):
        taps = np.clip(base.astype(np.int64) - 1 + k, 0, in_size - 1)
        np.add.at(weights, (rows, taps), _cubic(t + 1 - k, -0.75).astype(dtype))
    return weights


def _separable(x, output_size, align_corners, scales, matrix, cubic):
    """Applies one [out, in] weight matrix per trailing spatial axis."""
    dtype = _weights_dtype(x)
    spatial = len(output_size)
    for i, (out, scale) in enumerate(zip(output_size, _spatial_scales(scales, spatial))):
        axis = x.ndim - spatial + i
        w = jnp.asarray(matrix(x.shape[axis], out, align_corners, scale, dtype, cubic), x.dtype)
        x = jnp.moveaxis(jnp.tensordot(x, w, axes=([axis], [1]), precision="highest"), -1, axis)
    return x


def _resize_lowerings(forward_op, backward_op, matrix, cubic):
    def forward(ctx, x, output_size, align_corners, *scales):
        return _separable(x, tuple(output_size), align_corners, scales, matrix, cubic)

    def backward(ctx, grad, output_size, input_size, align_corners, *scales):
        zeros = jnp.zeros(tuple(input_size), grad.dtype)
        _, vjp = jax.vjp(lambda v: _separable(v, tuple(output_size), align_corners, scales, matrix, cubic), zeros)
        return vjp(grad)[0]

    if forward_op is not None:
        lowers(forward_op)(forward)
    lowers(backward_op)(backward)


_resize_lowerings(aten._upsample_bilinear2d_aa.default, aten._upsample_bilinear2d_aa_backward.default,
                  _antialias_matrix, False)
_resize_lowerings(aten._upsample_bicubic2d_aa.default, aten._upsample_bicubic2d_aa_backward.default,
                  _antialias_matrix, True)
# upsample_bicubic2d itself runs as torch._decomp's decomposition; its backward is the adjoint here.
_resize_lowerings(None, aten.upsample_bicubic2d_backward.default, _bicubic_matrix, True)


def _floating_only(op):
    """Integer images take PyTorch's rounding kernels: they run on the CPU."""
    def rule(x, *args, **kwargs):
        if x.dtype.is_floating_point:
            return op(x, *args, **kwargs)
        raise MetaUnsupported(f"{op} on {x.dtype}")

    return rule


for _op in (aten._upsample_bilinear2d_aa.default, aten._upsample_bicubic2d_aa.default):
    SHAPE_RULES[_op] = _floating_only(_op)


# ---- grid sampling ----------------------------------------------------------------------------------
# Modes: 0 bilinear (trilinear in 3-d), 1 nearest, 2 bicubic (2-d only); padding: 0 zeros, 1 border,
# 2 reflection. The backward is the vjp of the same function. Clamping and reflection are written with
# comparisons, not jnp.clip/abs, so that their gradient at the boundary is 0 (clip) or +1 (reflect),
# as in PyTorch's kernels, rather than jax's split or sign(0) = 0.
def _unnormalize(coord, size, align_corners):
    return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2


def _clip(coord, size):
    return jnp.where(coord <= 0, 0, jnp.where(coord >= size - 1, size - 1, coord)).astype(coord.dtype)


def _reflect(coord, twice_low, twice_high):
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = coord - low
    coord = jnp.where(coord < 0, -coord, coord)
    extra = jnp.fmod(coord, span)
    flips = jnp.floor(coord / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinate(coord, size, padding, align_corners):
    if padding == 1:
        return _clip(coord, size)
    if padding == 2:
        reflected = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        return _clip(reflected, size)
    return coord


def _grid_sample(x, grid, mode, padding, align_corners):
    """x [N, C, *spatial], grid [N, *out, k] with coordinates (x, y[, z]) in [-1, 1]; returns [N, C, *out]."""
    n, c = x.shape[:2]
    sizes = x.shape[2:]
    k = len(sizes)
    flat = x.reshape(n, c, -1)
    out_shape = grid.shape[1:-1]
    strides = [int(np.prod(sizes[d + 1:])) for d in range(k)]
    # grid's last axis lists the coordinates fastest axis first: x indexes the last spatial axis.
    coords = [_unnormalize(grid[..., k - 1 - d], sizes[d], align_corners) for d in range(k)]

    def gather(positions):
        """Values at integer positions (one [N, *out] array per axis); 0 outside the input."""
        inside = functools.reduce(jnp.logical_and, [(p >= 0) & (p < s) for p, s in zip(positions, sizes)])
        index = sum(jnp.clip(p, 0, s - 1).astype(jnp.int64) * st for p, s, st in zip(positions, sizes, strides))
        values = jnp.take_along_axis(flat, index.reshape(n, 1, -1), axis=2)
        return values * inside.reshape(n, 1, -1).astype(x.dtype)

    if mode == 2:  # bicubic: taps around the raw coordinate, padding applied to each tap
        base = [jnp.floor(p) for p in coords]
        fraction = [p - b for p, b in zip(coords, base)]
        taps = [[_cubic_weight(t + 1 - j) for j in range(4)] for t in fraction]
        out = 0
        for offsets in itertools.product(range(4), repeat=k):
            positions = [_pad_coordinate(lax.stop_gradient(b) - 1 + o, s, padding, align_corners)
                         for b, o, s in zip(base, offsets, sizes)]
            weight = functools.reduce(jnp.multiply, [taps[d][o] for d, o in enumerate(offsets)])
            out = out + gather([lax.stop_gradient(p) for p in positions]) * weight.reshape(n, 1, -1)
        return out.reshape((n, c) + out_shape)
    coords = [_pad_coordinate(p, s, padding, align_corners) for p, s in zip(coords, sizes)]
    if mode == 1:  # nearest, ties to even as std::nearbyint
        return gather([jnp.round(p) for p in coords]).reshape((n, c) + out_shape)
    base = [jnp.floor(p) for p in coords]
    fraction = [p - b for p, b in zip(coords, base)]
    out = 0
    for corner in itertools.product((0, 1), repeat=k):
        weight = functools.reduce(jnp.multiply, [f if bit else 1 - f for f, bit in zip(fraction, corner)])
        out = out + gather([b + bit for b, bit in zip(base, corner)]) * weight.reshape(n, 1, -1)
    return out.reshape((n, c) + out_shape)


def _cubic_weight(t):
    """The bicubic kernel (a = -0.75) at distance t, in jnp (differentiable in the grid)."""
    a = -0.75
    t = jnp.where(t < 0, -t, t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return jnp.where(t < 1, near, jnp.where(t < 2, far, 0))


@lowers(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def _grid_sampler(ctx, x, grid, interpolation_mode, padding_mode, align_corners):
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@lowers(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def _grid_sampler_backward(ctx, grad, x, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    _, vjp = jax.vjp(lambda v, g: _grid_sample(v, g, interpolation_mode, padding_mode, align_corners), x, grid)
    grad_x, grad_grid = vjp(grad.astype(x.dtype))
    return grad_x if output_mask[0] else None, grad_grid if output_mask[1] else None


# ---- _trilinear (nn.functional.bilinear) ------------------------------------------------------------
@lowers(aten._trilinear.default)
def _trilinear(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """The product of three tensors, each missing the dims in its `expandN`, summed over `sumdim`: one
    einsum. Summed dims stay as size 1 when PyTorch's meta kernel keeps them (reshape to its shape)."""
    ndim = i1.ndim + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:ndim]

    def subscripts(expand):
        return "".join(letters[d] for d in range(ndim) if d not in set(expand))

    kept = "".join(letters[d] for d in range(ndim) if d not in set(sumdim))
    spec = f"{subscripts(expand1)},{subscripts(expand2)},{subscripts(expand3)}->{kept}"
    dtype = jnp.result_type(i1, i2, i3)
    out = jnp.einsum(spec, i1.astype(dtype), i2.astype(dtype), i3.astype(dtype), precision="highest")
    return out.reshape(ctx.meta.shape)
