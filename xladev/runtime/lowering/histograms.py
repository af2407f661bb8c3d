"""Histograms with a static number of bins: histc, histogram, histogramdd.

The output shape depends only on the bin counts, so these record lazily; the range may come from the
data (min and max of each dimension), computed on the device. PyTorch's rules, matched here:

- bin edges are `linspace(left, right, bins + 1)` in the input's dtype; a degenerate range widens
  to [v - 1, v + 1] for histc and [v - 0.5, v + 0.5] for histogram/histogramdd; histogram of an
  empty input without a range spans [0, 1];
- an element lands in the last bin whose left edge it reaches; the last bin includes its right edge;
  elements outside [first edge, last edge] (and NaNs) are ignored;
- histc places elements by linear interpolation, (x - left) · bins / (right - left), truncated; the
  histogram ops search the edges, so an element on an edge goes where the edge tensor says;
- histc of integers (CUDA's, which the CPU lacks) counts in the input's dtype, with that interpolation in
  64-bit integers;
- `weight` replaces each element's count of 1; `density` divides by the total and by each bin's
  width (its volume, for histogramdd).

One difference: when a range taken from the data is not finite (a NaN or an infinity in the input),
PyTorch raises, which a lazy graph cannot do without reading the data back; the histogram (and its
edges) come out all NaN instead, so the result can never pass for a real count.

`histogramdd`'s list of bin edges is a handler's job: `record/histogram_edges.py`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES

aten = torch.ops.aten


def _linspace(left, right, count: int, dtype):
    """`count` evenly spaced values from `left` to `right`, filled from both ends as eager PyTorch does."""
    left, right = jnp.asarray(left).astype(dtype), jnp.asarray(right).astype(dtype)
    if count == 1:
        return left.reshape(1)
    i = jnp.arange(count, dtype=dtype)
    step = (right - left) / (count - 1)
    return jnp.where(i < count // 2, left + step * i, right - step * (count - 1 - i))


def _data_range(column, pad: float):
    """(left, right, finite) of one dimension's values, widened by `pad` where it is one point."""
    if column.size == 0:
        return jnp.asarray(0.0), jnp.asarray(1.0), jnp.asarray(True)
    left, right = jnp.min(column).astype(jnp.float64), jnp.max(column).astype(jnp.float64)
    finite = jnp.isfinite(left) & jnp.isfinite(right)
    same = left == right
    return jnp.where(same, left - pad, left), jnp.where(same, right + pad, right), finite


def _outer_edges(points, bins, ranges, dtype):
    """Per-dimension edge arrays and whether every data-derived range was finite.

    Args:
      points: (N, D) values.
      bins: D bin counts.
      ranges: None (from the data) or the flat [left0, right0, left1, right1, ...].
    """
    edges, finite = [], jnp.asarray(True)
    for d, count in enumerate(bins):
        if ranges is None:
            left, right, ok = _data_range(points[:, d], 0.5)
            finite = finite & ok
        else:
            left, right = ranges[2 * d], ranges[2 * d + 1]
            if left == right:
                left, right = left - 0.5, right + 0.5
        edges.append(_linspace(left, right, count + 1, dtype))
    return edges, finite


def _bin_by_search(values, edges):
    """Bin index of each value and whether it is counted, from the sorted edge array."""
    last = edges.shape[0] - 2
    index = jnp.searchsorted(edges, values, side="right") - 1
    inside = (values >= edges[0]) & (values <= edges[-1])
    return jnp.clip(index, 0, last), inside


def _count(indices, inside, bins, weight, dtype):
    """The D-dimensional histogram of (N,) bin indices per dimension."""
    flat = jnp.zeros((), jnp.int64)
    for index, count in zip(indices, bins):
        flat = flat * count + index
    counted = jnp.ones(inside.shape, dtype) if weight is None else weight.reshape(-1).astype(dtype)
    counted = jnp.where(inside, counted, 0)
    total = 1
    for count in bins:
        total *= count
    return jnp.zeros((total,), dtype).at[flat].add(counted).reshape(tuple(bins))


def _density(hist, edges):
    """Counts divided by their total and by each bin's volume."""
    hist = hist / jnp.sum(hist)
    for d, e in enumerate(edges):
        shape = [1] * hist.ndim
        shape[d] = -1
        hist = hist / jnp.diff(e).reshape(shape)
    return hist


