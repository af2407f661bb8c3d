"""DTensor's placements and SPMD marks, each in the other's terms: a DeviceMesh as a `Mesh`, placements as a
partition spec, and a mark as a DTensorSpec (what `XLAShardedTensor` answers DTensor's questions with, and
what `dtensor_bridge` distributes by).
"""

from __future__ import annotations

from typing import Sequence

import torch

from xladev.runtime.graph import backend
from xladev.runtime.graph.spmd_mesh import Mesh
from xladev.runtime.distributed.spmd_sharding import use_spmd


def convert_to_xla_mesh(dt_mesh) -> Mesh:
    """The SPMD `Mesh` of a DeviceMesh: the same devices, shape and dimension names.

    Raises:
      ValueError: the DeviceMesh is not of device type `xla`.
      AssertionError: it does not hold every device of this process (PyTorch/XLA's type for a mesh check, as
        `Mesh`'s; raised, not asserted, so `python -O` keeps it).
    """
    use_spmd()
    if dt_mesh.device_type != "xla":
        raise ValueError(f"a DeviceMesh of device type {dt_mesh.device_type!r}: DTensor over SPMD takes 'xla'")
    count = len(backend.jax_devices())
    if dt_mesh.size() != count:
        raise AssertionError(f"the DeviceMesh holds {dt_mesh.size()} devices, this process has {count}: an xla "
                         f"DeviceMesh spans every device (DeviceMesh('xla', list(range({count}))))")
    return Mesh(dt_mesh.mesh.flatten().tolist(), tuple(dt_mesh.mesh.size()), dt_mesh.mesh_dim_names)


def convert_to_xla_partition_spec(tensor: torch.Tensor, placements: Sequence) -> tuple:
    """The SPMD partition spec of DTensor placements: `Shard(d)` on mesh dimension i puts i at d.

    Raises:
      ValueError: a placement other than Shard and Replicate (Partial), or a Shard of a dimension the tensor
        lacks.
    """
    spec: list = [None] * tensor.dim()
    for mesh_dim, placement in enumerate(placements):
        if placement.is_shard():
            dim = placement.dim if placement.dim >= 0 else placement.dim + tensor.dim()
            if not 0 <= dim < tensor.dim():
                raise ValueError(f"placement {placement} on mesh dimension {mesh_dim}: the tensor has "
                                 f"{tensor.dim()} dimension(s)")
            spec[dim] = mesh_dim
        elif not placement.is_replicate():
            raise ValueError(f"Unsupported placement type: {type(placement).__name__} (DTensor over SPMD takes "
                             "Shard and Replicate)")
    return tuple(spec)


def dtensor_spec(t):
    """The DTensorSpec of an `XLAShardedTensor`'s mark: its mesh as a DeviceMesh of type `xla`, a placement per
    mesh dimension (`Shard(d)` where the partition spec puts that mesh axis at d, else `Replicate()`), its meta.

    Raises:
      ValueError: the wrapper knows no mesh shape or no partition spec.
    """
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
    from torch.distributed.tensor.placement_types import Replicate, Shard

    if t.mesh_shape is None or t.partition_spec is None:
        missing = "mesh_shape" if t.mesh_shape is None else "partition_spec"
        raise ValueError(f"the XLAShardedTensor has no {missing}, so it has no DTensor placements: mark it with "
                         "mark_sharding, or wrap it with wrap_as_sharded_tensor(t, mesh_shape, partition_spec)")
    mesh = t.mesh
    ids = torch.tensor([int(i) for i in mesh.device_ids]) if mesh is not None else \
        torch.arange(int(torch.tensor(t.mesh_shape).prod()))
    names = tuple(mesh.axis_names) if mesh is not None and mesh.axis_names else None
    placements = [Replicate() for _ in t.mesh_shape]
    for dim, entry in enumerate(t.partition_spec):
        for axis in (entry if isinstance(entry, (tuple, list)) else (entry,)):
            if axis is not None:
                placements[names.index(axis) if isinstance(axis, str) else int(axis)] = Shard(dim)
    device_mesh = DeviceMesh("xla", ids.reshape(tuple(t.mesh_shape)), mesh_dim_names=names)
    meta = TensorMeta(shape=t.shape, stride=t.stride(), dtype=t.dtype)
    return DTensorSpec(mesh=device_mesh, placements=tuple(placements), tensor_meta=meta)


def redistribute_spec(whole: torch.Tensor, device_mesh, placements: Sequence) -> tuple[Mesh, tuple]:
    """The mesh and partition spec `XLAShardedTensor.redistribute` marks `whole` with (see there).

    Raises:
      ValueError, IndexError, NotImplementedError: as `XLAShardedTensor.redistribute`.
    """
    from torch.distributed.tensor.placement_types import Partial

    mesh = device_mesh if isinstance(device_mesh, Mesh) else convert_to_xla_mesh(device_mesh)
    if len(placements) != len(mesh.mesh_shape):
        raise ValueError(f"Number of placements ({len(placements)}) must match mesh dimensions "
                         f"({len(mesh.mesh_shape)})")
    if any(isinstance(p, Partial) for p in placements):
        raise NotImplementedError("a Partial placement (values still to be reduced) is not supported: use Shard "
                                  "or Replicate")
    for p in placements:
        if p.is_shard() and not -whole.dim() <= p.dim < whole.dim():
            raise IndexError(f"Shard dimension {p.dim} is out of bounds for a tensor of {whole.dim()} dimensions")
    return mesh, convert_to_xla_partition_spec(whole, placements)
