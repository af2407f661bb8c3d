"""`XLAShardedTensor`: what `mark_sharding` returns (PyTorch/XLA's `torch_xla.distributed.spmd.XLAShardedTensor`).

A torch.Tensor subclass that wraps the marked device tensor (`global_tensor`): ops on it run on the global
tensor and their tensor results come back wrapped, as in PyTorch/XLA. It adds the sharding's views:
`sharding_spec` (HLO sharding text), `sharding_type` (PyTorch/XLA's `ShardingType`), `local_shards` (each
device's piece, copied to the CPU) and `load_local_shards_` (writes pieces back).

Like PyTorch/XLA's, the class derives from DTensor, so code that asks `isinstance(x, DTensor)` finds one, but
none of DTensor's machinery runs: the data is the global tensor, split by XLA, not a local shard per rank.
DTensor's questions (`_spec`, `placements`, `device_mesh`, `full_tensor`, `redistribute`) are answered from the
mark; `to_local` is refused, naming `local_shards`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Sequence, Union

import numpy as np
import torch
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_map

from xladev.runtime.graph import backend
from xladev.runtime.execute.execution import lock as _execution_lock
from xladev.runtime.graph.ir import DataNode
from xladev.runtime.graph.spmd_mesh import Mesh
from xladev.runtime.distributed.dtensor_placements import dtensor_spec, redistribute_spec
from xladev.runtime.distributed.spmd_sharding import (
    MANUAL, annotate_tensor, device_order, get_sharding_spec, padded_shape, parse_sharding_text, piece_shape,
    shard_tensor, unshard_tensor,
)
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import arrays_of, current_cause, reading


class ShardingType(IntEnum):
    """PyTorch/XLA's sharding kinds (their numbers are XLA's OpSharding.Type)."""

    REPLICATED = 0
    MAXIMAL = 1
    TUPLE = 2
    TILED = 3
    MANUAL = 4
    PARTIAL = 5
    UNKNOWN = 6


def sharding_type(t: torch.Tensor) -> ShardingType | None:
    """`t`'s kind of sharding, None when it has none of its own (PyTorch/XLA's `_get_xla_sharding_type`).

    Read from its sharding text: `{replicated}` is REPLICATED, a tiling whose last dimension replicates is
    PARTIAL, any other tiling TILED, a tiling onto one device MAXIMAL.
    """
    text = get_sharding_spec(t)
    if not text:
        return None
    if text == MANUAL:
        return ShardingType.MANUAL
    parsed = parse_sharding_text(text)
    if parsed is None:
        return ShardingType.REPLICATED
    _, devices, last_replicates = parsed
    if len(devices) == 1:
        return ShardingType.MAXIMAL
    return ShardingType.PARTIAL if last_replicates else ShardingType.TILED


@dataclass
class XLAShard:
    """One device's piece of a sharded tensor, copied to the CPU when `local_shards` was read.

    Attributes:
      data: the piece (with any padding of an uneven split).
      indices: the piece's place in the global tensor, a slice per dimension; Ellipsis when replicated.
      shard_device: the device it came from (`xla:N`, PyTorch/XLA's `SPMD:N` ordinal order).
      replica_id: which copy of its piece it is: 0 for a tiling, the device's number when replicated, the
        replica group's number for a partial replication.
    """

    data: torch.Tensor
    indices: Union[type(Ellipsis), list]
    shard_device: str
    replica_id: int

    def _unpadded(self):
        if self.indices is Ellipsis:
            return Ellipsis
        return tuple(slice(0, s.stop - s.start) for s in self.indices)

    @property
    def unpadded_data(self) -> torch.Tensor:
        """`data` without the padding of an uneven split."""
        return self.data[self._unpadded()]

    @unpadded_data.setter
    def unpadded_data(self, value: torch.Tensor) -> None:
        self.data[self._unpadded()] = value


class XLAShardedTensor(DTensor):
    """A sharded device tensor as PyTorch/XLA's `mark_sharding` returns it.

    Attributes:
      global_tensor: the whole (logical) device tensor that was marked.
      mesh_shape: the mesh's shape of the mark, or None.
      partition_spec: the mark's partition spec, or None.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl
    wraps_xla_tensors = True  # the device's dispatcher leaves ops with one of these to this class

    @staticmethod
    def __new__(cls, elem: torch.Tensor, mesh_shape=None, partition_spec=None, *args, **kwargs):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            layout=elem.layout, device=elem.device, requires_grad=kwargs.get("requires_grad", False))
        r.global_tensor = elem.detach() if r.requires_grad else elem
        r.mesh_shape = mesh_shape or getattr(elem, "mesh_shape", None)
        r.partition_spec = partition_spec or getattr(elem, "partition_spec", None)
        r.mesh = getattr(elem, "mesh", None)  # the mark's Mesh (mark_sharding sets it): device ids, axis names
        return r

    def __init__(self, *args, **kwargs):
        pass

    @property
    def sharding_spec(self) -> str:
        """The sharding as HLO sharding text, '' when the tensor has none."""
        return get_sharding_spec(self.global_tensor)

    @property
    def sharding_type(self) -> ShardingType | None:
        """The kind of sharding (`ShardingType`), None when the tensor has none."""
        return sharding_type(self.global_tensor)

    @property
    def local_shards(self) -> list[XLAShard]:
        """Each device's piece, copied to the CPU, in device order (syncs a pending value first)."""
        t = self.global_tensor
        array = _array_of(t, "local_shards")
        uneven = t._node().uneven
        if uneven is not None:
            return _padded_shards(t, array, uneven)
        return [XLAShard(backend.numpy_to_torch(np.asarray(s.data), t.dtype), indices, f"xla:{number}", replica)
                for s, (number, replica, indices) in zip(*_places(array))]

    def load_local_shards_(self, shards: list[XLAShard]) -> None:
        """Writes these pieces (one per device, as `local_shards` gives them) into the tensor's buffers.

        Raises:
          RuntimeError: the tensor is replicated, a device's piece is missing, or a piece has another shape
            than that device's.
        """
        import jax

        t = self.global_tensor
        array = _array_of(t, "load_local_shards_")
        uneven = t._node().uneven
        if uneven is not None:
            return _load_padded_shards(t, array, uneven, shards)
        if array.sharding.is_fully_replicated:
            raise RuntimeError("load_local_shards_: the tensor is replicated, not sharded: copy a whole value "
                               "into it instead")
        order = device_order()
        devices = backend.jax_devices()
        by_device = {s.shard_device: s for s in shards}
        pieces = []
        for s in array.addressable_shards:
            name = f"xla:{order[s.device.id]}"
            shard = by_device.get(name)
            if shard is None:
                raise RuntimeError(f"load_local_shards_: no shard for {name}: give one for each of the "
                                   f"{len(array.addressable_shards)} devices")
            if tuple(shard.data.shape) != tuple(s.data.shape):
                raise RuntimeError(f"load_local_shards_: the shard for {name} has shape {tuple(shard.data.shape)}, "
                                   f"the device's piece {tuple(s.data.shape)}")
            host = backend.torch_to_numpy(shard.data.detach().to(t.dtype).contiguous())
            pieces.append(jax.device_put(host, devices[order[s.device.id]]))
        loaded = jax.make_array_from_single_device_arrays(array.shape, array.sharding, pieces)
        with _execution_lock:
            node = t._st.value
            data = DataNode(loaded, node.meta)
            data.sharding = node.sharding
            t._st.set(data)

    # DTensor's view of the mark (PyTorch/XLA's class is a DTensor; this one answers the same questions).
    @property
    def _spec(self):
        """The mark as a DTensorSpec (a DeviceMesh of type `xla`, placements, tensor meta).

        Raises:
          ValueError: the wrapper knows no mesh shape or partition spec (wrap it with them, or mark it).
        """
        return dtensor_spec(self)

    @property
    def placements(self) -> tuple:
        """The mark as DTensor placements, one per mesh dimension: `Shard(d)` or `Replicate()`.

        Raises:
          ValueError: as `_spec`.
        """
        return self._spec.placements

    def redistribute(self, device_mesh, placements, *, async_op: bool = False) -> "XLAShardedTensor":
        """The tensor split over `device_mesh` as `placements` say (DTensor's `redistribute`).

        Args:
          device_mesh: an SPMD `Mesh` or a DeviceMesh of type `xla`.
          placements: one `Shard(d)` or `Replicate()` per mesh dimension.
          async_op: split a copy (a new tensor) instead of this one in place.

        Returns:
          A wrapper of the tensor (or of the copy) with the new mark.

        Raises:
          ValueError: another number of placements than mesh dimensions. IndexError: `Shard` of a dimension
          the tensor lacks. NotImplementedError: a `Partial` placement.
        """
        whole = self.global_tensor
        mesh, spec = redistribute_spec(whole, device_mesh, placements)
        # An annotation, as PyTorch/XLA's: the split may differ from the one the data has.
        return annotate_custom_sharding(whole.clone() if async_op else whole, mesh, spec)

    def full_tensor(self) -> torch.Tensor:
        """The whole tensor (DTensor's `full_tensor`): the global tensor, whose split XLA keeps."""
        return self.global_tensor

    def to_local(self, *, grad_placements=None) -> torch.Tensor:
        """Refused: DTensor's local shard is one rank's piece, and under SPMD one process holds every device's.

        Raises:
          NotImplementedError: always, naming `local_shards` (each device's piece) and `global_tensor`.
        """
        raise NotImplementedError("XLAShardedTensor.to_local: under SPMD one process holds every device's piece; "
                                  "use .local_shards for the pieces, or .global_tensor (or full_tensor()) for the "
                                  "whole tensor")

    # Not a traceable subclass for torch.compile (DTensor's flattening names a local shard this class has not):
    # dynamo sees the wrapper as it saw it before it was a DTensor, and its ops run through `__torch_dispatch__`.
    @property
    def __tensor_flatten__(self):
        raise AttributeError("XLAShardedTensor is not flattened for torch.compile")

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"XLAShardedTensor({self.global_tensor!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Ops run on the wrapped tensors; their tensor results come back wrapped, as PyTorch/XLA's do.
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda e: XLAShardedTensor(e) if isinstance(e, torch.Tensor) else e, out)


