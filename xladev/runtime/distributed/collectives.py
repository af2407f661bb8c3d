"""Collectives across the job's replicas, recorded into the step's graph as XLA collectives.

`all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`, `all_to_all` and `collective_permute` record a
node (lowering/collective_ops.py) on this process's `xla:0` like any op; the graph holding it is compiled as
one program over the replica mesh, so the collective runs inside XLA when the step runs (graph_lowering).
Signatures and results follow PyTorch/XLA's `xm.*`: with one replica they do what PyTorch/XLA does at
world size 1 (`all_reduce` returns a copy, without applying `scale`). `barrier` and `rendezvous` run a
small collective graph at once, as PyTorch/XLA's `xm.rendezvous` does.
"""

from __future__ import annotations

import io
from typing import Any, Callable, Sequence

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.distributed import collective_lists, subgroup_rendezvous
from xladev.runtime.distributed.collective_args import global_ordinal, local_ordinal, world_size  # noqa: F401  (xladev's API)
from xladev.runtime.distributed.collective_args import check_reduce_type as _check_reduce_type
from xladev.runtime.distributed.collective_args import checked_dim as _checked_dim
from xladev.runtime.distributed.collective_args import device_tensors as _device_tensors
from xladev.runtime.distributed.collective_args import group_size as _group_size
from xladev.runtime.distributed.collective_args import into as _into
from xladev.runtime.distributed.collective_args import record as _record
from xladev.runtime.distributed.collective_args import replica_groups as _groups
from xladev.runtime.distributed.collective_args import site as _site
from xladev.runtime.execute.execution import lock as _execution_lock
from xladev.runtime.graph.ir import SLOT, Meta, getitem
from xladev.runtime.lowering import collective_ops as ops
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import download, sync_cause

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = ops.REDUCE_TYPES


# ---- the collectives -------------------------------------------------------------------------------
def all_reduce(reduce_type: str, inputs, scale: float = 1.0, groups=None, pin_layout: bool = True):
    """Reduces `inputs` across the replicas (PyTorch/XLA's `xm.all_reduce`).

    Args:
      reduce_type: 'sum', 'mul', 'and', 'or', 'min' or 'max' (`xladev.REDUCE_SUM`...).
      inputs: a tensor, or a list of tensors reduced in place (in one collective).
      scale: multiplies the result.
      groups: replica groups, e.g. [[0, 1], [2, 3]]; None for all replicas.
      pin_layout: accepted for PyTorch/XLA's signature (XLA picks layouts here).

    Returns:
      A new tensor holding the reduced value, or the list `inputs`, updated.

    Raises:
      ValueError: an unknown reduce type or bad groups. TypeError: not xla tensors, or and/or on floats.
    """
    if torch.compiler.is_compiling():  # TorchDynamo traces this: the op it can put in its graph
        return traced.all_reduce(reduce_type, inputs, scale, groups, pin_layout)
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs] if single else list(inputs)
    results = reduced(reduce_type, tensors, scale, groups)
    if results is None:
        return inputs.clone() if single else inputs  # PyTorch/XLA: nothing is reduced with one replica
    if single:
        return results[0]
    with _execution_lock:
        for t, result in zip(tensors, results):
            t._assign(result._st.value)
    return inputs


def reduced(reduce_type: str, tensors: list, scale: float = 1.0, groups=None) -> list[XlaTensor] | None:
    """New tensors holding `tensors` reduced across the replicas, in one collective; None with one replica
    (nothing is reduced). `all_reduce`'s core, checks included.

    Raises:
      ValueError: an unknown reduce type or bad groups. TypeError: not xla tensors, or and/or on floats.
    """
    name = "all_reduce"
    _check_reduce_type(reduce_type, name)
    _device_tensors(tensors, name)
    if world_size() == 1:
        return None
    if reduce_type in (REDUCE_AND, REDUCE_OR) and any(t.dtype.is_floating_point or t.dtype.is_complex for t in tensors):
        raise TypeError(f"{name}: reduce_type '{reduce_type}' needs integer or bool tensors")
    groups = _groups(groups, name)
    if not tensors:
        return []
    site = _site()
    with _execution_lock:
        metas = tuple(Meta(tuple(t.shape), t.dtype) for t in tensors)
        node = _record(ops.ALL_REDUCE, [t._node() for t in tensors],
                       ((SLOT,) * len(tensors), reduce_type, float(scale), groups, world_size()), metas, site)
        return [XlaTensor(Storage(getitem(node, i), 0), meta) for i, meta in enumerate(metas)]


