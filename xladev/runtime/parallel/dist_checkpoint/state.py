"""A state dict as distributed checkpoints see it: which values are split over devices, where each piece lies,
and CPU copies of them.

A value is *sharded* when it is an xla tensor whose sharding is more than one replicated whole (PyTorch/XLA's
test: `XLAShardedTensor` and `sharding_type != REPLICATED`), or `CpuShards` (its pieces already copied to the
CPU, what `save_async` writes from while training goes on). The planners write each distinct piece of a
sharded value once and read each device's piece back; every other value goes through torch's default
planning.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch.distributed.checkpoint._traverse import set_element, traverse_state_dict  # noqa: F401 (API here)
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

from xladev.errors import XladevError
from xladev.runtime.distributed.sharded_tensor import (
    ShardingType, XLAShard, XLAShardedTensor, shard_places, sharding_type, unwrap, wrap_if_sharded,
)
from xladev.runtime.api import training
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import arrays_of, current_cause, download


class CheckpointError(XladevError, ValueError):
    """A checkpoint that does not fit what is asked of it: another shape or world size, a missing value, a
    step with no complete checkpoint, or a bad argument of the checkpoint API."""


@dataclasses.dataclass
class CpuShards:
    """A sharded tensor's distinct pieces, copied to the CPU (PyTorch/XLA's `_CpuShards`).

    Attributes:
      shards: one `XLAShard` per distinct piece (the first replica of each).
      global_shape: the whole tensor's shape.
    """

    shards: list[XLAShard]
    global_shape: torch.Size


def is_sharded(value: Any) -> bool:
    """Whether `value` is split over devices: an xla tensor (or `XLAShardedTensor`) with a sharding other than
    replicated, or `CpuShards`."""
    if isinstance(value, CpuShards):
        return True
    if not isinstance(value, torch.Tensor) or value.device.type != "xla":
        return False
    kind = sharding_type(unwrap(value))
    return kind is not None and kind != ShardingType.REPLICATED


def chunk(indices: list) -> ChunkStorageMetadata:
    """The checkpoint chunk of a piece at `indices` (a slice per dimension)."""
    return ChunkStorageMetadata(offsets=torch.Size(i.start for i in indices),
                                sizes=torch.Size(i.stop - i.start for i in indices))


def distinct_chunks(t: torch.Tensor) -> list[ChunkStorageMetadata]:
    """The chunks of `t`'s distinct pieces (a replicated copy of a piece is left out), in device order."""
    return [chunk(indices) for _, replica, indices in shard_places(t) if replica == 0]


def device_chunks(t: torch.Tensor) -> list[ChunkStorageMetadata]:
    """The chunk of every device's piece of `t`, replicas included, in device order."""
    return [chunk(indices) for _, _, indices in shard_places(t)]


def flatten(state_dict: dict) -> tuple[dict, dict]:
    """A nested state dict as one level, keys joined by dots, and each key's path in the original.

    `CpuShards` count as values, like tensors (torch's own flattening would take a list of them for one
    opaque object).

    Returns:
      (flat state dict, {flat key: path}).

    Raises:
      CheckpointError: two paths flatten to the same key.
    """
    flat: dict = {}
    paths: dict = {}

    def visit(path: tuple, value: Any) -> None:
        key = ".".join(map(str, path))
        if key in flat:
            raise CheckpointError(f"the state dict has two values at {key!r} once flattened (keys are joined by "
                                  "dots): rename one")
        flat[key] = value
        paths[key] = path

    traverse_state_dict(state_dict, visit, keep_traversing=lambda v: isinstance(v, (torch.Tensor, CpuShards)))
    return flat, paths


def split(state_dict: dict, sharded_test: Callable[[Any], bool] = is_sharded) -> tuple[dict, dict, dict]:
    """Flattens `state_dict` and splits its values into the sharded ones (wrapped as `XLAShardedTensor` or
    `CpuShards`) and the rest (plain tensors, an `XLAShardedTensor`'s global tensor, other objects).

    Returns:
      (sharded, unsharded, paths), the first two keyed by flat key.
    """
    flat, paths = flatten(state_dict)
    flat = {k: wrap_if_sharded(v) for k, v in flat.items()}
    sharded = {k: v for k, v in flat.items() if sharded_test(v)}
    unsharded = {k: unwrap(v) for k, v in flat.items() if k not in sharded}
    return sharded, unsharded, paths


def first_replicas(t: XLAShardedTensor) -> list[XLAShard]:
    """CPU copies of `t`'s distinct pieces (the first replica of each), in device order."""
    return [s for s in t.local_shards if s.replica_id == 0]


def sharded_cpu_state_dict(state_dict: Any) -> Any:
    """The state dict with its device values copied to the CPU: a sharded tensor as `CpuShards` (its distinct
    pieces), any other xla tensor as a CPU tensor (PyTorch/XLA's `_sharded_cpu_state_dict`).

    Pending values are computed first, in one graph; the structure and every other value stay as they are.
    """
    leaves, spec = torch.utils._pytree.tree_flatten(state_dict)
    device = [unwrap(v) for v in leaves if isinstance(unwrap(v), XlaTensor)]
    if device:
        download_all(device)  # one graph for whatever is pending, before the pieces are read one by one
    plain = iter(download([v for v in device if not is_sharded(v)], "a checkpoint's CPU copy"))

    def to_cpu(value):
        if isinstance(unwrap(value), XlaTensor):
            if is_sharded(value):
                wrapped = wrap_if_sharded(unwrap(value))
                return CpuShards(first_replicas(wrapped), wrapped.size())
            return next(plain)
        return value

    return torch.utils._pytree.tree_unflatten([to_cpu(v) for v in leaves], spec)


def download_all(tensors: list) -> None:
    """Computes every pending tensor of `tensors` in one graph (nothing is copied)."""
    arrays_of(tensors, current_cause("a checkpoint"))


def prime_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Creates the optimizer's state by one step with zero gradients, so that a checkpoint can be loaded into
    it in place (PyTorch/XLA's `prime_optimizer`). The step may change the parameters (weight decay): call it
    just before restoring them.

    Returns:
      The optimizer.
    """
    training.sync()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
    optimizer.step()
    training.sync()
    training.wait_device_ops()
    return optimizer