def mark_sharding(t: torch.Tensor, mesh: Mesh, partition_spec: Sequence) -> XLAShardedTensor:
    """Splits `t` over `mesh` as `partition_spec` says (PyTorch/XLA's `xs.mark_sharding`).

    Args:
      t: a device tensor (not a view), or an `XLAShardedTensor` (its global tensor is marked).
      mesh: the device mesh.
      partition_spec: per dimension of `t`, the mesh axis (number or name, or a tuple of them) it is split
        along, or None to keep it whole.

    Returns:
      An `XLAShardedTensor` wrapping `t` (PyTorch/XLA's return); `t` itself is sharded in place, so code that
      goes on using `t` sees the sharding too.

    Raises:
      RuntimeError: SPMD mode is off, or `t`'s data is split another way already (`clear_sharding` it first, or
        `annotate_custom_sharding`). TypeError: not an xla tensor. ValueError: a view, or a bad spec.
    """
    shard_tensor(unwrap(t), mesh, partition_spec)
    return _wrapped_mark(t, mesh, partition_spec)


def annotate_custom_sharding(t: torch.Tensor, mesh: Mesh, partition_spec: Sequence) -> XLAShardedTensor:
    """Annotates `t` with a split without moving its data: the graphs that read it constrain it to the split
    (PyTorch/XLA's `xs.annotate_custom_sharding`). Unlike `mark_sharding`, `t`'s data may be split another way.

    Args:
      t: a device tensor (not a view), or an `XLAShardedTensor`.
      mesh: the device mesh.
      partition_spec: as `mark_sharding` takes it.

    Returns:
      An `XLAShardedTensor` wrapping `t`.

    Raises:
      RuntimeError: SPMD mode is off. TypeError: not an xla tensor. ValueError: a view, or a bad spec.
    """
    annotate_tensor(unwrap(t), mesh, partition_spec)
    return _wrapped_mark(t, mesh, partition_spec)


