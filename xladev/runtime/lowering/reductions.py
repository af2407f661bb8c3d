"""Reductions, softmax family, scans and sorting."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES

aten = torch.ops.aten


def _axes(x, dim):
    if dim is None or (isinstance(dim, tuple) and len(dim) == 0):
        return None
    if isinstance(dim, int):
        dim = (dim,)
    return tuple(d % max(x.ndim, 1) for d in dim) if x.ndim else None


@lowers(aten.sum.default, aten.sum.dim_IntList)
def _sum(ctx, x, dim=None, keepdim=False, dtype=None):
    return jnp.sum(x.astype(ctx.out_dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.mean.default, aten.mean.dim)
def _mean(ctx, x, dim=None, keepdim=False, dtype=None):
    return jnp.mean(x.astype(ctx.out_dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.prod.default, aten.prod.dim_int)
def _prod(ctx, x, dim=None, keepdim=False, dtype=None):
    return jnp.prod(x.astype(ctx.out_dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.amax.default)
def _amax(ctx, x, dim=(), keepdim=False):
    return jnp.max(x, axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.amin.default)
def _amin(ctx, x, dim=(), keepdim=False):
    return jnp.min(x, axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.max.default)
def _max_all(ctx, x):
    return jnp.max(x)


@lowers(aten.min.default)
def _min_all(ctx, x):
    return jnp.min(x)


def _checked_reduction(name: str, meta_op, all_op):
    """A shape rule refusing what eager refuses: max/min over an empty dimension, or of an empty tensor with no
    dimension given. PyTorch's meta kernels accept both, and XLA would return -inf/+inf and index 0 silently."""

    def rule(x, dim=None, keepdim=False):
        if dim is None:
            if x.numel() == 0:
                raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")
            return all_op(x)
        if x.dim() and x.shape[dim] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {dim % x.dim()} to have non-zero size.")
        return meta_op(x, dim, keepdim)

    return rule


for _name, _dim_op, _all_op in (("max", aten.max.dim, aten.max.default), ("min", aten.min.dim, aten.min.default)):
    SHAPE_RULES[_dim_op] = SHAPE_RULES[_all_op] = _checked_reduction(_name, _dim_op, _all_op)


