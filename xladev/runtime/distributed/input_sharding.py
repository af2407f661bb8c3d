"""Input sharding: a mark to give every batch as it reaches the device (PyTorch/XLA's `xs.ShardingSpec`).

    spec = xladev.spmd.ShardingSpec(mesh, ("data", None))
    loader = torch_xla.distributed.parallel_loader.MpDeviceLoader(train_loader, device, input_sharding=spec)

A `ShardingSpec` names a mesh and a partition spec once; `shard_inputs` marks each copied tensor whose rank
matches the spec (`mark_sharding`), and leaves the others (labels of another rank) replicated, as PyTorch/XLA's
loader does. With `minibatch=True` each process gives only its own part of the global batch; this runtime's
SPMD runs in one process, so the local batch is the global one, and its first dimension must split evenly
over the local devices (PyTorch/XLA's check and words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from xladev.runtime.graph import backend
from xladev.runtime.graph.spmd_mesh import Mesh
from xladev.runtime.distributed.spmd_sharding import _partition_spec, sharding_text


@dataclass
class ShardingSpec:
    """A mesh and a partition spec to shard inputs with (PyTorch/XLA's `ShardingSpec`).

    Args:
      mesh: the device mesh.
      partition_spec: per dimension, the mesh axis (number or name, or a tuple of them) it is split along, or
        None to keep it whole.
      minibatch: each process gives its own part of the batch (see the module's docstring).

    Raises:
      ValueError: the partition spec names an axis the mesh lacks, or one axis twice.
    """

    mesh: Mesh
    partition_spec: Sequence
    minibatch: bool = False

    def __post_init__(self) -> None:
        self.partition_spec = tuple(self.partition_spec)
        self._jax_spec = _partition_spec(self.mesh, self.partition_spec, len(self.partition_spec))

    def can_apply(self, t: torch.Tensor) -> bool:
        """Whether `t` has as many dimensions as the partition spec has entries."""
        return len(t.shape) == len(self.partition_spec)

    def xla_spec(self, t: torch.Tensor) -> str | None:
        """The sharding text `t` would get (`{devices=[4,1]0,1,2,3}`), None when the spec does not apply."""
        import jax

        if not self.can_apply(t):
            return None
        return sharding_text(jax.sharding.NamedSharding(self.mesh.jax_mesh(), self._jax_spec), t.dim())

    def apply(self, t: torch.Tensor) -> None:
        """Marks device tensor `t` with this spec (`mark_sharding`).

        Raises:
          RuntimeError: SPMD mode is off. TypeError: not an xla tensor. ValueError: the spec does not fit `t`.
        """
        from xladev.runtime.distributed.sharded_tensor import mark_sharding

        mark_sharding(t, self.mesh, self.partition_spec)


def check_input_sharding(input_sharding) -> None:
    """Refuses, before any batch is loaded, an `input_sharding` that could never be applied.

    Args:
      input_sharding: a ShardingSpec, a dict of them (for dict batches), or None.

    Raises:
      TypeError: something else. RuntimeError: a spec given while SPMD mode is off.
    """
    from xladev.runtime.distributed.spmd_sharding import is_spmd

    if input_sharding is None:
        return
    specs = input_sharding.values() if isinstance(input_sharding, dict) else (input_sharding,)
    for spec in specs:
        if not isinstance(spec, ShardingSpec):
            raise TypeError(f"input_sharding takes a ShardingSpec (or, for a loader of dict batches, a dict of "
                            f"them), got {type(spec).__name__}")
    if not is_spmd():
        raise RuntimeError("input_sharding needs SPMD mode: call torch_xla.runtime.use_spmd() "
                           "(xladev.spmd.use_spmd()) first")


def shard_inputs(tensors: list[torch.Tensor], input_sharding: ShardingSpec) -> None:
    """Marks each of these device tensors that `input_sharding` applies to; the others stay replicated.

    Args:
      tensors: device tensors just copied from the host.
      input_sharding: the spec.

    Raises:
      TypeError: `input_sharding` is not a ShardingSpec.
      RuntimeError: SPMD mode is off, or `minibatch` is set and a tensor's first dimension does not split over
        the local devices.
    """
    if isinstance(input_sharding, dict):
        raise TypeError("input_sharding: a dict of ShardingSpecs is for a loader of dict batches; give one "
                        "ShardingSpec here")
    check_input_sharding(input_sharding)
    applicable = [t for t in tensors if input_sharding.can_apply(t)]
    if input_sharding.minibatch:
        local = len(backend.jax_devices())
        for t in applicable:
            if t.dim() > 0 and t.size(0) % local != 0:
                raise RuntimeError("When minibatch is configured, the per-host batch size must be divisible by "
                                   f"local runtime device count. Per host input data shape = {t.size()}, "
                                   f"local_runtime_device_count = {local}")
    for t in applicable:
        input_sharding.apply(t)


def tensors_in(data: Any) -> list[torch.Tensor]:
    """The tensors in a batch (a tensor, or lists, tuples and dicts of them), in order."""
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (list, tuple)):
        return [t for d in data for t in tensors_in(d)]
    if isinstance(data, dict):
        return [t for d in data.values() for t in tensors_in(d)]
    return []
