"""Cross-replica ops as XLA collectives: all-reduce, all-gather, reduce-scatter, broadcast, all-to-all, permute.

Each lowers to jax's collective primitives over the replica axis (`world.REPLICA_AXIS`). A graph holding
one is traced inside `jax.shard_map` over the job's replica mesh (graph_lowering.program), so XLA
compiles it into the program as `all-reduce`, `all-gather`, `reduce-scatter`... and PJRT runs it across
the processes (gloo between CPU processes). Nothing here moves data on the host.

Replica groups (PyTorch/XLA's `groups=[[0, 1], [2, 3]]`) are honoured by gathering every replica's value
and combining the members of this replica's group; without groups the native collective runs.
"""

from __future__ import annotations

import functools

from xladev.runtime.graph.ir import OpDef
from xladev.runtime.graph.world import REPLICA_AXIS

# PyTorch/XLA's reduce types (xm.REDUCE_SUM...).
REDUCE_TYPES = ("sum", "mul", "and", "or", "min", "max")


def _jax():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def _member_table(groups: tuple, world: int):
    """(world, group size) int table: row r lists the replicas of r's group; and r's position in its group."""
    import numpy as np

    members = np.zeros((world, len(groups[0])), dtype=np.int32)
    position = np.zeros((world,), dtype=np.int32)
    for group in groups:
        for i, replica in enumerate(group):
            members[replica] = group
            position[replica] = i
    return members, position


def _combine(stacked, reduce_type: str):
    """Reduces axis 0 (the replicas) of `stacked` with one of REDUCE_TYPES."""
    jax, jnp = _jax()
    if reduce_type == "sum":
        return jnp.sum(stacked, axis=0, dtype=stacked.dtype)
    if reduce_type == "mul":
        return jnp.prod(stacked, axis=0, dtype=stacked.dtype)
    if reduce_type == "min":
        return jnp.min(stacked, axis=0)
    if reduce_type == "max":
        return jnp.max(stacked, axis=0)
    op = jnp.logical_and if stacked.dtype == jnp.bool_ else jnp.bitwise_and
    if reduce_type == "or":
        op = jnp.logical_or if stacked.dtype == jnp.bool_ else jnp.bitwise_or
    return functools.reduce(op, [stacked[i] for i in range(stacked.shape[0])])


def _group_values(x, groups: tuple, world: int):
    """Every member of this replica's group's `x`, stacked on a new axis 0 (all replicas when no groups)."""
    jax, jnp = _jax()
    gathered = jax.lax.all_gather(x, REPLICA_AXIS)
    if not groups:
        return gathered
    members, _ = _member_table(groups, world)
    return gathered[jnp.asarray(members)[jax.lax.axis_index(REPLICA_AXIS)]]


def _reduce(x, reduce_type: str, groups: tuple, world: int):
    jax, jnp = _jax()
    if not groups and x.dtype != jnp.bool_:
        native = {"sum": jax.lax.psum, "min": jax.lax.pmin, "max": jax.lax.pmax}.get(reduce_type)
        if native is not None:
            return native(x, REPLICA_AXIS)
    return _combine(_group_values(x, groups, world), reduce_type)


def _scaled(value, scale: float, dtype):
    if scale == 1.0:
        return value
    return (value * scale).astype(dtype)


def _lower_all_reduce(ctx, inputs, reduce_type, scale, groups, world):
    # One node for a list of tensors (PyTorch/XLA's coalesced in-place all-reduce): one output per input.
    return tuple(_scaled(_reduce(x, reduce_type, groups, world), scale, x.dtype) for x in inputs)


def _lower_all_gather(ctx, x, dim, groups, world):
    jax, jnp = _jax()
    if not groups:
        return jax.lax.all_gather(x, REPLICA_AXIS, axis=dim, tiled=True)
    stacked = _group_values(x, groups, world)
    return jnp.concatenate([stacked[i] for i in range(stacked.shape[0])], axis=dim)


def _lower_all_gather_coalesced(ctx, inputs, dim, groups, world):
    # One node for a list of tensors (PyTorch/XLA's all_gather of a list): one output per input.
    return tuple(_lower_all_gather(ctx, x, dim, groups, world) for x in inputs)