def _wrapped_mark(t: torch.Tensor, mesh: Mesh, partition_spec: Sequence) -> XLAShardedTensor:
    """`t` wrapped with the mark it was given (its mesh, shape and partition spec), as both marks return it."""
    wrapper = wrap(t, mesh.mesh_shape, tuple(partition_spec))
    wrapper.mesh = mesh
    return wrapper


def clear_sharding(t: torch.Tensor) -> torch.Tensor:
    """Drops `t`'s sharding: it is replicated on every device again, with no sharding of its own
    (PyTorch/XLA's `xs.clear_sharding`).

    Args:
      t: a device tensor (not a view), or an `XLAShardedTensor`.

    Returns:
      The plain tensor (an `XLAShardedTensor`'s global tensor).

    Raises:
      RuntimeError: SPMD mode is off. TypeError: not an xla tensor. ValueError: a view.
    """
    t = unwrap(t)
    unshard_tensor(t)
    return t


def unwrap(t):
    """An `XLAShardedTensor`'s global tensor; anything else as it is."""
    return t.global_tensor if isinstance(t, XLAShardedTensor) else t


def wrap(t: torch.Tensor, mesh_shape=None, partition_spec=None) -> XLAShardedTensor:
    """`t` as an `XLAShardedTensor` (PyTorch/XLA's `wrap_as_sharded_tensor`): a wrapper is updated in place.

    Args:
      t: a device tensor or an `XLAShardedTensor`.
      mesh_shape: the mark's mesh shape, kept when given.
      partition_spec: the mark's partition spec, kept when given.

    Returns:
      The wrapper.
    """
    if not isinstance(t, XLAShardedTensor):
        return XLAShardedTensor(t, mesh_shape=mesh_shape, partition_spec=partition_spec)
    if mesh_shape is not None:
        t.mesh_shape = mesh_shape
    if partition_spec is not None:
        t.partition_spec = partition_spec
    return t


def wrap_if_sharded(x):
    """`x` wrapped in an `XLAShardedTensor` when it is an xla tensor with a sharding of its own (PyTorch/XLA's
    `xs.wrap_if_sharded`); anything else as it is."""
    if (isinstance(x, torch.Tensor) and not isinstance(x, XLAShardedTensor) and x.device.type == "xla"
            and sharding_type(x) is not None):
        return XLAShardedTensor(x)
    return x