@lowers(aten.max.dim)
def _max_dim(ctx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.max(x, axis=dim, keepdims=keepdim), jnp.argmax(x, axis=dim, keepdims=keepdim).astype(jnp.int64)


@lowers(aten.min.dim)
def _min_dim(ctx, x, dim, keepdim=False):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    return jnp.min(x, axis=dim, keepdims=keepdim), jnp.argmin(x, axis=dim, keepdims=keepdim).astype(jnp.int64)


@lowers(aten.argmax.default)
def _argmax(ctx, x, dim=None, keepdim=False):
    if dim is None:
        out = jnp.argmax(x.reshape(-1))
        return out.reshape((1,) * x.ndim) if keepdim else out
    return jnp.argmax(x, axis=dim, keepdims=keepdim) if x.ndim else jnp.zeros((), jnp.int64)


@lowers(aten.argmin.default)
def _argmin(ctx, x, dim=None, keepdim=False):
    if dim is None:
        out = jnp.argmin(x.reshape(-1))
        return out.reshape((1,) * x.ndim) if keepdim else out
    return jnp.argmin(x, axis=dim, keepdims=keepdim) if x.ndim else jnp.zeros((), jnp.int64)


@lowers(aten.any.default, aten.any.dim, aten.any.dims)
def _any(ctx, x, dim=None, keepdim=False):
    return jnp.any(x != 0, axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten.all.default, aten.all.dim, aten.all.dims)
def _all(ctx, x, dim=None, keepdim=False):
    return jnp.all(x != 0, axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten._is_all_true.default, aten._is_any_true.default)
def _is_all_or_any_true(ctx, x):
    """`torch.distributions`' argument validation reads `constraint.check(value).all()` as a bool:
    reduced on the device, so only the answer is read back, not the whole tensor."""
    return jnp.all(x) if ctx.node.op.aten is aten._is_all_true.default else jnp.any(x)


@lowers(aten.var.correction)
def _var(ctx, x, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else correction
    # jnp.var of a complex input is real (the mean squared modulus); casting first would drop the imaginary part.
    x = x if jnp.iscomplexobj(x) else x.astype(ctx.out_dtype)
    return jnp.var(x, axis=_axes(x, dim), ddof=ddof, keepdims=keepdim)


@lowers(aten.std.correction)
def _std(ctx, x, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else correction
    x = x if jnp.iscomplexobj(x) else x.astype(ctx.out_dtype)
    return jnp.std(x, axis=_axes(x, dim), ddof=ddof, keepdims=keepdim)


@lowers(aten.logsumexp.default)
def _logsumexp(ctx, x, dim, keepdim=False):
    return jax.scipy.special.logsumexp(x.astype(ctx.out_dtype), axis=_axes(x, dim), keepdims=keepdim)


@lowers(aten._softmax.default)
def _softmax(ctx, x, dim, half_to_float=False):
    return jax.nn.softmax(x.astype(ctx.out_dtype), axis=dim)


@lowers(aten._log_softmax.default)
def _log_softmax(ctx, x, dim, half_to_float=False):
    return jax.nn.log_softmax(x.astype(ctx.out_dtype), axis=dim)


@lowers(aten._softmax_backward_data.default)
def _softmax_backward(ctx, grad, y, dim, input_dtype):
    return y * (grad - jnp.sum(grad * y, axis=dim, keepdims=True))


@lowers(aten._log_softmax_backward_data.default)
def _log_softmax_backward(ctx, grad, y, dim, input_dtype):
    return grad - jnp.exp(y) * jnp.sum(grad, axis=dim, keepdims=True)


@lowers(aten.cumsum.default)
def _cumsum(ctx, x, dim, dtype=None):
    return jnp.cumsum(x.astype(ctx.out_dtype), axis=dim) if x.ndim else x.astype(ctx.out_dtype)


@lowers(aten.cumprod.default)
def _cumprod(ctx, x, dim, dtype=None):
    return jnp.cumprod(x.astype(ctx.out_dtype), axis=dim) if x.ndim else x.astype(ctx.out_dtype)


def _sort_impl(x, dim, descending):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    key = -x if descending and x.dtype != jnp.bool_ else (~x if descending else x)
    indices = jnp.argsort(key, axis=dim, stable=True)
    return jnp.take_along_axis(x, indices, axis=dim), indices.astype(jnp.int64)


@lowers(aten.sort.default)
def _sort(ctx, x, dim=-1, descending=False):
    return _sort_impl(x, dim, descending)


@lowers(aten.sort.stable)
def _sort_stable(ctx, x, stable=None, dim=-1, descending=False):
    return _sort_impl(x, dim, descending)


@lowers(aten.topk.default)
def _topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    moved = jnp.moveaxis(x, dim, -1)
    values, indices = lax.top_k(moved if largest else -moved, k)
    if not largest:
        values = -values
    return jnp.moveaxis(values, -1, dim), jnp.moveaxis(indices, -1, dim).astype(jnp.int64)


@lowers(aten.var_mean.correction)
def _var_mean(ctx, x, dim=None, correction=None, keepdim=False):
    ddof = 1 if correction is None else correction
    x = x.astype(ctx.dtype_of(0))
    axes = _axes(x, dim)
    return jnp.var(x, axis=axes, ddof=ddof, keepdims=keepdim), jnp.mean(x, axis=axes, keepdims=keepdim)


def _cumulative_extreme(x, dim, better):
    """Running max/min with the index where it was reached; ties and NaN take the later index, as eager does."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    dim = dim % x.ndim
    shape = [1] * x.ndim
    shape[dim] = x.shape[dim]
    index = jnp.broadcast_to(jnp.arange(x.shape[dim], dtype=jnp.int64).reshape(shape), x.shape)

    def combine(a, b):
        av, ai = a
        bv, bi = b
        take_b = better(bv, av)
        if jnp.issubdtype(x.dtype, jnp.floating):
            take_b = jnp.isnan(bv) | (take_b & ~jnp.isnan(av))
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    return lax.associative_scan(combine, (x, index), axis=dim)


@lowers(aten.cummax.default)
def _cummax(ctx, x, dim):
    return _cumulative_extreme(x, dim, lambda b, a: b >= a)


@lowers(aten.cummin.default)
def _cummin(ctx, x, dim):
    return _cumulative_extreme(x, dim, lambda b, a: b <= a)


@lowers(aten.logcumsumexp.default)
def _logcumsumexp(ctx, x, dim):
    x = x.astype(ctx.out_dtype)
    if x.ndim == 0:
        return x
    return lax.cumlogsumexp(x, axis=dim % x.ndim)


def _searchsorted_impl(sequence, values, right, side, sorter, out_dtype):
    side = side or ("right" if right else "left")
    if sorter is not None:
        sequence = jnp.take_along_axis(sequence, sorter, axis=-1)
    values = jnp.asarray(values)
    if sequence.ndim <= 1:
        out = jnp.searchsorted(sequence, values, side=side)
    else:  # one sorted row per leading index of `values`
        lead = sequence.shape[:-1]
        rows = sequence.reshape((-1, sequence.shape[-1]))
        queries = values.reshape((rows.shape[0], -1))
        out = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(rows, queries).reshape(lead + values.shape[-1:])
    return out.astype(out_dtype)


@lowers(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def _searchsorted(ctx, sequence, values, out_int32=False, right=False, side=None, sorter=None):
    return _searchsorted_impl(sequence, values, right, side, sorter, ctx.out_dtype)


@lowers(aten.bucketize.Tensor, aten.bucketize.Scalar)
def _bucketize(ctx, values, boundaries, out_int32=False, right=False):
    return _searchsorted_impl(boundaries, values, right, None, None, ctx.out_dtype)