def _histogramdd(points, edges, bins, weight, density, dtype):
    indices, inside = [], jnp.ones(points.shape[:1], bool)
    for d, e in enumerate(edges):
        index, ok = _bin_by_search(points[:, d], e)
        indices.append(index)
        inside = inside & ok
    hist = _count(indices, inside, bins, weight, dtype)
    return _density(hist, edges) if density else hist


def _invalid_to_nan(value, finite):
    return jnp.where(finite, value, jnp.nan)


@lowers(aten.histc.default)
def _histc(ctx, x, bins=100, min=0, max=0):
    dtype = ctx.out_dtype
    if jnp.issubdtype(dtype, jnp.integer):
        return _histc_integer(x.reshape(-1), bins, min, max, dtype)
    values = x.reshape(-1).astype(dtype)
    left, right = jnp.asarray(min, jnp.float64), jnp.asarray(max, jnp.float64)
    data_left, data_right, finite = _data_range(values, 0.0) if values.size else (left, right, True)
    # min == max (both 0 by default) asks for the data's range; it is compared on the device because
    # a Scalar other than 0 or 1 is a graph input.
    use_data = left == right
    left, right = jnp.where(use_data, data_left, left), jnp.where(use_data, data_right, right)
    finite = jnp.where(use_data, finite, True) & (left <= right)
    same = left == right
    left, right = jnp.where(same, left - 1, left).astype(dtype), jnp.where(same, right + 1, right).astype(dtype)
    index = ((values - left) * bins / (right - left)).astype(jnp.int64)
    inside = (values >= left) & (values <= right)
    hist = _count([jnp.clip(index, 0, bins - 1)], inside, [bins], None, dtype)
    return _invalid_to_nan(hist, finite)


def _histc_integer(values, bins, min, max, dtype):
    """histc of integers, as CUDA's kernel computes it (the CPU has none): the range and each element's bin in
    64-bit integers, (x - left) * bins // (right - left), so no bin boundary depends on a float's rounding; the
    counts in the input's dtype. transformers' Mixtral counts its experts' tokens so on an accelerator."""
    values = values.astype(jnp.int64)
    left, right = jnp.asarray(min).astype(jnp.int64), jnp.asarray(max).astype(jnp.int64)
    if values.size:
        use_data = left == right
        left = jnp.where(use_data, jnp.min(values), left)
        right = jnp.where(use_data, jnp.max(values), right)
    same = left == right
    left, right = jnp.where(same, left - 1, left), jnp.where(same, right + 1, right)
    inside = (values >= left) & (values <= right)
    # Outside elements are masked out; their (possibly negative) index only needs to stay in bounds.
    index = jnp.clip((values - left) * bins // (right - left), 0, bins - 1)
    return _count([index], inside, [bins], None, dtype)


@lowers(aten.histogram.bin_ct)
def _histogram_bin_ct(ctx, x, bins=100, *, range=None, weight=None, density=False):
    dtype = ctx.dtype_of(0)
    points = x.reshape(-1, 1).astype(dtype)
    edges, finite = _outer_edges(points, [bins], range, dtype)
    hist = _histogramdd(points, edges, [bins], weight, density, dtype)
    return _invalid_to_nan(hist, finite), _invalid_to_nan(edges[0], finite)


@lowers(aten.histogram.bins_tensor)
def _histogram_bins_tensor(ctx, x, bins, *, weight=None, density=False):
    dtype = ctx.dtype_of(0)
    points = x.reshape(-1, 1).astype(dtype)
    edges = [bins.astype(dtype)]
    return _histogramdd(points, edges, [bins.shape[0] - 1], weight, density, dtype), edges[0]


@lowers(aten._histogramdd_from_bin_cts.default)
def _histogramdd_from_bin_cts(ctx, x, bins, *, range=None, weight=None, density=False):
    dtype = ctx.out_dtype
    points = x.reshape(-1, x.shape[-1]).astype(dtype)
    edges, finite = _outer_edges(points, list(bins), range, dtype)
    return _invalid_to_nan(_histogramdd(points, edges, list(bins), weight, density, dtype), finite)


@lowers(aten._histogramdd_from_bin_tensors.default)
def _histogramdd_from_bin_tensors(ctx, x, bins, *, weight=None, density=False):
    dtype = ctx.out_dtype
    points = x.reshape(-1, x.shape[-1]).astype(dtype)
    edges = [b.astype(dtype) for b in bins]
    return _histogramdd(points, edges, [e.shape[0] - 1 for e in edges], weight, density, dtype)


# ---- shape rules: PyTorch has no meta kernels for these; the checks are those of its CPU kernels ----
_TYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
               torch.uint8: "Byte", torch.bool: "Bool", torch.float16: "Half", torch.bfloat16: "BFloat16"}


