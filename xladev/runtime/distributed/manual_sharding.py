"""Manual sharding: a region of an SPMD graph written per device (PyTorch/XLA's `xs.enable_manual_sharding`).

    x_local = enable_manual_sharding(x, ("data", None))        # each device's piece: shape (8 / 4, 8)
    y_local = some_per_device_computation(x_local.global_tensor)
    y = disable_manual_sharding(y_local, ("data", None), x.shape)   # the whole again, split as the spec says

Between the two calls the ops see one device's piece, as in a custom kernel or a collective written per device.
The region is recorded like any other ops (with the pieces' shapes) between an `xla::spmd_full_to_shard_shape`
node per input and the `xla::spmd_shard_to_full_shape` node that ends it; the lowering (manual_regions.py) runs it
as one `jax.shard_map` over the mesh, its inputs split as their specs say and its result put back together as the
end's spec says. A value the region computes is used outside it only through `disable_manual_sharding`. In
autograd the start and the end swap: the backward of a region is a region of its own, from the gradient split into
pieces to the input's gradient put back (the forward values it reads are computed again inside it).
"""

from __future__ import annotations

from typing import Sequence

import torch

from xladev.errors import XladevError
from xladev.runtime.distributed.sharded_tensor import XLAShardedTensor, mark_sharding, unwrap, wrap
from xladev.runtime.distributed.spmd_sharding import (
    _partition_spec, _require_spmd, in_manual_region, jax_named, manual_regions, own_split, split_counts,
)
from xladev.runtime.graph.ir import FULL_TO_SHARD_OP_NAME, SHARD_TO_FULL_OP_NAME, SLOT, Meta, Node, OpDef
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.spmd_mesh import Mesh, get_global_mesh
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.record.tensor import wrap as wrap_tensor


def _lowered_by_its_region(ctx, x, *params):
    # graph_function (manual_regions.py) never lowers a region's start or end as a node: it runs the region's ops
    # inside a shard_map, or refuses a start without its end.
    raise AssertionError(f"{ctx.node.op.name} is lowered with its manual region, never alone")


FULL_TO_SHARD = OpDef(FULL_TO_SHARD_OP_NAME, _lowered_by_its_region, params=("input", "mesh", "spec"))
SHARD_TO_FULL = OpDef(SHARD_TO_FULL_OP_NAME, _lowered_by_its_region, params=("input", "mesh", "spec", "full_shape"))


class ManualShardingError(XladevError, ValueError, RuntimeError):
    """A manual region used wrongly: a spec that does not divide the shape, an end with no start (a RuntimeError
    too, as PyTorch/XLA's bindings raise)."""


def _mesh(mesh: Mesh | None, name: str) -> Mesh:
    mesh = mesh if mesh is not None else get_global_mesh()
    if mesh is None:
        raise ManualShardingError(f"{name}: no mesh: pass mesh=, or set one with xs.set_global_mesh(mesh)")
    return mesh


def _record(op: OpDef, t: XlaTensor, template, shape: tuple) -> XlaTensor:
    meta = Meta(tuple(shape), t.dtype)
    node = Node(op, (t._node(),), template, meta, *recorder.debug_info())
    recorder.count(op.name)
    return wrap_tensor(Storage(node, t._st.device_index), meta)


class _Start(torch.autograd.Function):
    """A region's start in autograd: its gradient is the end of the backward's own region (pieces put back)."""

    @staticmethod
    def forward(ctx, t, mesh_key, spec, piece, full):
        ctx.mesh_key, ctx.spec, ctx.full = mesh_key, spec, full
        manual_regions[0] = True
        return _record(FULL_TO_SHARD, t, ((SLOT, mesh_key, spec), ()), piece)

    @staticmethod
    def backward(ctx, grad):
        whole = _record(SHARD_TO_FULL, grad, ((SLOT, ctx.mesh_key, ctx.spec, ctx.full), ()), ctx.full)
        return whole, None, None, None, None


class _End(torch.autograd.Function):
    """A region's end in autograd: its gradient starts the backward's own region (split into pieces again)."""

    @staticmethod
    def forward(ctx, t, mesh_key, spec, full, piece):
        ctx.mesh_key, ctx.spec, ctx.piece = mesh_key, spec, piece
        return _record(SHARD_TO_FULL, t, ((SLOT, mesh_key, spec, full), ()), full)

    @staticmethod
    def backward(ctx, grad):
        piece = _record(FULL_TO_SHARD, grad, ((SLOT, ctx.mesh_key, ctx.spec), ()), ctx.piece)
        return piece, None, None, None, None


