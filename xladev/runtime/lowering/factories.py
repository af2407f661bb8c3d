"""Tensors made from nothing: empty, full, arange, eye, linspace, index grids."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


@lowers(aten.empty.memory_format, aten.empty_strided.default, aten.zeros.default, aten.new_empty.default,
        aten.new_zeros.default, aten.zeros_like.default, aten.empty_like.default, aten.new_empty_strided.default,
        aten._efficientzerotensor.default)
def _zeros(ctx, *args, **kwargs):
    # `empty` is uninitialised in eager; zeros keeps graphs deterministic and costs XLA nothing.
    return jnp.zeros(ctx.out_shape, ctx.out_dtype)


@lowers(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def _ones(ctx, *args, **kwargs):
    return jnp.ones(ctx.out_shape, ctx.out_dtype)


@lowers(aten.full.default, aten.full_like.default, aten.new_full.default, aten.scalar_tensor.default)
def _full(ctx, *args, **kwargs):
    op = ctx.node.op.aten
    if op is aten.scalar_tensor.default:
        value = args[0]
    elif op is aten.full_like.default:
        value = args[1] if len(args) > 1 else kwargs["fill_value"]
    else:
        value = args[1] if len(args) > 1 else kwargs["fill_value"]
        if op is aten.new_full.default:
            value = args[2] if len(args) > 2 else kwargs["fill_value"]
    return jnp.full(ctx.out_shape, jnp.asarray(value).astype(ctx.out_dtype), ctx.out_dtype)


@lowers(aten.arange.start_step, aten.arange.start, aten.arange.default)
def _arange(ctx, *args, **kwargs):
    op = ctx.node.op.aten
    if op is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if op is aten.arange.start_step and len(args) > 2 else kwargs.get("step", 1)
    n = ctx.out_shape[0]
    dtype = ctx.out_dtype
    if jnp.issubdtype(dtype, jnp.integer):
        return (start + step * jnp.arange(n, dtype=jnp.int64)).astype(dtype)
    return (jnp.asarray(start, jnp.float64) + jnp.asarray(step, jnp.float64) * jnp.arange(n, dtype=jnp.float64)).astype(dtype)


@lowers(aten.eye.default, aten.eye.m)
def _eye(ctx, n, m=None, **kwargs):
    rows, cols = ctx.out_shape
    return jnp.eye(rows, cols, dtype=ctx.out_dtype)


@lowers(aten.linspace.default)
def _linspace(ctx, start, end, steps, **kwargs):
    dtype = ctx.out_dtype
    if steps == 1:
        return jnp.full((1,), start, dtype)
    i = jnp.arange(steps, dtype=jnp.float64)
    step = (jnp.asarray(end, jnp.float64) - start) / (steps - 1)
    # Eager PyTorch fills the two halves from each end for symmetry; match it.
    values = jnp.where(i < steps // 2, start + step * i, end - step * (steps - 1 - i))
    if jnp.issubdtype(dtype, jnp.integer):
        return values.astype(dtype)
    return values.astype(dtype)


@lowers(aten.tril_indices.default)
def _tril_indices(ctx, row, col, offset=0, **kwargs):
    return jnp.asarray(np.stack(np.tril_indices(row, offset, col)), ctx.out_dtype)


@lowers(aten.triu_indices.default)
def _triu_indices(ctx, row, col, offset=0, **kwargs):
    return jnp.asarray(np.stack(np.triu_indices(row, offset, col)), ctx.out_dtype)
