"""FSDP through SPMD (PyTorch/XLA's FSDPv2, `torch_xla.experimental.spmd_fully_sharded_data_parallel`).

Each parameter is split along its largest dimension over the mesh's `fsdp` axis, and the module's output
along its batch dimension; XLA's partitioner gathers the parameters where they are used and splits their
gradients again, so no code here runs collectives.

Unlike PyTorch/XLA, which pads an uneven split, a parameter (or output) whose dimension the `fsdp` axis does
not divide stays replicated here: jax holds no uneven buffer (an uneven mark is held whole on each device, see
`spmd_sharding`), so such a split would save no memory. The values are the same. PyTorch/XLA's backward
optimization barrier (a scheduling hint) is not provided.

`auto_wrap_policy` (`torch_xla.distributed.fsdp.wrap`'s policies, as for FSDP over processes) wraps the
submodules it picks, innermost first, each with this class on the same mesh (or with `auto_wrapper_callable`),
before the module itself is wrapped.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import numpy as np
import torch
import torch.nn as nn

from xladev.runtime.distributed.sharded_tensor import mark_sharding
from xladev.runtime.distributed.spmd_autograd import apply_backward_optimization_barrier
from xladev.runtime.parallel.fsdp.wrap import recursive_wrap
from xladev.runtime.graph.spmd_mesh import Mesh, get_global_mesh
from xladev.runtime.distributed.spmd_sharding import get_sharding_spec


def _fsdp_spec(shape, mesh: Mesh, extra_data_axis: str | None = None, shard_maximal: bool = False):
    """The partition spec that splits `shape` over `fsdp` (with `extra_data_axis` before it): along the
    largest dimension, or the first; None when that dimension is not divisible by the axes' size."""
    if len(shape) == 0:
        return None
    index = list(shape).index(max(shape)) if shard_maximal else 0
    axes = (extra_data_axis, "fsdp") if extra_data_axis else ("fsdp",)
    split = int(np.prod([mesh.shape()[a] for a in axes]))
    if shape[index] % split:
        return None
    spec = [None] * len(shape)
    spec[index] = axes if extra_data_axis else "fsdp"
    return tuple(spec)


class SpmdFullyShardedDataParallel(nn.Module):
    """Wraps `module` for FSDP over SPMD (PyTorch/XLA's `FSDPv2`): its parameters are split over the mesh's
    `fsdp` axis now, its output when it runs. Wrap inner modules first, then the whole model.

    Args:
      module: the module (moved to the device).
      mesh: a mesh with an `fsdp` axis (default: the global mesh, `xs.set_global_mesh`).
      shard_output: `(output, mesh) -> None` marking the output; default: the output tensor (or a tuple's
        first) split along its first dimension.
      auto_wrap_policy: picks submodules to wrap first (`transformer_auto_wrap_policy`...), or None.
      auto_wrapper_callable: `(module, **kwargs) -> module` wrapping each picked submodule; default this class
        with the same mesh, `shard_output` and `extra_data_axis`.
      extra_data_axis: a mesh axis the output's batch is split over too, before `fsdp`.

    Raises:
      RuntimeError: `module` is already wrapped, or has no `forward` of its own (a ModuleList).
      ValueError: no mesh, a mesh without `fsdp`, an `extra_data_axis` it lacks, or `auto_wrapper_callable`
        without `auto_wrap_policy`.
    """

    def __init__(self, module: nn.Module, *, mesh: Mesh | None = None, shard_output: Callable | None = None,
                 auto_wrap_policy: Callable | None = None, auto_wrapper_callable: Callable | None = None,
                 extra_data_axis: str | None = None) -> None:
        if isinstance(module, SpmdFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP: wrap the inner modules "
                               "first, then the outer one")
        forward = getattr(type(module), "forward", None)
        if forward is None or forward is nn.Module.forward:
            raise RuntimeError(f"FSDP wraps a module with its own forward: {type(module).__name__} has none "
                               "(wrap the modules inside a ModuleList or ModuleDict instead)")
        mesh = mesh if mesh is not None else get_global_mesh()
        if mesh is None:
            raise ValueError("No mesh is provided and no global mesh is set: pass mesh= or call xs.set_global_mesh")
        if mesh.axis_names is None or "fsdp" not in mesh.axis_names:
            raise ValueError("The mesh must have an axis named 'fsdp'.")
        if extra_data_axis and extra_data_axis not in mesh.axis_names:
            raise ValueError(f"The provided {extra_data_axis} axis is not in the mesh.")
        if auto_wrapper_callable is not None and auto_wrap_policy is None:
            raise ValueError("auto_wrapper_callable wraps the submodules auto_wrap_policy picks: give a policy too")
        if auto_wrap_policy is not None:
            wrapper = auto_wrapper_callable or functools.partial(
                SpmdFullyShardedDataParallel, mesh=mesh, shard_output=shard_output, extra_data_axis=extra_data_axis)
            recursive_wrap(module, auto_wrap_policy, wrapper, only_wrap_children=True)
        super().__init__()
        self._orig_module = module.to("xla")
        self._mesh = mesh
        for param in module.parameters():
            if get_sharding_spec(param):
                continue  # an inner wrapper (or the user) marked it already
            spec = _fsdp_spec(param.shape, mesh, shard_maximal=True)
            if spec is not None:
                mark_sharding(param, mesh, spec)
        # The module's backward through one barrier, so XLA does not fuse the gradients' synchronization across
        # modules into one gigantic buffer (as PyTorch/XLA's FSDPv2 does).
        apply_backward_optimization_barrier(module)

        def shard_output_impl(output, mesh):
            real = output
            if isinstance(output, tuple):
                real = output[0]
                warnings.warn("The output is a tuple, but only the first element is sharded. If this is not "
                              "intended, please provide your own shard_output callable.")
            if not isinstance(real, torch.Tensor):
                raise RuntimeError(f"The output type is not supported: {type(output)}. Please provide your own "
                                   "shard_output callable.")
            spec = _fsdp_spec(real.shape, mesh, extra_data_axis)
            if spec is not None:
                mark_sharding(real, mesh, spec)

        self._shard_output = shard_output or shard_output_impl

    @property
    def module(self) -> nn.Module:
        """The wrapped module (as DDP's `.module`)."""
        return self._orig_module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        output = self.module(*args, **kwargs)
        self._shard_output(output, self._mesh)
        return output

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)

    def __getitem__(self, key: int) -> nn.Module:
        return self.module.__getitem__(key)
