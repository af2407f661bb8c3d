"""Views, reshapes, joins, indexing, scatter/gather and padding.

View lowerings compute a view's value from its input's value. They are also applied to an iota of the
base to find where a view's elements live, which is how writes through views are scattered back.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


# ---- views ------------------------------------------------------------------------------------------
@lowers(aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default, aten.reshape.default,
        aten.view_copy.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
        aten.unsqueeze.default, aten.alias.default)
def _reshape(ctx, x, *args, **kwargs):
    return jnp.reshape(x, ctx.out_shape)


@lowers(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx, x, size, stride, storage_offset=None):
    flat = x.reshape(-1)
    index = jnp.asarray(storage_offset or 0, jnp.int64)
    for dim, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[dim] = n
        index = index + (jnp.arange(n, dtype=jnp.int64) * s).reshape(shape)
    return flat[jnp.broadcast_to(index, tuple(size))]


@lowers(aten.select.int, aten.select_copy.int)
def _select(ctx, x, dim, index):
    dim = dim % x.ndim
    index = index + x.shape[dim] if index < 0 else index
    return lax.index_in_dim(x, index, dim, keepdims=False)


@lowers(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    return x[(slice(None),) * dim + (slice(start, end, step),)]


@lowers(aten.narrow.default)
def _narrow(ctx, x, dim, start, length):
    dim = dim % x.ndim
    start = start + x.shape[dim] if start < 0 else start
    return lax.slice_in_dim(x, start, start + length, axis=dim)


@lowers(aten.transpose.int, aten.transpose_copy.int)
def _transpose(ctx, x, dim0, dim1):
    return jnp.swapaxes(x, dim0, dim1) if x.ndim else x


@lowers(aten.t.default, aten.t_copy.default)
def _t(ctx, x):
    return x.T


@lowers(aten.permute.default, aten.permute_copy.default)
def _permute(ctx, x, dims):
    return jnp.transpose(x, tuple(d % x.ndim for d in dims)) if x.ndim else x


@lowers(aten.movedim.intlist)
def _movedim(ctx, x, source, destination):
    return jnp.moveaxis(x, tuple(source), tuple(destination)) if x.ndim else x


@lowers(aten.expand.default)
def _expand(ctx, x, size, implicit=False):
    return jnp.broadcast_to(x, ctx.out_shape)


@lowers(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    return jnp.diagonal(x, offset, dim1 % x.ndim, dim2 % x.ndim)


@lowers(aten.split.Tensor, aten.split_with_sizes.default, aten.split_copy.Tensor,
        aten.split_with_sizes_copy.default)
def _split(ctx, x, split, dim=0):
    dim = dim % x.ndim
    outputs, start = [], 0
    for meta in ctx.meta:
        length = meta.shape[dim]
        outputs.append(lax.slice_in_dim(x, start, start + length, axis=dim))
        start += length
    return tuple(outputs)


@lowers(aten.unbind.int, aten.unbind_copy.int)
def _unbind(ctx, x, dim=0):
    dim = dim % x.ndim
    return tuple(lax.index_in_dim(x, i, dim, keepdims=False) for i in range(x.shape[dim]))


@lowers(aten.unfold.default)
def _unfold(ctx, x, dim, size, step):
    if x.ndim == 0:
        return x.reshape(1)
    dim = dim % x.ndim
    count = (x.shape[dim] - size) // step + 1
    index = (jnp.arange(count)[:, None] * step + jnp.arange(size)[None, :])
    taken = jnp.take(x, index, axis=dim)  # dims: ..., count, size, ...
    return jnp.moveaxis(taken, dim + 1, -1)


# ---- joins and copies ---------------------------------------------------------------------------------
@lowers(aten.cat.default)
def _cat(ctx, tensors, dim=0):
    keep = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors[:1])
    dtype = ctx.out_dtype
    ndim = max(t.ndim for t in keep)
    return jnp.concatenate([t.astype(dtype) for t in keep], axis=dim % ndim if ndim else 0)


@lowers(aten.stack.default)
def _stack(ctx, tensors, dim=0):
    return jnp.stack([t.astype(ctx.out_dtype) for t in tensors], axis=dim)


@lowers(aten.flip.default)
def _flip(ctx, x, dims):
    return jnp.flip(x, tuple(dims)) if x.ndim else x


@lowers(aten.roll.default)
def _roll(ctx, x, shifts, dims=()):
    if not dims:
        return jnp.roll(x.reshape(-1), shifts).reshape(x.shape)
    return jnp.roll(x, tuple(shifts), tuple(dims))


@lowers(aten.repeat.default)
def _repeat(ctx, x, repeats):
    x = x.reshape((1,) * (len(repeats) - x.ndim) + x.shape)
    return jnp.tile(x, tuple(repeats))


@lowers(aten.tril.default)
def _tril(ctx, x, diagonal=0):
    return jnp.tril(x, diagonal)


@lowers(aten.triu.default)
def _triu(ctx, x, diagonal=0):
    return jnp.triu(x, diagonal)


@lowers(aten.constant_pad_nd.default)
def _constant_pad_nd(ctx, x, pad, value=0):
    config = [(0, 0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        config[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return lax.pad(x, jnp.asarray(value).astype(x.dtype), config)


# ---- gather / scatter / indexing --------------------------------------------------------------------------
def _grid(index, dim):
    """Full index tuple addressing `index`'s positions, with `index` itself along `dim`."""
    grids = list(jnp.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


@lowers(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    if x.ndim == 0:
        return x.reshape(ctx.out_shape)
    return jnp.take(x, index.reshape(-1), axis=dim)


@lowers(aten.gather.default)
def _gather(ctx, x, dim, index, sparse_grad=False):
    if x.ndim == 0:
        return x.reshape(index.shape)
    dim = dim % x.ndim
    return x[_grid(index, dim)]


# Reductions of bool values: addition saturates (or), multiplication is and.
_BOOL_MODES = {"add": "amax", "sum": "amax", "multiply": "amin", "prod": "amin"}


def _scatter(x, dim, index, src, mode):
    if x.dtype == jnp.bool_:
        mode = _BOOL_MODES.get(mode, mode)
    if x.ndim == 0:
        if index.size == 0:
            return x
        value = jnp.asarray(src).astype(x.dtype).reshape(-1)[0]
        return {"set": lambda: value, "add": lambda: x + value, "sum": lambda: x + value, "multiply": lambda: x * value,
                "prod": lambda: x * value, "amax": lambda: jnp.maximum(x, value), "amin": lambda: jnp.minimum(x, value),
                }[mode]()
    dim = dim % x.ndim
    src = jnp.asarray(src).astype(x.dtype)
    if src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    else:
        src = jnp.broadcast_to(src, index.shape)
    at = x.at[_grid(index, dim)]
    return {"set": at.set, "add": at.add, "multiply": at.multiply, "sum": at.add, "prod": at.multiply,
            "amax": at.max, "amin": at.min}[mode](src)


@lowers(aten.scatter.src, aten.scatter.value)
def _scatter_plain(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src, "set")


@lowers(aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_reduce_legacy(ctx, x, dim, index, src, reduce):
    return _scatter(x, dim, index, src, reduce)


@lowers(aten.scatter_add.default)
def _scatter_add(ctx, x, dim, index, src):
    return _scatter(x, dim, index, src, "add")


@lowers(aten.scatter_reduce.two)
def _scatter_reduce(ctx, x, dim, index, src, reduce, include_self=True):
    if x.ndim == 0 or index.size == 0:
        return _scatter_reduce_0d(x, index, src, reduce, include_self)
    dim = dim % x.ndim
    src = jnp.asarray(src).astype(x.dtype)[tuple(slice(0, n) for n in index.shape)]
    grid = _grid(index, dim)
    counts = jnp.zeros(x.shape, jnp.int64).at[grid].add(1)
    hit = counts > 0
    base = x
    if not include_self:
        identity = {"sum": 0, "mean": 0, "prod": 1, "amax": _lowest(x.dtype), "amin": _highest(x.dtype)}[reduce]
        base = jnp.where(hit, jnp.asarray(identity, x.dtype), x)
    mode = {"sum": "add", "mean": "add", "prod": "multiply", "amax": "amax", "amin": "amin"}[reduce]
    if x.dtype == jnp.bool_:
        mode = _BOOL_MODES.get(mode, mode)
    at = base.at[grid]
    out = {"add": at.add, "multiply": at.multiply, "amax": at.max, "amin": at.min}[mode](src)
    if reduce == "mean":
        n = counts + (1 if include_self else 0)
        n = jnp.maximum(n, 1).astype(x.dtype)
        out = jnp.where(hit, jnp.floor_divide(out, n) if jnp.issubdtype(x.dtype, jnp.integer) else out / n, x)
    return out


def _scatter_reduce_0d(x, index, src, reduce, include_self):
    if index.size == 0:
        return x
    return _scatter(x, 0, index, src, {"sum": "add", "prod": "multiply", "mean": "set" if not include_self else "add"}
                    .get(reduce, reduce)) if reduce != "mean" or not include_self else \
        (x + jnp.asarray(src).astype(x.dtype).reshape(-1)[0]) / 2


def _lowest(dtype):
    if dtype == jnp.bool_:
        return False
    return -jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).min


def _highest(dtype):
    if dtype == jnp.bool_:
        return True
    return jnp.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).max


@lowers(aten.masked_scatter.default)
def _masked_scatter(ctx, x, mask, source):
    """Fills positions where `mask` holds with consecutive elements of `source` (row-major order)."""
    mask = jnp.broadcast_to(mask, x.shape)
    flat = mask.reshape(-1)
    position = jnp.clip(jnp.cumsum(flat) - 1, 0, max(source.size - 1, 0))
    picked = source.reshape(-1).astype(x.dtype)[position] if source.size else jnp.zeros_like(x.reshape(-1))
    return jnp.where(flat, picked, x.reshape(-1)).reshape(x.shape)


@lowers(aten.masked_scatter_backward.default)
def _masked_scatter_backward(ctx, grad, mask, sizes):
    """The gradient of masked_scatter's `source`: the masked gradients in order, zeros after them."""
    n = 1
    for d in sizes:
        n *= d
    flat_mask = jnp.broadcast_to(mask, grad.shape).reshape(-1)
    (positions,) = jnp.nonzero(flat_mask, size=n, fill_value=-1)
    picked = jnp.where(positions >= 0, grad.reshape(-1)[jnp.maximum(positions, 0)], jnp.zeros((), grad.dtype))
    return picked.reshape(tuple(sizes))


@lowers(torch.ops.prims.copy_strided.default)
def _copy_strided(ctx, x, stride):
    return x  # a copy with other strides: the same values (the device has no strides)


@lowers(aten.index_add.default)
def _index_add(ctx, x, dim, index, source, alpha=1):
    source = source * alpha if not (isinstance(alpha, (int, float)) and alpha == 1) else source
    source = source.astype(x.dtype)
    if x.ndim == 0:  # a 0-dim self takes a one-element index
        total = jnp.sum(jnp.broadcast_to(source.reshape(-1), index.reshape(-1).shape))
        return jnp.logical_or(x, total) if x.dtype == jnp.bool_ else x + total
    dim = dim % x.ndim
    moved = jnp.moveaxis(x, dim, 0)
    source = jnp.moveaxis(source.reshape(source.shape or (1,)), dim if source.ndim else 0, 0)
    at = moved.at[index.reshape(-1)]
    return jnp.moveaxis(at.max(source) if x.dtype == jnp.bool_ else at.add(source), 0, dim)


def _index_tuple(indices):
    return tuple(slice(None) if i is None else i for i in indices)


@lowers(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(ctx, x, indices):
    return x[_index_tuple(indices)]


@lowers(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(ctx, x, indices, values, accumulate=False):
    values = jnp.asarray(values).astype(x.dtype)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == jnp.bool_:
        return _mask_put(x, indices[0], values, accumulate)
    at = x.at[_index_tuple(indices)]
    if not accumulate:
        return at.set(values)
    return at.max(values) if x.dtype == jnp.bool_ else at.add(values)


def _mask_put(x, mask, values, accumulate):
    """`x[mask] = values` (or `+=`): values broadcast to (count(mask), *rest) where rest = x.shape[mask.ndim:]."""
    rest = x.shape[mask.ndim:]
    lead = values.ndim - len(rest)  # values' dims in front of `rest`: they cover the count axis
    combine = (jnp.logical_or if x.dtype == jnp.bool_ else jnp.add) if accumulate else (lambda old, new: new)
    if lead <= 0 or all(d == 1 for d in values.shape[:lead]):
        # One value row for every selected position: no need to know how many there are.
        row = values.reshape(values.shape[max(lead, 0):]) if lead > 0 else values
        row = jnp.broadcast_to(row, rest)
        where = mask.reshape(mask.shape + (1,) * len(rest))
        return jnp.where(where, combine(x, row), x)
    count = 1
    for d in values.shape[:lead]:
        count *= d
    rows = jnp.broadcast_to(values.reshape((count,) + values.shape[lead:]), (count,) + rest)
    positions = jnp.nonzero(mask, size=count)  # PyTorch requires count == mask.sum()
    at = x.at[positions]
    if not accumulate:
        return at.set(rows)
    return at.max(rows) if x.dtype == jnp.bool_ else at.add(rows)


@lowers(aten.slice_scatter.default)
def _slice_scatter(ctx, x, src, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    return x.at[(slice(None),) * dim + (slice(start, end, step),)].set(src.astype(x.dtype))


@lowers(aten.select_scatter.default)
def _select_scatter(ctx, x, src, dim, index):
    dim = dim % x.ndim
    return x.at[(slice(None),) * dim + (index,)].set(src.astype(x.dtype))


@lowers(aten.diagonal_scatter.default)
def _diagonal_scatter(ctx, x, src, offset=0, dim1=0, dim2=1):
    iota = jnp.arange(x.size).reshape(x.shape)
    idx = jnp.diagonal(iota, offset, dim1 % x.ndim, dim2 % x.ndim)
    return x.reshape(-1).at[idx.reshape(-1)].set(src.astype(x.dtype).reshape(-1)).reshape(x.shape)
