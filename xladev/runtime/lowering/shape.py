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


def _scatter(x, dim, index, src, mode):
    if x.ndim == 0:
        return jnp.asarray(src).astype(x.dtype).reshape(()) if mode == "set" else x + src
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


@lowers(aten.index_add.default)
def _index_add(ctx, x, dim, index, source, alpha=1):
    dim = dim % max(x.ndim, 1)
    source = source * alpha if not (isinstance(alpha, (int, float)) and alpha == 1) else source
    moved = jnp.moveaxis(x, dim, 0)
    return jnp.moveaxis(moved.at[index].add(jnp.moveaxis(source.astype(x.dtype), dim, 0)), 0, dim)


def _index_tuple(indices):
    return tuple(slice(None) if i is None else i for i in indices)


@lowers(aten.index.Tensor, aten._unsafe_index.Tensor)
def _index(ctx, x, indices):
    return x[_index_tuple(indices)]


@lowers(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(ctx, x, indices, values, accumulate=False):
    values = jnp.asarray(values).astype(x.dtype)
    if len(indices) == 1 and indices[0] is not None and indices[0].dtype == jnp.bool_:
        mask = indices[0]
        mask = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
        return jnp.where(mask, x + values if accumulate else values, x)
    at = x.at[_index_tuple(indices)]
    return at.add(values) if accumulate else at.set(values)


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
