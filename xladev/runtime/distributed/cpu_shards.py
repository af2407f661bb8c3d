"""A sharded device tensor made from each device's piece on the CPU (PyTorch/XLA's
`torch_xla._XLAC._global_tensor_from_cpu_shards`, which distributed checkpoint loaders call).

The pieces come one per device, in device order, as `local_shards` gives them: padded to the full piece's
shape where the split does not divide the global shape. The global shape defaults to the pieces' shape times
each dimension's number of pieces; a smaller one leaves the excess as padding, as long as each dimension's
pieces are still its size divided by their number, rounded up (PyTorch/XLA's rule: less than a piece of
padding, none on a dimension that is not split).
"""

from __future__ import annotations

import numpy as np
import torch

from xladev.runtime.graph import backend
from xladev.runtime.graph.ir import DataNode, Meta
from xladev.runtime.graph.spmd_mesh import OpSharding
from xladev.runtime.distributed.sharded_tensor import _padded_places
from xladev.runtime.distributed.spmd_sharding import (
    _partition_spec, _require_spmd, divides, piece_shape, sharding_text, split_counts,
)
from xladev.runtime.record.tensor import XlaTensor, new_tensor


def global_tensor_from_cpu_shards(shards: list[torch.Tensor], op_sharding: OpSharding,
                                  global_shape: torch.Size | None = None) -> XlaTensor:
    """The device tensor whose pieces are `shards`, split as `op_sharding` says.

    Args:
      shards: one CPU tensor per device, in device order, each the full (padded) piece's shape.
      op_sharding: `mesh.get_op_sharding(partition_spec)`.
      global_shape: the whole tensor's shape (default: the pieces' shape times their number per dimension).

    Returns:
      The tensor on the device, split as asked (held whole where the split does not divide the shape).

    Raises:
      RuntimeError: SPMD mode is off, another number of pieces than devices, pieces of different shapes or
        dtypes, or a global shape the pieces cannot make (another rank, too large, or so small that a piece
        would be padding only where the last pieces' padding does not cover it).
      TypeError: `op_sharding` is not what `Mesh.get_op_sharding` gives.
    """
    import jax

    _require_spmd("_global_tensor_from_cpu_shards")
    if not isinstance(op_sharding, OpSharding):
        raise TypeError(f"_global_tensor_from_cpu_shards takes mesh.get_op_sharding(partition_spec), got "
                        f"{type(op_sharding).__name__}")
    devices = len(backend.jax_devices())
    if len(shards) != devices:
        raise RuntimeError(f"_global_tensor_from_cpu_shards: {len(shards)} shards for {devices} devices: give one "
                           "per device, in device order")
    piece, dtype = tuple(shards[0].shape), shards[0].dtype
    if any(tuple(s.shape) != piece or s.dtype != dtype for s in shards):
        raise RuntimeError("_global_tensor_from_cpu_shards: the shards differ in shape or dtype: "
                           f"{sorted({(tuple(s.shape), str(s.dtype)) for s in shards})}")
    wanted = op_sharding.partition_spec
    if all(entry is None for entry in wanted):  # replicated: a sharding of any rank, as PyTorch/XLA's OpSharding
        wanted = (None,) * len(piece)
    spec = _partition_spec(op_sharding.mesh, wanted, len(piece))
    sharding = jax.sharding.NamedSharding(op_sharding.mesh.jax_mesh(), spec)
    counts = split_counts(sharding, len(piece))
    full = tuple(p * c for p, c in zip(piece, counts))
    shape = full if global_shape is None else tuple(int(n) for n in global_shape)
    # Each split dimension's pieces are ceil(size / pieces) long, as a split pads them: nothing else fits.
    if len(shape) != len(piece) or piece_shape(sharding, shape) != piece:
        raise RuntimeError(f"_global_tensor_from_cpu_shards: shards of shape {list(piece)}, {list(counts)} per "
                           f"dimension, cannot make a tensor of shape {list(shape)}: each dimension's pieces are "
                           f"its size divided by their number, rounded up (at most {list(full)})")
    whole = np.empty(shape, dtype=backend.torch_to_numpy(shards[0][:0].contiguous()).dtype)
    for number, _, indices in _padded_places(sharding, shape):
        part = whole[tuple(indices)]
        whole[tuple(indices)] = backend.torch_to_numpy(
            shards[number][tuple(slice(0, n) for n in part.shape)].contiguous())
    even = divides(sharding, shape)
    placed = jax.device_put(whole, sharding if even else
                            jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec()))
    data = DataNode(placed, Meta(shape, dtype))
    data.sharding = sharding_text(sharding, len(shape))
    if not even:
        data.uneven = sharding
    return new_tensor(data, 0)
