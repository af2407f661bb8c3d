"""SPMD helpers that act through autograd (PyTorch/XLA's `xs.mark_sharding_with_gradients`,
`xs.xla_patched_nn_linear_forward` and `xs.xla_sharding.apply_backward_optimization_barrier`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from xladev.runtime.graph.spmd_mesh import Mesh
from xladev.runtime.record.opt_barrier import optimization_barrier_
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.distributed.sharded_tensor import mark_sharding


class MarkShardingFunction(torch.autograd.Function):
    """A sharded copy of its input whose gradient gets the same sharding in the backward pass."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, mesh: Mesh, partition_spec: tuple) -> torch.Tensor:
        ctx.mesh, ctx.partition_spec = mesh, partition_spec
        return mark_sharding(t.clone(), mesh, partition_spec).global_tensor

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return mark_sharding(grad.clone(), ctx.mesh, ctx.partition_spec).global_tensor, None, None


def mark_sharding_with_gradients(t: torch.Tensor, mesh: Mesh, partition_spec: Sequence) -> torch.Tensor:
    """A copy of `t` sharded as `partition_spec` says, whose gradient is sharded the same way in the backward
    pass (PyTorch/XLA's `xs.mark_sharding_with_gradients`). Unlike `mark_sharding`, `t` itself keeps its
    sharding: the copy carries the mark (a constraint in the graph), and XLA's propagation does the rest.

    Args:
      t: a device tensor (an intermediate value, typically).
      mesh: the device mesh.
      partition_spec: as `mark_sharding` takes it.

    Returns:
      The sharded copy (a plain device tensor, part of `t`'s autograd graph).

    Raises:
      AssertionError: the spec has another length than `t`'s rank (PyTorch/XLA asserts it).
      RuntimeError, TypeError, ValueError: as `mark_sharding`.
    """
    if len(t.shape) != len(partition_spec):
        raise AssertionError(f"Partition spec length ({len(partition_spec)}) should be equal to the input rank "
                             f"({len(t.shape)}).")
    return MarkShardingFunction.apply(t, mesh, tuple(partition_spec))


class XLAPatchedLinear(torch.autograd.Function):
    """`nn.Linear`'s forward and backward as einsums (PyTorch/XLA's `XLAPatchedLinear`): matmul flattens the
    leading dimensions into one, which loses a sharding marked on them; einsum keeps every dimension, so
    XLA's partitioner can follow the marks through the layer."""

    # Under autocast, the layer runs in the autocast dtype both ways (PyTorch/XLA's decorators): the inputs are
    # cast on the way in, so the output, its gradient and the backward's einsums are all in that dtype.
    @staticmethod
    @torch.amp.custom_fwd(device_type="xla", cast_inputs=torch.get_autocast_dtype("xla"))
    def forward(ctx, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
        ctx.save_for_backward(input, weight, bias)
        out = torch.einsum("...n,mn->...m", input, weight)
        return out + bias if bias is not None else out

    @staticmethod
    @torch.amp.custom_bwd(device_type="xla")
    def backward(ctx, grad: torch.Tensor):
        input, weight, bias = ctx.saved_tensors
        grad_input = torch.einsum("...m,mn->...n", grad, weight) if ctx.needs_input_grad[0] else None
        grad_weight = torch.einsum("...m,...n->mn", grad, input) if ctx.needs_input_grad[1] else None
        grad_bias = None
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = torch.einsum("...m->m", grad)
        return grad_input, grad_weight, grad_bias


def xla_patched_nn_linear_forward(m: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    """`m(input)` through `XLAPatchedLinear` (PyTorch/XLA's `xs.xla_patched_nn_linear_forward`); bind it as a
    Linear's forward: `m.forward = types.MethodType(xla_patched_nn_linear_forward, m)`.

    Args:
      m: the Linear layer (its `weight` and `bias`).
      input: the layer's input, any number of leading dimensions.

    Returns:
      `input @ m.weight.T + m.bias`.
    """
    return XLAPatchedLinear.apply(input, m.weight, m.bias)


def apply_backward_optimization_barrier(module: torch.nn.Module) -> None:
    """Registers a backward hook on `module` that passes its parameters' gradients (those already computed)
    and the gradients of its inputs through one optimization barrier (PyTorch/XLA's
    `xs.xla_sharding.apply_backward_optimization_barrier`, which FSDPv2 applies to every module it wraps).

    The values are unchanged; XLA cannot fuse the module's backward with the rest, which keeps the buffers of
    a gradient's synchronization small.

    Args:
      module: the module.
    """

    def barrier(mod, grad_input, grad_output) -> None:
        grads = [p.grad for p in mod.parameters() if p.grad is not None]
        tensors = [t for t in grads + list(grad_input) if isinstance(t, XlaTensor)]
        if tensors:
            optimization_barrier_(tensors)

    module.register_full_backward_hook(barrier)
