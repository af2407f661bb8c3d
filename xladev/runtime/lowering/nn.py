"""Neural-network ops: normalisation, pooling, losses, embedding; backward passes via jax.vjp."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers

aten = torch.ops.aten


def _layer_norm(x, normalized_shape, weight, bias, eps):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    rstd = lax.rsqrt(var + eps)
    out = (x - mean) * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out, mean, rstd


def _f32(*values):
    """Half-precision values as float32: PyTorch normalises them (forward and backward) in float32 and rounds only
    the results (its mean and rstd stay float32); the results are cast back to their dtypes by the graph."""
    return tuple(v.astype(jnp.float32) if v is not None and v.dtype in (jnp.bfloat16, jnp.float16) else v
                 for v in values)


@lowers(aten.native_layer_norm.default)
def _native_layer_norm(ctx, x, normalized_shape, weight, bias, eps):
    return _layer_norm(*_f32(x), normalized_shape, *_f32(weight, bias), eps)


@lowers(aten.native_layer_norm_backward.default)
def _native_layer_norm_backward(ctx, grad, x, normalized_shape, mean, rstd, weight, bias, output_mask):
    grad, x, rstd, weight, bias = _f32(grad, x, rstd, weight, bias)
    _, vjp = jax.vjp(lambda a, w_, b_: _ln_with_rstd(a, w_, b_, normalized_shape, rstd), x, weight, bias)
    gx, gw, gb = vjp(grad.astype(x.dtype))
    return (gx if output_mask[0] else None, gw if output_mask[1] and weight is not None else None,
            gb if output_mask[2] and bias is not None else None)


def _ln_with_rstd(x, w, b, normalized_shape, rstd_saved):
    """Layer norm whose variance term reproduces the saved rstd, so d/dx includes the statistics' gradient."""
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    eps = lax.stop_gradient(1.0 / jnp.square(rstd_saved) - var)
    out = (x - mean) * lax.rsqrt(var + eps)
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return out


