"""Indexed reductions and writes: index_reduce (prod, mean, amax, amin) and put.

index_reduce folds each `source` slice into the `self` slice its index names, along `dim`, with
jax's scatter reductions (`.at[].multiply/max/min/add`). With include_self=False, the slices that
some index names start from the reduction's identity instead of their own value, so only the
sources count; slices no index names keep their value. `mean` divides the sum by the number of
values folded in (sources, plus self when included); integer means round down, as PyTorch does.

put writes (or adds) `source` at linear indices of the flattened tensor; negative indices count from
the end.
"""

from __future__ import annotations

import jax.numpy as jnp

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


def _identity(reduce: str, dtype):
    if reduce == "prod":
        return jnp.ones((), dtype)
    if reduce == "mean":
        return jnp.zeros((), dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(-jnp.inf if reduce == "amax" else jnp.inf, dtype)
    info = jnp.iinfo(dtype)
    return jnp.asarray(info.min if reduce == "amax" else info.max, dtype)


@lowers(aten.index_reduce.default)
def _index_reduce(ctx, x, dim, index, source, reduce, *, include_self=True):
    dtype = x.dtype
    squeeze = x.ndim == 0
    if squeeze:  # a 0-d self takes a one-element index and source
        x, source = x.reshape(1), source.reshape(1)
        dim = 0
    dim = dim % x.ndim
    moved = jnp.moveaxis(x, dim, 0)
    source = jnp.moveaxis(source.reshape(source.shape or (1,)), dim, 0).astype(dtype)
    index = index.reshape(-1)
    hits = jnp.zeros(moved.shape[:1], jnp.int64).at[index].add(1)
    named = (hits > 0).reshape((-1,) + (1,) * (moved.ndim - 1))
    base = moved if include_self else jnp.where(named, _identity(reduce, dtype), moved)
    at = base.at[index]
    if reduce == "prod":
        out = at.multiply(source)
    elif reduce == "amax":
        out = at.max(source)
    elif reduce == "amin":
        out = at.min(source)
    elif reduce == "mean":
        total = at.add(source)
        count = (hits + (1 if include_self else 0)).reshape(named.shape)
        count = jnp.maximum(count, 1).astype(dtype)
        mean = total // count if jnp.issubdtype(dtype, jnp.integer) else total / count
        out = jnp.where(named, mean, moved)
    else:
        raise ValueError(f"index_reduce(): unknown reduce {reduce!r}")  # the meta kernel rejects it first
    out = jnp.moveaxis(out, 0, dim)
    return out.reshape(()) if squeeze else out


@lowers(aten.put.default)
def _put(ctx, x, index, source, accumulate=False):
    flat = x.reshape(-1)
    index = index.reshape(-1)
    index = jnp.where(index < 0, index + flat.shape[0], index)
    values = source.reshape(-1).astype(x.dtype)
    at = flat.at[index]
    if accumulate:
        flat = at.max(values) if x.dtype == jnp.bool_ else at.add(values)
    else:
        flat = at.set(values)
    return flat.reshape(x.shape)