def _check(points, bin_counts, ranges, weight):
    """PyTorch's argument checks for a (N, D) histogram.

    Raises:
      RuntimeError: with the CPU kernel's message.
    """
    if points.dtype not in (torch.float32, torch.float64):
        raise RuntimeError(f'"histogramdd" not implemented for \'{_TYPE_NAMES.get(points.dtype, points.dtype)}\'')
    if points.dim() < 2:
        raise RuntimeError("torch.histogramdd: input tensor should have at least 2 dimensions")
    dims = points.shape[-1]
    if len(bin_counts) != dims:
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    for d, count in enumerate(bin_counts):
        if count <= 0:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {count} for dimension {d}")
    if ranges is not None:
        if len(ranges) != 2 * dims:
            raise RuntimeError(f"torch.histogramdd: for a {dims}-dimensional histogram range should have "
                               f"{2 * dims} elements, but got {len(ranges)}")
        for d in range(dims):
            left, right = ranges[2 * d], ranges[2 * d + 1]
            if not (math.isfinite(left) and math.isfinite(right)):
                raise RuntimeError(f"torch.histogramdd: dimension {d}'s range [{left:g}, {right:g}] is not finite")
            if left > right:
                raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min {left:g} max "
                                   f"{right:g} for dimension {d}")
    if weight is not None and tuple(weight.shape) != tuple(points.shape[:-1]):
        raise RuntimeError("torch.histogramdd: if weight tensor is provided it should have the same shape as the "
                           f"input tensor excluding its innermost dimension, but got input with shape "
                           f"{list(points.shape)} and weight with shape {list(weight.shape)}")


def _check_bin_tensors(bins):
    for d, b in enumerate(bins):
        if b.dim() != 1:
            raise RuntimeError(f"torch.histogramdd: bins tensor should have one dimension, but got {b.dim()} "
                               f"dimensions in the bins tensor for dimension {d}")
        if b.numel() < 2:
            raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {b.numel() - 1} for dimension {d}")


def _histogram_bin_ct_rule(x, bins=100, *, range=None, weight=None, density=False):
    _check(x.reshape(-1, 1), [bins], range, None if weight is None else weight.reshape(-1))
    return x.new_empty((bins,)), x.new_empty((bins + 1,))


def _histogram_bins_tensor_rule(x, bins, *, weight=None, density=False):
    _check_bin_tensors([bins])
    _check(x.reshape(-1, 1), [bins.numel() - 1], None, None if weight is None else weight.reshape(-1))
    return x.new_empty((bins.numel() - 1,)), x.new_empty((bins.numel(),))


def _from_bin_cts_rule(x, bins, *, range=None, weight=None, density=False):
    _check(x, list(bins), range, weight)
    return x.new_empty(tuple(bins))


def _from_bin_tensors_rule(x, bins, *, weight=None, density=False):
    _check_bin_tensors(bins)
    _check(x, [b.numel() - 1 for b in bins], None, weight)
    return x.new_empty(tuple(b.numel() - 1 for b in bins))


def _histc_rule(x, bins=100, min=0, max=0):
    # Floats, as on the CPU, and integers, as on CUDA (the xla device is an accelerator: libraries written for
    # one pass integer tensors to histc off the CPU).
    if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.uint8, torch.int8,
                       torch.int16, torch.int32, torch.int64):
        raise RuntimeError(f'"histogram_cpu" not implemented for \'{_TYPE_NAMES.get(x.dtype, x.dtype)}\'')
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if max < min:
        raise RuntimeError("torch.histc: max must be larger than min")
    if not (math.isfinite(min) and math.isfinite(max)):
        raise RuntimeError(f"torch.histc: range of [{min:g}, {max:g}] is not finite")
    return x.new_empty((bins,))


SHAPE_RULES[aten.histc.default] = _histc_rule
SHAPE_RULES[aten.histogram.bin_ct] = _histogram_bin_ct_rule
SHAPE_RULES[aten.histogram.bins_tensor] = _histogram_bins_tensor_rule
SHAPE_RULES[aten._histogramdd_from_bin_cts.default] = _from_bin_cts_rule
SHAPE_RULES[aten._histogramdd_from_bin_tensors.default] = _from_bin_tensors_rule