def all_gather(value: torch.Tensor, dim: int = 0, groups=None, output: torch.Tensor | None = None,
               pin_layout: bool = True) -> torch.Tensor:
    """Concatenates every replica's `value` along `dim`, in replica order (PyTorch/XLA's `xm.all_gather`).

    Args:
      value: this replica's tensor, or a list of tensors gathered in one collective (collective_lists.py).
      dim: the dimension to concatenate along.
      groups: replica groups; each replica gathers its own group's values, in the group's order.
      output: a tensor to write the result into (returned); a list of them for a list.
      pin_layout: accepted for PyTorch/XLA's signature.

    Returns:
      The gathered tensor (`output` when given); a list for a list.
    """
    if torch.compiler.is_compiling():  # TorchDynamo traces this: the op it can put in its graph
        return traced.all_gather(value, dim, groups, output, pin_layout)
    name = "all_gather"
    if not isinstance(value, torch.Tensor):
        return collective_lists.all_gather(value, dim, groups, output)
    _device_tensors([value], name)
    dim = _checked_dim(value, dim, name)
    if world_size() == 1:
        result = value.clone()
    else:
        groups = _groups(groups, name)
        shape = list(value.shape)
        shape[dim] *= _group_size(groups)
        meta = Meta(tuple(shape), value.dtype)
        with _execution_lock:
            node = _record(ops.ALL_GATHER, [value._node()], (SLOT, dim, groups, world_size()), meta, _site())
            result = XlaTensor(Storage(node, 0), meta)
    return _into(output, result, name)


def reduce_scatter(reduce_type: str, input: torch.Tensor, scale: float, scatter_dim: int, shard_count: int,
                   groups=None, output: torch.Tensor | None = None, pin_layout: bool = True) -> torch.Tensor:
    """Reduces `input` across the replicas and gives each its `1/shard_count` slice along `scatter_dim`
    (PyTorch/XLA's `xm.reduce_scatter`).

    Args:
      reduce_type: as `all_reduce`.
      input: this replica's tensor; `scatter_dim`'s size must divide by `shard_count`. Or a list of tensors,
        reduced in one collective (collective_lists.py).
      scale: multiplies the result.
      scatter_dim: the dimension split between the replicas.
      shard_count: the replicas of a group (the world size without groups).
      groups: replica groups; None for all replicas. A replica's slice is its position in its group.
      output: a tensor to write the result into (returned); a list of them for a list.
      pin_layout: accepted for PyTorch/XLA's signature.

    Returns:
      This replica's slice (`output` when given); a list for a list.

    Raises:
      ValueError: shard_count is not the group size, or does not divide the dimension.
    """
    if torch.compiler.is_compiling():  # TorchDynamo traces this: the op it can put in its graph
        return traced.reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups, output, pin_layout)
    name = "reduce_scatter"
    if not isinstance(input, torch.Tensor):
        return collective_lists.reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups, output)
    _check_reduce_type(reduce_type, name)
    _device_tensors([input], name)
    dim = _checked_dim(input, scatter_dim, name, "scatter_dim")
    groups = _groups(groups, name) if world_size() > 1 else ()
    expected = _group_size(groups)
    if shard_count != expected:
        raise ValueError(f"{name}: shard_count={shard_count}, but each group has {expected} replica(s)")
    if input.shape[dim] % shard_count:
        raise ValueError(f"{name}: dimension {dim} of size {input.shape[dim]} does not split into {shard_count} shards")
    if world_size() == 1:
        result = input * scale if scale != 1.0 else input.clone()
    else:
        shape = list(input.shape)
        shape[dim] //= shard_count
        meta = Meta(tuple(shape), input.dtype)
        with _execution_lock:
            node = _record(ops.REDUCE_SCATTER, [input._node()],
                           (SLOT, reduce_type, float(scale), dim, shard_count, groups, world_size()), meta, _site())
            result = XlaTensor(Storage(node, 0), meta)
    return _into(output, result, name)


