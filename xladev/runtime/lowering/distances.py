"""Distances: cdist, pdist, dist, and the backward kernels of cdist and pdist.

p-norm distances go through `jnp.linalg.vector_norm` of the pairwise differences (it handles p = 0,
1, 2, inf and general p). cdist's p = 2 switches to the matrix-product form
|a|² + |b|² - 2·a·b, clamped at 0, exactly when PyTorch does (compute_mode 1, or compute_mode None/0
with more than 25 rows on either side), so both devices make the same cancellation errors on close
points.

The backward kernels are PyTorch's documented derivatives of the p-norm, per coordinate difference
d of a pair at distance r with incoming gradient g (written here in jnp):

- p = 1: g·sign(d);  p = 2: g·d/r;  p = inf: g·sign(d) where |d| = r;
- p < 2: g·sign(d)·|d|^(p-1)/r^(p-1);  p > 2: g·d·|d|^(p-2)/r^(p-1);
- zero where r = 0 (and, for p < 1, where d = 0); all zero for p = 0.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten

# PyTorch's threshold for cdist's p = 2 matrix-product path (compute_mode None / 0).
_MM_ROWS = 25


def _norm_last(diff, p: float):
    """The p-norm over the last axis (an empty axis has norm 0)."""
    if diff.shape[-1] == 0:
        return jnp.zeros(diff.shape[:-1], diff.dtype)
    return jnp.linalg.vector_norm(diff, ord=p, axis=-1)


def _batched(x1, x2):
    """x1 (..., P, M) and x2 (..., R, M) broadcast to one batch shape."""
    batch = jnp.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return (jnp.broadcast_to(x1, batch + x1.shape[-2:]), jnp.broadcast_to(x2, batch + x2.shape[-2:]))


def _uses_mm(p: float, compute_mode, rows1: int, rows2: int) -> bool:
    mode = 0 if compute_mode is None else compute_mode
    return p == 2 and (mode == 1 or (mode == 0 and (rows1 > _MM_ROWS or rows2 > _MM_ROWS)))


@lowers(aten._cdist_forward.default)
def _cdist_forward(ctx, x1, x2, p, compute_mode=None):
    x1, x2 = _batched(x1.astype(ctx.out_dtype), x2.astype(ctx.out_dtype))
    if _uses_mm(p, compute_mode, x1.shape[-2], x2.shape[-2]):
        cross = jnp.matmul(x1, jnp.swapaxes(x2, -1, -2), precision=lax.Precision.HIGHEST)
        squared = jnp.sum(x1 * x1, -1)[..., :, None] + jnp.sum(x2 * x2, -1)[..., None, :] - 2 * cross
        return jnp.sqrt(jnp.maximum(squared, 0))
    return _norm_last(x1[..., :, None, :] - x2[..., None, :, :], p)


def _pair_grad(diff, dist, grad, p: float):
    """d(dist)/d(first point) · grad, per coordinate; `dist` and `grad` carry a trailing axis of 1."""
    zero = jnp.zeros_like(diff)
    if p == 0:
        return zero
    if p == 1:
        return grad * jnp.sign(diff)
    if p == 2:
        return jnp.where(dist == 0, zero, grad * diff / jnp.where(dist == 0, 1, dist))
    if math.isinf(p):
        return grad * jnp.sign(diff) * (jnp.abs(diff) == dist)
    safe = jnp.where(dist == 0, 1, dist)
    if p < 2:
        value = jnp.sign(diff) * jnp.abs(diff) ** (p - 1) * grad / safe ** (p - 1)
        dead = (dist == 0) | ((diff == 0) & (p < 1))
    else:
        value = diff * jnp.abs(diff) ** (p - 2) * grad / safe ** (p - 1)
        dead = dist == 0
    return jnp.where(dead, zero, value)


@lowers(aten._cdist_backward.default)
def _cdist_backward(ctx, grad, x1, x2, p, cdist):
    dtype = ctx.out_dtype
    x1, x2 = _batched(x1.astype(dtype), x2.astype(dtype))
    if p == 0 or 0 in x1.shape or 0 in x2.shape:
        return jnp.zeros(ctx.meta.shape, dtype)
    diff = x1[..., :, None, :] - x2[..., None, :, :]
    per_pair = _pair_grad(diff, cdist.astype(dtype)[..., None], grad.astype(dtype)[..., None], p)
    return jnp.sum(per_pair, axis=-2)


def _pairs(n: int):
    """Row pairs (i < j) in the order pdist lists them (row-major upper triangle)."""
    i, j = np.triu_indices(n, 1)
    return i.astype(np.int32), j.astype(np.int32)


@lowers(aten._pdist_forward.default)
def _pdist_forward(ctx, x, p=2.0):
    i, j = _pairs(x.shape[0])
    x = x.astype(ctx.out_dtype)
    return _norm_last(x[i] - x[j], p)


@lowers(aten._pdist_backward.default)
def _pdist_backward(ctx, grad, x, p, pdist):
    dtype = ctx.out_dtype
    x = x.astype(dtype)
    i, j = _pairs(x.shape[0])
    if p == 0 or i.size == 0 or x.shape[1] == 0:
        return jnp.zeros(x.shape, dtype)
    per_pair = _pair_grad(x[i] - x[j], pdist.astype(dtype)[:, None], grad.astype(dtype)[:, None], p)
    # Each pair pushes its first row along the difference and its second row the opposite way.
    return jnp.zeros_like(x).at[i].add(per_pair).at[j].add(-per_pair)


@lowers(aten.dist.default)
def _dist(ctx, x, other, p=2):
    dtype = ctx.out_dtype
    diff = jnp.ravel(x.astype(dtype) - other.astype(dtype))
    if isinstance(p, (int, float)):
        return _norm_last(diff, float(p))
    # `p` is a graph input (a Scalar operand): choose among the norms with selects, not Python ifs.
    magnitude = jnp.abs(diff)
    if diff.size == 0:
        return jnp.zeros((), dtype)
    p = p.astype(dtype)
    # Each branch's input is made harmless where it is not chosen (p = 0 would give sum^(1/0)).
    safe_p = jnp.where((p == 0) | jnp.isinf(p), 1, p)
    general = jnp.sum(magnitude ** safe_p) ** (1 / safe_p)
    return jnp.select(
        [p == 0, p == jnp.inf, p == -jnp.inf],
        [jnp.sum(diff != 0).astype(dtype), jnp.max(magnitude), jnp.min(magnitude)],
        general)