def shard_places(t: torch.Tensor) -> list[tuple[int, int, Union[type(Ellipsis), list]]]:
    """Where each device's piece of `t` lies, in device order, without copying data (syncs a pending value).

    Args:
      t: a device tensor (not a view) or an `XLAShardedTensor`.

    Returns:
      One (device number N of `xla:N`, replica id, indices) per device, as `local_shards` gives them: indices
      are a slice per dimension, or Ellipsis when the tensor is replicated (PyTorch/XLA's
      `_get_local_shard_replica_and_indices`).
    """
    t = unwrap(t)
    array = _array_of(t, "shard_places")
    uneven = t._node().uneven
    return _places(array)[1] if uneven is None else _padded_places(uneven, tuple(array.shape))


def _padded_places(uneven, shape: tuple) -> list[tuple[int, int, list]]:
    """(device number, replica id, indices) per device, in device order, of a split that does not divide
    `shape`: the pieces of the shape padded up to a multiple of each dimension's pieces, cut back to `shape`
    (the last pieces shorter, or empty), as PyTorch/XLA places them."""
    order = device_order()
    by_device = uneven.devices_indices_map(padded_shape(uneven, shape))
    places, copies = [], {}
    for device in sorted(by_device, key=lambda d: order[d.id]):
        indices = [slice(min(i.start or 0, dim), min(dim if i.stop is None else i.stop, dim), 1)
                   for i, dim in zip(by_device[device], shape)]
        key = tuple((i.start, i.stop) for i in indices)
        replica = copies[key] = copies.get(key, -1) + 1
        places.append((order[device.id], replica, indices))
    return places


def _load_padded_shards(t: XlaTensor, array, uneven, shards: list[XLAShard]) -> None:
    """`load_local_shards_` of a split that does not divide the shape: the pieces, padding cut off, make the
    whole value, which goes to every device (the split stays a constraint, as before)."""
    import jax

    whole = np.empty(array.shape, dtype=array.dtype)
    piece = piece_shape(uneven, tuple(array.shape))
    by_device = {s.shard_device: s for s in shards}
    for number, _, indices in _padded_places(uneven, tuple(array.shape)):
        shard = by_device.get(f"xla:{number}")
        if shard is None:
            raise RuntimeError(f"load_local_shards_: no shard for xla:{number}: give one for each of the "
                               f"{len(backend.jax_devices())} devices")
        if tuple(shard.data.shape) != piece:
            raise RuntimeError(f"load_local_shards_: the shard for xla:{number} has shape "
                               f"{tuple(shard.data.shape)}, the device's piece {piece} (padded)")
        whole[tuple(indices)] = backend.torch_to_numpy(shard.unpadded_data.detach().to(t.dtype).contiguous())
    loaded = jax.device_put(whole, array.sharding)
    with _execution_lock:
        node = t._st.value
        data = DataNode(loaded, node.meta)
        data.sharding, data.uneven = node.sharding, node.uneven
        t._st.set(data)


def _padded_shards(t: XlaTensor, array, uneven) -> list[XLAShard]:
    """`local_shards` of a split that does not divide the shape: each device's piece cut from the whole value
    it holds and padded with zeros to the full piece's shape, as PyTorch/XLA's pieces are."""
    whole = np.asarray(array.addressable_shards[0].data)
    piece = piece_shape(uneven, whole.shape)
    shards = []
    for number, replica, indices in _padded_places(uneven, whole.shape):
        part = whole[tuple(indices)]
        padded = np.pad(part, [(0, p - n) for p, n in zip(piece, part.shape)])
        shards.append(XLAShard(backend.numpy_to_torch(padded, t.dtype), indices, f"xla:{number}", replica))
    return shards


def _places(array) -> tuple[list, list]:
    """The array's shards in device order, and for each (device number, replica id, indices)."""
    replicated = array.sharding.is_fully_replicated
    order = device_order()
    shards = sorted(array.addressable_shards, key=lambda s: order[s.device.id])
    places = []
    for s in shards:
        number = order[s.device.id]
        if replicated:
            places.append((number, number, Ellipsis))
        else:
            places.append((number, s.replica_id, [slice(i.start or 0, dim if i.stop is None else i.stop, 1)
                                                   for i, dim in zip(s.index, array.shape)]))
    return shards, places


def _array_of(t, what: str):
    if not isinstance(t, XlaTensor):
        raise TypeError(f"{what} needs an xla tensor, got one on {t.device}")
    if t._chain is not None:
        raise ValueError(f"{what} of a view: use the tensor it views (its base)")
    with reading(what):
        return arrays_of([t], current_cause(what))[0]