def broadcast(tensors, root: int = 0, groups=None) -> None:
    """Gives every replica the values `root` holds, in place (PyTorch/XLA's `xm.collective_broadcast`).

    Args:
      tensors: a tensor or a list of tensors, overwritten with the root replica's values.
      root: the replica whose values are sent.
      groups: replica groups; a group without the root gets zeros, as in PyTorch/XLA.

    Raises:
      ValueError: root is not a replica.
    """
    name = "broadcast"
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    _device_tensors(tensors, name)
    if not 0 <= root < world_size():
        raise ValueError(f"{name}: root={root} is not a replica (0..{world_size() - 1})")
    if world_size() == 1 or not tensors:
        return
    groups = _groups(groups, name)
    with _execution_lock:
        metas = tuple(Meta(tuple(t.shape), t.dtype) for t in tensors)
        node = _record(ops.BROADCAST, [t._node() for t in tensors],
                       ((SLOT,) * len(tensors), int(root), groups, world_size()), metas, _site())
        for i, t in enumerate(tensors):
            t._assign(getitem(node, i))


def all_to_all(value: torch.Tensor, split_dimension: int, concat_dimension: int, split_count: int,
               groups=None, pin_layout: bool = True) -> torch.Tensor:
    """Splits `value` into `split_count` blocks along `split_dimension`, sends block i to replica i, and
    concatenates what arrives along `concat_dimension` (PyTorch/XLA's `xm.all_to_all`).

    Raises:
      ValueError: split_count is not the world size, or groups other than all replicas.
    """
    name = "all_to_all"
    _device_tensors([value], name)
    split = _checked_dim(value, split_dimension, name, "split_dimension")
    concat = _checked_dim(value, concat_dimension, name, "concat_dimension")
    if _groups(groups, name) if world_size() > 1 else ():
        raise ValueError(f"{name}: replica groups are not supported by xladev; exchange between all replicas")
    if split_count != world_size():
        raise ValueError(f"{name}: split_count={split_count}, but the job has {world_size()} replica(s)")
    if value.shape[split] % split_count:
        raise ValueError(f"{name}: dimension {split} of size {value.shape[split]} does not split into {split_count}")
    if world_size() == 1:
        return value.clone()
    shape = list(value.shape)
    shape[split] //= split_count
    shape[concat] *= split_count
    meta = Meta(tuple(shape), value.dtype)
    with _execution_lock:
        node = _record(ops.ALL_TO_ALL, [value._node()], (SLOT, split, concat, split_count, world_size()), meta, _site())
        return XlaTensor(Storage(node, 0), meta)


def collective_permute(value: torch.Tensor, pairs) -> torch.Tensor:
    """Sends `value` from each source replica to its target (PyTorch/XLA's `xm.collective_permute`); a
    replica that is no target gets zeros.

    Args:
      pairs: [source, target] replica pairs, e.g. [[0, 1], [1, 0]].

    Raises:
      ValueError: a replica outside the job, or one sending or receiving twice.
    """
    name = "collective_permute"
    _device_tensors([value], name)
    pairs = tuple((int(a), int(b)) for a, b in pairs)
    world = world_size()
    sources, targets = [a for a, _ in pairs], [b for _, b in pairs]
    if any(not 0 <= r < world for r in sources + targets) or len(set(sources)) < len(sources) \
            or len(set(targets)) < len(targets):
        raise ValueError(f"{name}: pairs={[list(p) for p in pairs]} must name replicas 0..{world - 1}, each sending "
                         "and receiving at most once")
    if world == 1:
        return value.clone() if (0, 0) in pairs else torch.zeros_like(value)
    meta = Meta(tuple(value.shape), value.dtype)
    with _execution_lock:
        node = _record(ops.COLLECTIVE_PERMUTE, [value._node()], (SLOT, pairs, world), meta, _site())
        return XlaTensor(Storage(node, 0), meta)


# ---- synchronising -------------------------------------------------------------------------------
def barrier(tag: str | None = None) -> None:
    """Waits until every replica reaches this call: a one-number all-reduce run at once (pending tensors
    stay pending).

    Args:
      tag: a name for the barrier in the analysis and the event log.
    """
    if world_size() == 1:
        return
    token = torch.zeros((), dtype=torch.int32, device=torch.device("xla", 0))
    with sync_cause(Cause(CauseKind.COLLECTIVE, f"barrier {tag!r}" if tag else "barrier")):
        download([all_reduce(REDUCE_SUM, token)])


