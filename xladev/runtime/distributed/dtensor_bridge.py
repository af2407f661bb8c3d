"""DTensor on the `xla` device: torch's `distribute_tensor` and `distribute_module` over SPMD marks.

    mesh = DeviceMesh("xla", list(range(4)))
    xt = torch.distributed.tensor.distribute_tensor(t, mesh, [Shard(0)])   # an XLAShardedTensor
    model = torch.distributed.tensor.distribute_module(model, mesh, partition_fn)

For a mesh of device type `xla`, torch hands both calls to `torch_xla.distributed.spmd`'s
`xla_distribute_tensor` and `xla_distribute_module` (this module, under those names). A DeviceMesh becomes an
SPMD `Mesh` of the same devices and shape; `Shard(d)` on mesh dimension i splits tensor dimension d over mesh
axis i, `Replicate()` leaves it whole; the result is the marked tensor wrapped in an `XLAShardedTensor`, on which
ops run as sharded graphs. SPMD mode is turned on first.

The wrapper answers DTensor's questions about its mark (`_spec`, `placements`, `redistribute`), as
PyTorch/XLA's does; as PyTorch/XLA's, it is a DTensor subclass, so `isinstance(x, DTensor)` is True.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn

from xladev.runtime.distributed.dtensor_placements import (  # noqa: F401  (this module's API)
    convert_to_xla_mesh, convert_to_xla_partition_spec,
)
from xladev.runtime.distributed.sharded_tensor import XLAShardedTensor, mark_sharding, sharding_type, ShardingType
from xladev.runtime.distributed.spmd_sharding import use_spmd


def xla_distribute_tensor(tensor: torch.Tensor, device_mesh, placements: Optional[Sequence] = None) -> XLAShardedTensor:
    """`tensor` on the device, split over `device_mesh` as `placements` say (torch's `distribute_tensor`).

    Args:
      tensor: a CPU or device tensor (an `XLAShardedTensor` with no split of its own too).
      device_mesh: a DeviceMesh of device type `xla` over every device.
      placements: one per mesh dimension (default: Replicate on each).

    Returns:
      The marked tensor wrapped in an `XLAShardedTensor`.

    Raises:
      ValueError: a bad mesh or placement, as many placements as mesh dimensions not given, a DTensor, or an
        `XLAShardedTensor` already split.
    """
    from torch.distributed.tensor.placement_types import Replicate

    mesh = convert_to_xla_mesh(device_mesh)
    if placements is None:
        placements = [Replicate() for _ in range(device_mesh.ndim)]
    if len(placements) != device_mesh.ndim:
        raise ValueError(f"{len(placements)} placement(s) for a DeviceMesh of {device_mesh.ndim} dimension(s): "
                         "give one per mesh dimension")
    if type(tensor).__name__ == "DTensor":  # torch's own, not the wrapper (a subclass of it)
        raise ValueError("distribute_tensor on xla takes a whole (global) tensor, not a DTensor")
    if isinstance(tensor, XLAShardedTensor):
        if sharding_type(tensor.global_tensor) not in (None, ShardingType.REPLICATED):
            raise ValueError("the XLAShardedTensor is split already: clear its sharding first "
                             "(torch_xla.distributed.spmd.clear_sharding)")
        tensor = tensor.global_tensor
    if not tensor.is_meta:
        tensor = tensor.to("xla")
    return mark_sharding(tensor, mesh, convert_to_xla_partition_spec(tensor, placements))


def auto_policy(mod_name: str, mod: nn.Module, mesh) -> None:
    """PyTorch/XLA's partition function asking XLA's auto-sharding to decide (refused by `xla_distribute_module`)."""


def xla_distribute_module(module: nn.Module, device_mesh=None, partition_fn: Optional[Callable] = None,
                          input_fn: Optional[Callable] = None, output_fn: Optional[Callable] = None) -> nn.Module:
    """Splits a module's parameters over `device_mesh` with `partition_fn`, and installs `input_fn` and
    `output_fn` as forward hooks (torch's `distribute_module`).

    Args:
      module: the module (on the device, or moved there by `partition_fn`'s `distribute_tensor` calls).
      device_mesh: a DeviceMesh of device type `xla`.
      partition_fn: `(name, submodule, device_mesh) -> None`, called for every submodule; None leaves the
        parameters replicated (XLA's partitioner decides the rest).
      input_fn: `(module, inputs, device_mesh)`, a forward pre-hook (the older `(inputs, device_mesh)` warns).
      output_fn: `(module, outputs, device_mesh)`, a forward hook (the older `(outputs, device_mesh)` warns).

    Returns:
      `module`.

    Raises:
      NotImplementedError: `auto_policy` (XLA's auto-sharding, which jax 0.10.2 no longer offers).
      ValueError: an `input_fn` or `output_fn` of another number of arguments.
    """
    use_spmd()
    if partition_fn is not None:
        if getattr(partition_fn, "__name__", "") == "auto_policy":
            raise NotImplementedError("auto_policy asks XLA's auto-sharding pass to place the parameters, which jax "
                                      "0.10.2 no longer offers (jax.sharding.AUTO was removed): give a partition_fn "
                                      "that calls distribute_tensor")
        for name, submodule in module.named_modules():
            partition_fn(name, submodule, device_mesh)
    if input_fn is not None:
        module.register_forward_pre_hook(_hook(input_fn, "input_fn", device_mesh, pre=True))
    if output_fn is not None:
        module.register_forward_hook(_hook(output_fn, "output_fn", device_mesh, pre=False))
    return module


def _hook(fn: Callable, name: str, device_mesh, pre: bool) -> Callable:
    count = len(inspect.signature(fn).parameters)
    if count == 2:
        warnings.warn(f"{name} taking two arguments (values, device_mesh) is deprecated: take (module, values, "
                      "device_mesh)", FutureWarning, stacklevel=3)
        if pre:
            return lambda module, inputs: fn(inputs, device_mesh)
        return lambda module, inputs, outputs: fn(outputs, device_mesh)
    if count != 3:
        raise ValueError(f"{name} should take 3 arguments (module, values, device_mesh), but takes {count}")
    if pre:
        return lambda module, inputs: fn(module, inputs, device_mesh)
    return lambda module, inputs, outputs: fn(module, outputs, device_mesh)

