"""`torch_xla.core.functions` (`xf`) on xladev: collectives that autograd differentiates.

`xf.all_reduce(reduce_type, value, scale=1.0, groups=None)` is `xm.all_reduce` whose gradient is the sum of every
replica's gradient, times `scale` (the gradient of a sum: only `xm.REDUCE_SUM` has one). `xf.all_gather(value,
dim=0)` is `xm.all_gather` whose gradient is this replica's slice of the gathered gradient. In a single process
(world size 1) both are copies, and so are their gradients (`xm.all_reduce` skips the collective and its scale
there, as PyTorch/XLA's does).
"""

from __future__ import annotations

import torch

import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla import _xladev

__all__ = ["all_gather", "all_reduce"]


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, reduce_type, scale, groups):
        ctx.reduce_type, ctx.scale, ctx.groups = reduce_type, scale, groups
        return xm.all_reduce(reduce_type, value, scale=scale, groups=groups)

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduce_type != xm.REDUCE_SUM:
            raise RuntimeError(f"torch_xla.core.functions.all_reduce: no gradient for reduce type "
                               f"{ctx.reduce_type!r}; only xm.REDUCE_SUM is differentiable")
        return xm.all_reduce(xm.REDUCE_SUM, grad, scale=ctx.scale, groups=ctx.groups), None, None, None


def all_reduce(reduce_type, value, scale=1.0, groups=None):
    """`xm.all_reduce(reduce_type, value, scale, groups)`, differentiable for `xm.REDUCE_SUM`.

    Args:
      reduce_type: `xm.REDUCE_SUM` (the others reduce, and have no gradient).
      value: this replica's tensor.
      scale: multiplies the result (and the gradient).
      groups: replica groups; None for all replicas.

    Returns:
      The reduced tensor.
    """
    return _AllReduce.apply(value, reduce_type, scale, groups)


class _AllGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, value, dim):
        ctx.dim, ctx.size = dim, value.shape[dim]
        return xm.all_gather(value, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        start = xr.global_ordinal() * ctx.size
        return grad.narrow(ctx.dim, start, ctx.size), None


def all_gather(value, dim=0):
    """`xm.all_gather(value, dim)`, differentiable: the gradient is this replica's slice of the gathered one.

    Args:
      value: this replica's tensor.
      dim: the dimension to concatenate along.

    Returns:
      Every replica's value, concatenated along `dim` in replica order.
    """
    return _AllGather.apply(value, dim)


__getattr__ = _xladev.module_getattr(__name__)