def _batch_norm_train(x, weight, bias, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = jnp.mean(x, axis=axes)
    var = jnp.mean(jnp.square(x - mean.reshape(shape)), axis=axes)
    invstd = lax.rsqrt(var + eps)
    out = (x - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out, mean, invstd, var


@lowers(aten.native_batch_norm.default)
def _native_batch_norm(ctx, x, weight, bias, running_mean, running_var, training, momentum, eps):
    """Returns (out, save_mean, save_invstd, new_running_mean, new_running_var); the handler writes the stats back."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    dtype = x.dtype
    x, weight, bias, running_mean, running_var = _f32(x, weight, bias, running_mean, running_var)
    if training:
        out, mean, invstd, var = _batch_norm_train(x, weight, bias, eps)
        n = x.size // x.shape[1]
        new_rm = new_rv = None
        if running_mean is not None:
            new_rm = (1 - momentum) * running_mean + momentum * mean
            new_rv = (1 - momentum) * running_var + momentum * var * (n / max(n - 1, 1))
        return out.astype(dtype), mean, invstd, new_rm, new_rv
    invstd = lax.rsqrt(running_var + eps)
    out = (x - running_mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    # Evaluation mode saves no statistics; the meta kernel's shapes are kept (the values are unused).
    unused = jnp.zeros(ctx.meta[1].shape, ctx.dtype_of(1))
    return out.astype(dtype), unused, unused, running_mean, running_var


@lowers(aten.native_batch_norm_backward.default)
def _native_batch_norm_backward(ctx, grad, x, weight, running_mean, running_var, save_mean, save_invstd, train,
                                eps, output_mask):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    grad, x, weight, running_mean, running_var = _f32(grad, x, weight, running_mean, running_var)
    if train:
        def forward(x_, w_):
            return _batch_norm_train(x_, w_, None, eps)[0]
    else:
        def forward(x_, w_):
            out = (x_ - running_mean.reshape(shape)) * lax.rsqrt(running_var + eps).reshape(shape)
            return out * w_.reshape(shape) if w_ is not None else out

    _, vjp = jax.vjp(forward, x, weight)
    gx, gw = vjp(grad.astype(x.dtype))
    gb = jnp.sum(grad, axis=(0,) + tuple(range(2, x.ndim))) if output_mask[2] else None
    return (gx if output_mask[0] else None, gw if output_mask[1] and weight is not None else None, gb)


def _pool_args(x, kernel_size, stride, padding, dilation=(1,)):
    spatial = len(kernel_size) if len(kernel_size) > 1 else x.ndim - 2
    expand = lambda v, d: tuple(v) * spatial if len(v) == 1 else (tuple(v) if v else d)
    kernel = expand(kernel_size, None)
    stride = expand(stride, kernel) if stride else kernel
    padding = expand(padding, (0,) * spatial)
    dilation = expand(dilation, (1,) * spatial)
    return spatial, kernel, stride, padding, dilation


def _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode):
    spatial, kernel, stride, padding, dilation = _pool_args(x, kernel_size, stride, padding, dilation)
    lead = x.ndim - spatial
    pads = []
    for i in range(spatial):
        size = x.shape[lead + i]
        eff = dilation[i] * (kernel[i] - 1) + 1
        extra = 0
        if ceil_mode:
            out = -(-(size + 2 * padding[i] - eff) // stride[i]) + 1
            if (out - 1) * stride[i] >= size + padding[i]:
                out -= 1
            extra = max(0, (out - 1) * stride[i] + eff - (size + 2 * padding[i]))
        pads.append((padding[i], padding[i] + extra))
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    return lax.reduce_window(
        x, jnp.asarray(init, x.dtype), lax.max, (1,) * lead + kernel, (1,) * lead + stride,
        [(0, 0)] * lead + pads, window_dilation=(1,) * lead + dilation)


@lowers(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool_with_indices(ctx, x, kernel_size, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    out = _max_pool(x, kernel_size, stride, padding, dilation, ceil_mode)
    # Indices: flat position within each input plane of the max, found by pooling (value, -index) pairs.
    spatial = len(kernel_size) if len(kernel_size) > 1 else x.ndim - 2
    plane = x.shape[-spatial:]
    size = 1
    for d in plane:
        size *= d
    flat_index = jnp.arange(size, dtype=jnp.int64).reshape(plane)
    flat_index = jnp.broadcast_to(flat_index, x.shape)
    _, kernel, stride_, padding_, dilation_ = _pool_args(x, kernel_size, stride, padding, dilation)
    lead = x.ndim - spatial

    def select(a, b):
        av, ai = a
        bv, bi = b
        take_b = (bv > av) | ((bv == av) & (bi < ai)) | jnp.isnan(bv)
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    pads = [(0, 0)] * lead + [(p, p + max(0, _ceil_extra(x.shape[lead + i], kernel[i], stride_[i], padding_[i], dilation_[i]) if ceil_mode else 0))
                              for i, p in enumerate(padding_)]
    init = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    _, idx = lax.reduce_window(
        (x, flat_index), (jnp.asarray(init, x.dtype), jnp.asarray(jnp.iinfo(jnp.int64).max, jnp.int64)), select,
        (1,) * lead + kernel, (1,) * lead + stride_, pads, window_dilation=(1,) * lead + dilation_)
    return out, idx


def _ceil_extra(size, k, s, p, d):
    eff = d * (k - 1) + 1
    out = -(-(size + 2 * p - eff) // s) + 1
    if (out - 1) * s >= size + p:
        out -= 1
    return (out - 1) * s + eff - (size + 2 * p)


@lowers(aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default)
def _max_pool_backward(ctx, grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    spatial = len(kernel_size) if len(kernel_size) > 1 else x.ndim - 2
    return _scatter_to_plane(grad, x, indices, spatial)


@lowers(aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default)
def _adaptive_max_pool_backward(ctx, grad, x, indices):
    return _scatter_to_plane(grad, x, indices, 2 if ctx.node.op.aten is aten.adaptive_max_pool2d_backward.default else 3)


def _scatter_to_plane(grad, x, indices, spatial):
    """Adds each output gradient at its max's flat position within the input plane (indices from the forward)."""
    lead_shape = x.shape[:-spatial]
    plane = 1
    for d in x.shape[-spatial:]:
        plane *= d
    g = grad.reshape(lead_shape + (-1,))
    idx = indices.reshape(lead_shape + (-1,))
    zeros = jnp.zeros(lead_shape + (plane,), grad.dtype)
    batch = jnp.indices(idx.shape)[:-1]
    out = zeros.at[tuple(batch) + (idx,)].add(g)
    return out.reshape(x.shape)


def _zero(dtype):
    """A Python zero: reduce_window recognises a sum (and can differentiate it) only with a literal init."""
    return 0.0 if jnp.issubdtype(dtype, jnp.inexact) else 0


def _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    spatial, kernel, stride, padding, _ = _pool_args(x, kernel_size, stride, padding)
    lead = x.ndim - spatial
    pads = [(0, 0)] * lead + [
        (padding[i], padding[i] + (max(0, _ceil_extra(x.shape[lead + i], kernel[i], stride[i], padding[i], 1)) if ceil_mode else 0))
        for i in range(spatial)]
    window = (1,) * lead + kernel
    strides = (1,) * lead + stride
    summed = lax.reduce_window(x, _zero(x.dtype), lax.add, window, strides, pads)
    if divisor_override:
        return summed / divisor_override
    plane = x.shape[lead:]
    if count_include_pad:
        # The window is clipped to the padded input: padding counts, the ceil-mode overhang does not.
        ones = jnp.ones(tuple(n + 2 * p for n, p in zip(plane, padding)), x.dtype)
        extra = [(0, pads[lead + i][1] - padding[i]) for i in range(spatial)]
        counts = lax.reduce_window(ones, _zero(x.dtype), lax.add, kernel, stride, extra)
    else:
        counts = lax.reduce_window(jnp.ones(plane, x.dtype), _zero(x.dtype), lax.add, kernel, stride, pads[lead:])
    return summed / counts


@lowers(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool_nd(ctx, x, kernel_size, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
    return _avg_pool(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lowers(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avg_pool_backward(ctx, grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _, vjp = jax.vjp(lambda v: _avg_pool(v, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                          divisor_override), x)
    return vjp(grad.astype(x.dtype))[0]


def _adaptive_windows(in_size: int, out_size: int):
    """Window i covers [floor(i*in/out), ceil((i+1)*in/out)): (indices (out, K) clamped, valid mask (out, K))."""
    starts = np.array([(i * in_size) // out_size for i in range(out_size)])
    ends = np.array([-(-((i + 1) * in_size) // out_size) for i in range(out_size)])
    width = int((ends - starts).max()) if out_size else 0
    index = starts[:, None] + np.arange(width)[None, :]
    valid = index < ends[:, None]
    return np.minimum(index, in_size - 1), valid


def _adaptive_gather(x, output_size):
    """x's spatial dims replaced by (out, K) window pairs: (windows, valid mask), both (..., o1, K1, o2, K2...)."""
    spatial = len(output_size)
    lead = x.ndim - spatial
    valid = np.ones((), bool)
    for i, out in enumerate(output_size):
        axis = lead + 2 * i  # each earlier spatial dim became two
        index, mask = _adaptive_windows(x.shape[axis], out)
        x = jnp.take(x, index, axis=axis)
        valid = valid[..., None, None] & mask.reshape((1, 1) * i + mask.shape) if i else mask
    return x, jnp.asarray(valid)


def _adaptive_avg(x, output_size):
    windows, valid = _adaptive_gather(x, output_size)
    axes = tuple(range(x.ndim - len(output_size) + 1, windows.ndim, 2))
    total = jnp.sum(jnp.where(valid, windows, jnp.zeros((), x.dtype)), axis=axes)
    return total / jnp.sum(valid, axis=tuple(a - (x.ndim - len(output_size)) for a in axes)).astype(x.dtype)


def _adaptive_max(x, output_size):
    """Max of each window and its flat index in the input plane (first maximum; NaN wins)."""
    spatial = len(output_size)
    lead = x.ndim - spatial
    windows, valid = _adaptive_gather(x, output_size)
    low = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    windows = jnp.where(valid, windows, jnp.asarray(low, x.dtype))
    # Bring the K axes last and flatten them: (..., o1, o2, K1*K2).
    perm = tuple(range(lead)) + tuple(lead + 2 * i for i in range(spatial)) + tuple(lead + 2 * i + 1 for i in range(spatial))
    moved = jnp.transpose(windows, perm)
    flat = moved.reshape(moved.shape[:lead + spatial] + (-1,))
    best = jnp.argmax(flat, axis=-1)
    values = jnp.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    # Flat input-plane index of each window's best position.
    plane_index = np.zeros((), np.int64)
    widths = []
    for i, out in enumerate(output_size):
        index, _ = _adaptive_windows(x.shape[lead + i], out)
        widths.append(index.shape[1])
        stride = int(np.prod(x.shape[lead + i + 1:], dtype=np.int64))
        term = (index * stride).reshape((1,) * i + (out,) + (1,) * (spatial - i - 1) + (1,) * i + (index.shape[1],)
                                        + (1,) * (spatial - i - 1))
        plane_index = plane_index + term
    plane_index = jnp.asarray(plane_index.reshape(tuple(output_size) + (-1,)))
    indices = jnp.take_along_axis(jnp.broadcast_to(plane_index, flat.shape), best[..., None], axis=-1)[..., 0]
    return values, indices.astype(jnp.int64)


@lowers(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def _adaptive_avg_pool(ctx, x, output_size):
    return _adaptive_avg(x, tuple(output_size))


@lowers(aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default)
def _adaptive_avg_pool_backward(ctx, grad, x):
    spatial = 2 if ctx.node.op.aten is aten._adaptive_avg_pool2d_backward.default else 3
    _, vjp = jax.vjp(lambda v: _adaptive_avg(v, grad.shape[-spatial:]), x)
    return vjp(grad.astype(x.dtype))[0]


@lowers(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def _adaptive_max_pool(ctx, x, output_size):
    return _adaptive_max(x, tuple(output_size))


def _nll(x, target, weight, reduction, ignore_index):
    if x.ndim == 1:
        x = x[None]
        target = target[None]
    picked = -jnp.take_along_axis(x, jnp.expand_dims(jnp.clip(target, 0, x.shape[1] - 1), 1), axis=1).squeeze(1)
    w = jnp.ones(x.shape[1], x.dtype) if weight is None else weight
    wt = w[jnp.clip(target, 0, x.shape[1] - 1)] * (target != ignore_index)
    losses = picked * wt
    if reduction == 0:
        return losses, jnp.zeros((), x.dtype)
    total = jnp.sum(wt)
    if reduction == 1:
        return jnp.sum(losses) / total, total
    return jnp.sum(losses), total


@lowers(aten.nll_loss_forward.default)
def _nll_loss_forward(ctx, x, target, weight, reduction, ignore_index):
    out, total = _nll(x, target, weight, reduction, ignore_index)
    if reduction == 0 and x.ndim == 1:
        out = out.reshape(())
    return out, total


@lowers(aten.nll_loss_backward.default)
def _nll_loss_backward(ctx, grad, x, target, weight, reduction, ignore_index, total_weight):
    def forward(v):
        out, _ = _nll(v, target, weight, reduction, ignore_index)
        return out.reshape(grad.shape) if reduction == 0 else out

    _, vjp = jax.vjp(forward, x)
    return vjp(grad.astype(x.dtype))[0]


@lowers(aten.nll_loss2d_forward.default)
def _nll_loss2d_forward(ctx, x, target, weight, reduction, ignore_index):
    moved = jnp.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
    out, total = _nll(moved, target.reshape(-1), weight, reduction, ignore_index)
    return (out.reshape(target.shape) if reduction == 0 else out), total


@lowers(aten.embedding.default)
def _embedding(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return jnp.take(weight, indices, axis=0)


@lowers(aten.embedding_dense_backward.default)
def _embedding_dense_backward(ctx, grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    flat_idx = indices.reshape(-1)
    g = grad.reshape(-1, grad.shape[-1])
    if padding_idx >= 0:
        g = jnp.where((flat_idx == padding_idx)[:, None], 0, g)
    if scale_grad_by_freq:
        counts = jnp.zeros(num_weights, g.dtype).at[flat_idx].add(1)
        g = g / counts[flat_idx][:, None]
    return jnp.zeros((num_weights, grad.shape[-1]), grad.dtype).at[flat_idx].add(g)


@lowers(aten.mse_loss.default)
def _mse_loss(ctx, x, y, reduction=1):
    d = jnp.square(x - y)
    return d if reduction == 0 else (jnp.mean(d) if reduction == 1 else jnp.sum(d))


@lowers(aten.mse_loss_backward.default)
def _mse_loss_backward(ctx, grad, x, y, reduction):
    scale = 2.0 / x.size if reduction == 1 else 2.0
    return grad * scale * (x - y)


@lowers(aten._weight_norm_interface_backward.default)
def _weight_norm_backward(ctx, grad_w, v, g, norms, dim):
    # w = g·v/‖v‖, the norm taken over every axis but `dim` (all axes for dim=-1); g and norms keep
    # v's rank with size 1 on the reduced axes. So ∂g = Σ(∂w·v)/‖v‖ and ∂v = (g/‖v‖)(∂w − v·∂g/‖v‖).
    axes = tuple(a for a in range(v.ndim) if dim == -1 or a != dim % v.ndim)
    grad_g = jnp.sum(grad_w * v, axis=axes, keepdims=True) / norms.reshape(
        jnp.sum(v, axis=axes, keepdims=True).shape)
    norms_b = norms.reshape(grad_g.shape)
    grad_v = (g.reshape(grad_g.shape) / norms_b) * (grad_w - v * (grad_g / norms_b))
    return grad_v, grad_g.reshape(g.shape)