def enable_manual_sharding(t: torch.Tensor, partition_spec: Sequence, *, mesh: Mesh | None = None) -> XLAShardedTensor:
    """Starts a manual region: `t` split over the mesh as `partition_spec` says, each device seeing its piece.

    Args:
      t: a device tensor (or an `XLAShardedTensor`).
      partition_spec: per dimension, the mesh axis it is split along, or None (as `mark_sharding` takes it).
      mesh: the mesh; default the global mesh (`xs.set_global_mesh`).

    Returns:
      An `XLAShardedTensor` whose `global_tensor` is one device's piece (its shape divided by the split).

    Raises:
      RuntimeError: SPMD mode is off. ManualShardingError: no mesh, or a split that does not divide the shape.
    """
    _require_spmd("enable_manual_sharding")
    mesh = _mesh(mesh, "enable_manual_sharding")
    t = unwrap(mark_sharding(t, mesh, partition_spec))
    spec = tuple(_partition_spec(mesh, partition_spec, t.dim()))
    counts = split_counts(jax_named(mesh.key(), spec), t.dim())
    if any(size % count for size, count in zip(t.shape, counts)):
        raise ManualShardingError(f"enable_manual_sharding: partition_spec {tuple(partition_spec)} splits shape "
                                  f"{tuple(t.shape)} into {counts} pieces per dimension, which do not divide it")
    piece = tuple(size // count for size, count in zip(t.shape, counts))
    local = _Start.apply(t, mesh.key(), spec, piece, tuple(t.shape))
    return wrap(local, mesh.mesh_shape, tuple(partition_spec))


def disable_manual_sharding(t: torch.Tensor, partition_spec: Sequence, full_shape: Sequence[int], *,
                            mesh: Mesh | None = None) -> XLAShardedTensor:
    """Ends a manual region: each device's piece `t` put back together as `partition_spec` says.

    Args:
      t: a device tensor computed inside the region (or an `XLAShardedTensor`).
      partition_spec: how the pieces make the whole.
      full_shape: the whole's shape.
      mesh: the mesh; default the global mesh.

    Returns:
      An `XLAShardedTensor` of the whole, split over the mesh as `partition_spec` says.

    Raises:
      RuntimeError: SPMD mode is off. ManualShardingError: no mesh, `t` computed outside a region, or pieces
        that do not make `full_shape`.
    """
    _require_spmd("disable_manual_sharding")
    mesh = _mesh(mesh, "disable_manual_sharding")
    t = unwrap(t)
    if not isinstance(t, XlaTensor):
        raise TypeError(f"disable_manual_sharding takes an xla tensor, got a {type(t).__name__} on {t.device}")
    full_shape = tuple(int(s) for s in full_shape)
    spec = tuple(_partition_spec(mesh, partition_spec, len(full_shape)))
    counts = split_counts(jax_named(mesh.key(), spec), len(full_shape))
    if tuple(s * c for s, c in zip(t.shape, counts)) != full_shape:
        raise ManualShardingError(f"disable_manual_sharding: pieces of shape {tuple(t.shape)} split as "
                                  f"{tuple(partition_spec)} ({counts} per dimension) do not make {full_shape}")
    if not in_manual_region(t._node()):
        raise ManualShardingError("disable_manual_sharding: the tensor was not computed inside a manual region "
                                  "(from a tensor enable_manual_sharding returned)")
    whole = _End.apply(t, mesh.key(), spec, full_shape, tuple(t.shape))
    return mark_sharding(whole, mesh, partition_spec)


# ---------------------------------------------------------------- PyTorch/XLA's bindings of the same region
# `torch_xla._XLAC._spmd_full_to_shard_shape(t)` starts the region split as `t`'s own mark says,
# `xs._mark_manual_sharding(piece)` names a piece manual, and `_XLAC._spmd_shard_to_full_shape(piece, op_sharding,
# shape, dtype)` ends it. They make the same region as `enable_manual_sharding`/`disable_manual_sharding`.

def full_to_shard_shape(t: torch.Tensor) -> torch.Tensor:
    """A manual region's start for a tensor split by `mark_sharding`: each device's piece, as that split says.

    Args:
      t: a device tensor with a sharding of its own (`mark_sharding`).

    Returns:
      One device's piece (a tensor of the piece's shape).

    Raises:
      ManualShardingError (a RuntimeError, as PyTorch/XLA's): `t` has no sharding of its own.
    """
    _require_spmd("_spmd_full_to_shard_shape")
    t = unwrap(t)
    own = own_split(t) if isinstance(t, XlaTensor) else None
    if own is None:
        raise ManualShardingError("_spmd_full_to_shard_shape: the tensor has no sharding of its own: give it one "
                                  "with xs.mark_sharding(t, mesh, partition_spec) first")
    mesh_key, spec = own
    counts = split_counts(jax_named(mesh_key, spec), t.dim())
    piece = tuple(size // count for size, count in zip(t.shape, counts))
    return _Start.apply(t, mesh_key, spec, piece, tuple(t.shape))


def mark_manual(t: torch.Tensor) -> XLAShardedTensor:
    """Names a value computed inside a manual region as such (`{manual}`); the region itself needs no mark.

    Raises:
      ManualShardingError (a RuntimeError): `t` is not computed inside a manual region (device data, or a value
        computed outside one: xladev's regions start at `_spmd_full_to_shard_shape` or `enable_manual_sharding`).
    """
    inner = unwrap(t)
    if not isinstance(inner, XlaTensor) or not in_manual_region(inner._node()):
        raise ManualShardingError("_mark_manual_sharding: the tensor is not computed inside a manual region: start "
                                  "one with _spmd_full_to_shard_shape(t) or xs.enable_manual_sharding(t, spec)")
    return wrap(inner)


def shard_to_full_shape(t: torch.Tensor, op_sharding, full_shape: Sequence[int]) -> torch.Tensor:
    """A manual region's end: the pieces `t` put back together as `op_sharding` (`mesh.get_op_sharding(spec)`) says.

    Raises:
      ManualShardingError (a RuntimeError): `t` is not computed inside a manual region, `op_sharding` is not a
        mesh's, or the pieces do not make `full_shape`.
    """
    mesh, spec = getattr(op_sharding, "mesh", None), getattr(op_sharding, "partition_spec", None)
    if not isinstance(mesh, Mesh) or spec is None:
        raise ManualShardingError(f"_spmd_shard_to_full_shape: {op_sharding!r} names no mesh: pass "
                                  "mesh.get_op_sharding(partition_spec)")
    return unwrap(disable_manual_sharding(t, spec, full_shape, mesh=mesh))
