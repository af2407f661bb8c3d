"""Order statistics: median, nanmedian, kthvalue, mode.

All of them sort along the reduced dimension with a stable `jnp.argsort`, which places NaNs last (in
their original order), as PyTorch's CPU kernels treat NaN as larger than every number. The selected
position then gives both the value and the index:

- median: the lower of the two middle values, position (n - 1) // 2; any NaN in the row makes the
  result the row's first NaN (PyTorch propagates NaN and points at it).
- nanmedian: the same over the row's non-NaN values; an all-NaN row gives its first NaN.
- kthvalue: position k - 1.
- mode: the most frequent value, the smallest among equally frequent ones, with the index of its
  last occurrence (what PyTorch's CPU kernel returns).

Which index PyTorch reports among equal values is not documented except for mode; the stable sort
gives the first of them in sorted order, which matches the CPU on rows without ties. An all-NaN row's
nanmedian names its first NaN (the CPU's quickselect names one that depends on the row length).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


def _last_axis(x, dim):
    """`x` with `dim` moved last (a 0-d tensor becomes one element along a new axis)."""
    if x.ndim == 0:
        return x.reshape(1)
    return jnp.moveaxis(x, dim % x.ndim, -1)


def _finish(values, indices, x, dim, keepdim):
    """Restores the reduced axis as PyTorch lays it out: dropped, or kept with size 1."""
    if keepdim and x.ndim:
        axis = dim % x.ndim
        values, indices = jnp.expand_dims(values, axis), jnp.expand_dims(indices, axis)
    return values, indices.astype(jnp.int64)


def _select(rows, position):
    """Values and original indices of sorted position `position` (an array per row) along the last axis."""
    order = jnp.argsort(rows, axis=-1, stable=True)
    index = jnp.take_along_axis(order, position[..., None], axis=-1)[..., 0]
    value = jnp.take_along_axis(rows, index[..., None], axis=-1)[..., 0]
    return value, index


def _nan_count(rows):
    if not jnp.issubdtype(rows.dtype, jnp.inexact):
        return jnp.zeros(rows.shape[:-1], jnp.int32)
    return jnp.sum(jnp.isnan(rows), axis=-1, dtype=jnp.int32)


def _median_rows(rows, ignore_nan):
    n = rows.shape[-1]
    nans = _nan_count(rows)
    valid = n - nans
    if ignore_nan:
        position = jnp.maximum((valid - 1) // 2, 0)
    else:
        # Sorted NaNs start at `valid`: the first of them is the row's first NaN.
        position = jnp.where(nans > 0, valid, (n - 1) // 2)
    return _select(rows, position)


@lowers(aten.median.default)
def _median(ctx, x):
    return _median_rows(x.reshape(-1), ignore_nan=False)[0]


@lowers(aten.nanmedian.default)
def _nanmedian(ctx, x):
    return _median_rows(x.reshape(-1), ignore_nan=True)[0]


@lowers(aten.median.dim)
def _median_dim(ctx, x, dim, keepdim=False):
    values, indices = _median_rows(_last_axis(x, dim), ignore_nan=False)
    return _finish(values, indices, x, dim, keepdim)


@lowers(aten.nanmedian.dim)
def _nanmedian_dim(ctx, x, dim, keepdim=False):
    values, indices = _median_rows(_last_axis(x, dim), ignore_nan=True)
    return _finish(values, indices, x, dim, keepdim)


@lowers(aten.kthvalue.default)
def _kthvalue(ctx, x, k, dim=-1, keepdim=False):
    rows = _last_axis(x, dim)
    position = jnp.full(rows.shape[:-1], k - 1, jnp.int32)
    values, indices = _select(rows, position)
    return _finish(values, indices, x, dim, keepdim)


@lowers(aten.mode.default)
def _mode(ctx, x, dim=-1, keepdim=False):
    rows = _last_axis(x, dim)
    n = rows.shape[-1]
    ordered = jnp.sort(rows, axis=-1)
    # Runs of equal values in the sorted row: each element's run starts at the last position where
    # the value changed and ends just before the next change; its length is the value's count.
    iota = lax.broadcasted_iota(jnp.int32, ordered.shape, ordered.ndim - 1)
    changed = jnp.concatenate([jnp.ones(ordered.shape[:-1] + (1,), bool),
                               ordered[..., 1:] != ordered[..., :-1]], axis=-1)
    start = lax.cummax(jnp.where(changed, iota, 0), axis=ordered.ndim - 1)
    ends_here = jnp.concatenate([changed[..., 1:], jnp.ones(ordered.shape[:-1] + (1,), bool)], axis=-1)
    end = lax.cummin(jnp.where(ends_here, iota, n - 1), axis=ordered.ndim - 1, reverse=True)
    # argmax picks the first of the longest runs, which in ascending order is the smallest value.
    best = jnp.argmax(end - start + 1, axis=-1)
    value = jnp.take_along_axis(ordered, best[..., None], axis=-1)[..., 0]
    same = rows == value[..., None]
    if jnp.issubdtype(rows.dtype, jnp.inexact):
        same = same | (jnp.isnan(rows) & jnp.isnan(value)[..., None])
    iota_rows = lax.broadcasted_iota(jnp.int32, rows.shape, rows.ndim - 1)
    index = jnp.max(jnp.where(same, iota_rows, -1), axis=-1)
    return _finish(value, index, x, dim, keepdim)