def rendezvous(tag: str, payload: bytes = b"", replicas: Sequence[int] | None = None) -> list[bytes]:
    """Waits for every replica (or every replica of `replicas`) to reach `tag` and returns each one's `payload`
    (PyTorch/XLA's `xm.rendezvous`).

    Between every replica the bytes travel through XLA all-gathers, as in PyTorch/XLA; among a subgroup
    (only its members call it) through jax's coordination service (subgroup_rendezvous.py).

    Args:
      tag: the rendezvous's name (in the analysis's cause; a subgroup's members meet under it).
      payload: bytes to share.
      replicas: the replicas taking part, this one among them; None or [] for every replica.

    Returns:
      The payloads, by rank; with `replicas`, the payload of `replicas[i]` at position i.

    Raises:
      ValueError: `replicas` names a replica outside the job, twice, or not this one. TypeError: payload is
        not bytes. DistributedError: a member is gone, or did not arrive within XLADEV_DIST_TIMEOUT.
    """
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"rendezvous: payload must be bytes, not {type(payload).__name__}")
    members = subgroup_rendezvous.members(replicas, world_size(), global_ordinal())
    if members is not None and len(members) < world_size():
        return subgroup_rendezvous.exchange(tag, bytes(payload), members)
    if world_size() == 1:
        return [bytes(payload)]
    device = torch.device("xla", 0)
    with sync_cause(Cause(CauseKind.COLLECTIVE, f"rendezvous {tag!r}")):
        size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        sizes = download([all_gather(size)])[0].tolist()
        longest = max(sizes)
        if longest == 0:
            found = [b"" for _ in sizes]
        else:
            data = torch.zeros(longest, dtype=torch.uint8)
            if payload:
                data[:len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
            gathered = download([all_gather(data.to(device))])[0]
            found = [bytes(gathered[i * longest:i * longest + n].tolist()) for i, n in enumerate(sizes)]
    return found if members is None else [found[r] for r in members]


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list], Any]) -> Any:
    """`reduce_fn` of every replica's `data` (PyTorch/XLA's `xm.mesh_reduce`): device tensors in `data` are
    copied to the CPU, the values exchanged through `rendezvous`.

    Returns:
      `reduce_fn([data of replica 0, data of replica 1, ...])`.
    """
    cpu = _to_cpu(data)
    buffer = io.BytesIO()
    torch.save(cpu, buffer)
    payloads = rendezvous(tag, buffer.getvalue())
    return reduce_fn([torch.load(io.BytesIO(p), weights_only=False) for p in payloads])


def _to_cpu(data: Any) -> Any:
    if isinstance(data, torch.Tensor):
        return data.detach().cpu()
    if isinstance(data, (list, tuple)):
        return type(data)(_to_cpu(d) for d in data)
    if isinstance(data, dict):
        return {k: _to_cpu(v) for k, v in data.items()}
    return data


def fetch_gradients(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every gradient the optimizer's parameters hold, in parameter order (PyTorch/XLA's `xm._fetch_gradients`)."""
    return [p.grad for group in optimizer.param_groups for p in group["params"]
            if isinstance(p, torch.Tensor) and p.grad is not None]


def reduce_gradients(optimizer: torch.optim.Optimizer, groups=None, pin_layout: bool = True) -> None:
    """Averages every gradient the optimizer holds across the replicas, in one all-reduce recorded into the
    step's graph (PyTorch/XLA's `xm.reduce_gradients`). Nothing to do with one replica.

    Raises:
      ValueError: the optimizer steps FSDP shards (their gradients are reduced already, and differ by process).
    """
    count = world_size()
    if count == 1:
        return
    if any(getattr(p, "_is_sharded", False) for group in optimizer.param_groups for p in group["params"]):
        # Each process's shard is a different piece: averaging their gradients would mix pieces.
        raise ValueError("reduce_gradients (xm.optimizer_step): the optimizer steps FSDP shards, whose gradients FSDP "
                         "has already reduce-scattered; call optimizer.step() instead")
    gradients = fetch_gradients(optimizer)
    if gradients:
        all_reduce(REDUCE_SUM, gradients, scale=1.0 / count, groups=groups, pin_layout=pin_layout)

# TorchDynamo's view of the collectives (traced_collectives.py), set when xladev's TorchDynamo support is
# installed: inside `torch.compile`, `all_reduce`, `all_gather` and `reduce_scatter` become ops of its graph.
traced = None
