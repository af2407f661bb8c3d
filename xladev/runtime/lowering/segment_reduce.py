"""`segment_reduce` and `_segment_reduce_backward`: reductions over runs of consecutive elements.

The segments are given by `lengths` (shape `data.shape[:axis] + (S,)`) or `offsets`
(`data.shape[:axis] + (S + 1,)`); only their count S is static, so each element's segment is found
on the device with a search over the segment ends, and positions outside every segment are dropped
(segment id S, which jax's segment ops ignore). Leading dimensions before `axis` carry their own
segmentations and are mapped over with `jax.vmap`.

Empty segments take `initial` when given, else the reduction's identity (0, 1, -inf for max, +inf
for min) and NaN for mean, as PyTorch's kernels do. The backward passes are written out rather than
taken from autodiff, so that ties in max/min and zeros in prod follow PyTorch's conventions.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


def _segment_ids(n, lengths=None, offsets=None):
    """(segment id of each of `n` positions, segment count, per-segment length); S marks none."""
    if lengths is not None:
        ends = jnp.cumsum(lengths)
        starts = ends - lengths
        sizes = lengths
    else:
        starts, ends = offsets[:-1], offsets[1:]
        sizes = ends - starts
    count = starts.shape[0]
    pos = jnp.arange(n)
    seg = jnp.searchsorted(ends, pos, side="right")
    inside = (seg < count) & (pos >= starts[jnp.minimum(seg, count - 1)])
    return jnp.where(inside, seg, count), count, sizes


def _identity(reduce, dtype):
    if reduce in ("sum", "mean"):
        return jnp.zeros((), dtype)
    if reduce == "prod":
        return jnp.ones((), dtype)
    big = jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).max
    return jnp.asarray(-big if reduce == "max" else big, dtype)


def _reduce_one(data, seg, count, sizes, reduce, initial):
    """One segmentation along axis 0 of `data`: [S, ...]."""
    dtype = data.dtype
    if reduce in ("sum", "mean"):
        out = jax.ops.segment_sum(data, seg, count)
    elif reduce == "prod":
        out = jax.ops.segment_prod(data, seg, count)
    elif reduce == "max":
        out = jax.ops.segment_max(data, seg, count)
    else:
        out = jax.ops.segment_min(data, seg, count)
    trailing = (1,) * (data.ndim - 1)
    empty = (sizes == 0).reshape((-1,) + trailing)
    start = _identity(reduce, dtype) if initial is None else jnp.asarray(initial, dtype)
    if reduce in ("sum", "mean"):
        out = out + start
    elif reduce == "prod":
        out = out * start
    elif reduce == "max":
        out = jnp.where(empty, start, jnp.maximum(out, start))
    else:
        out = jnp.where(empty, start, jnp.minimum(out, start))
    if reduce == "mean":
        n = jnp.maximum(sizes, 1).reshape((-1,) + trailing).astype(dtype)
        out = jnp.where(empty, start if initial is not None else jnp.nan, out / n)
    return out


def _over_axis(fn, data, axis, lengths, offsets, *extra):
    """Applies fn(data_slice, segmentation, *extra_slices) over the dims before `axis`."""
    segs = lengths if lengths is not None else offsets
    use_lengths = lengths is not None

    def one(d, s, *e):
        seg, count, sizes = _segment_ids(d.shape[0], s if use_lengths else None, None if use_lengths else s)
        return fn(d, seg, count, sizes, *e)

    for _ in range(axis):
        one = jax.vmap(one)
    return one(data, segs, *extra)


@lowers(aten.segment_reduce.default)
def _segment_reduce(ctx, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                    initial=None):
    axis = axis % data.ndim
    return _over_axis(lambda d, seg, count, sizes: _reduce_one(d, seg, count, sizes, reduce, initial),
                      data, axis, lengths, offsets)


def _backward_one(grad, output, data, seg, count, sizes, reduce, initial):
    """The gradient of one segmentation along axis 0, as PyTorch's CPU kernel computes it."""
    inside = (seg < count).reshape((-1,) + (1,) * (data.ndim - 1))
    idx = jnp.minimum(seg, count - 1)
    g, out = grad[idx], output[idx]
    if reduce == "sum":
        result = g
    elif reduce == "mean":
        n = jnp.maximum(sizes, 1)[idx].reshape((-1,) + (1,) * (data.ndim - 1)).astype(data.dtype)
        result = g / n
    elif reduce in ("max", "min"):
        # Every element equal to the result (or NaN) gets the gradient; positive shares are split
        # between the tied elements, as PyTorch's kernel does.
        hit = (jnp.isnan(data) | (data == out)) & inside
        ties = jax.ops.segment_sum(hit.astype(jnp.int32), seg, count)[idx]
        result = jnp.where(hit, g, 0)
        result = jnp.where((ties >= 2) & (result > 0), result / jnp.maximum(ties, 1).astype(data.dtype), result)
    else:  # prod: output / x, or the product of the others when x is zero (or NaN)
        start = jnp.ones((), data.dtype) if initial is None else jnp.asarray(initial, data.dtype)
        special = (data == 0) | jnp.isnan(data)
        nonzero = jax.ops.segment_prod(jnp.where(special, 1, data), seg, count)[idx]
        zeros = jax.ops.segment_sum(special.astype(jnp.int32), seg, count)[idx]
        others = jnp.where(zeros - special.astype(jnp.int32) > 0, 0, nonzero * start)
        result = jnp.where(special, g * others, g * out / jnp.where(special, 1, data))
    return jnp.where(inside, result, 0)


@lowers(aten._segment_reduce_backward.default)
def _segment_reduce_backward(ctx, grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                             initial=None):
    axis = axis % data.ndim
    return _over_axis(lambda d, seg, count, sizes, g, o: _backward_one(g, o, d, seg, count, sizes, reduce, initial),
                      data, axis, lengths, offsets, grad, output)