def _lower_reduce_scatter(ctx, x, reduce_type, scale, dim, shard_count, groups, world):
    jax, jnp = _jax()
    if not groups and reduce_type == "sum" and x.dtype != jnp.bool_:
        out = jax.lax.psum_scatter(x, REPLICA_AXIS, scatter_dimension=dim, tiled=True)
    else:
        reduced = _combine(_group_values(x, groups, world), reduce_type)
        if groups:
            _, position = _member_table(groups, world)
            index = jnp.asarray(position)[jax.lax.axis_index(REPLICA_AXIS)]
        else:
            index = jax.lax.axis_index(REPLICA_AXIS)
        chunk = x.shape[dim] // shard_count
        out = jax.lax.dynamic_slice_in_dim(reduced, index * chunk, chunk, axis=dim)
    return _scaled(out, scale, x.dtype)


def _lower_reduce_scatter_coalesced(ctx, inputs, reduce_type, scale, dim, shard_count, groups, world):
    # One node for a list of tensors (PyTorch/XLA's reduce_scatter of a list): one output per input.
    return tuple(_lower_reduce_scatter(ctx, x, reduce_type, scale, dim, shard_count, groups, world) for x in inputs)


def _lower_broadcast(ctx, inputs, root, groups, world):
    # Every replica but the root contributes zeros to a sum, so all get the root's values in one collective.
    jax, jnp = _jax()
    is_root = jax.lax.axis_index(REPLICA_AXIS) == root
    out = []
    for x in inputs:
        wide = x.astype(jnp.int32) if x.dtype == jnp.bool_ else x
        total = _reduce(jnp.where(is_root, wide, jnp.zeros_like(wide)), "sum", groups, world)
        out.append(total.astype(x.dtype))
    return tuple(out)


def _lower_all_to_all(ctx, x, split_dimension, concat_dimension, split_count, world):
    jax, _ = _jax()
    return jax.lax.all_to_all(x, REPLICA_AXIS, split_dimension, concat_dimension, tiled=True)


def _lower_permute(ctx, x, pairs, world):
    jax, _ = _jax()
    return jax.lax.ppermute(x, REPLICA_AXIS, perm=[tuple(p) for p in pairs])


# PyTorch/XLA's IR names (its lazy nodes print as xla::all_reduce, xla::all_gather...). `world` (the replicas
# of the job) is a constant of each: a graph compiled for one job size is not another's.
ALL_REDUCE = OpDef("xla::all_reduce", _lower_all_reduce, multi_output=True, collective=True,
                   params=("inputs", "reduce_type", "scale", "groups", "world"))
ALL_GATHER = OpDef("xla::all_gather", _lower_all_gather, collective=True, params=("input", "dim", "groups", "world"))
REDUCE_SCATTER = OpDef("xla::reduce_scatter", _lower_reduce_scatter, collective=True,
                       params=("input", "reduce_type", "scale", "scatter_dim", "shard_count", "groups", "world"))
ALL_GATHER_COALESCED = OpDef("xla::all_gather_coalesced", _lower_all_gather_coalesced, multi_output=True,
                             collective=True, params=("inputs", "dim", "groups", "world"))
REDUCE_SCATTER_COALESCED = OpDef("xla::reduce_scatter_coalesced", _lower_reduce_scatter_coalesced, multi_output=True,
                                 collective=True,
                                 params=("inputs", "reduce_type", "scale", "scatter_dim", "shard_count", "groups",
                                         "world"))
BROADCAST = OpDef("xla::collective_broadcast", _lower_broadcast, multi_output=True, collective=True,
                  params=("inputs", "root", "groups", "world"))
ALL_TO_ALL = OpDef("xla::all_to_all", _lower_all_to_all, collective=True,
                   params=("input", "split_dimension", "concat_dimension", "split_count", "world"))
COLLECTIVE_PERMUTE = OpDef("xla::collective_permute", _lower_permute, collective=True,
                           params=("input", "pairs", "world"))
