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
import os
from typing import Any, Callable, Sequence

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime import backend, stack
from xladev.runtime.execution import lock as _execution_lock
from xladev.runtime.ir import SLOT, Meta, Node, getitem
from xladev.runtime.lowering import collective_ops as ops
from xladev.runtime.recorder import recorder
from xladev.runtime.storage import Storage
from xladev.runtime.tensor import XlaTensor
from xladev.runtime.transfers import download, sync_cause
from xladev.runtime.world import DistributedError, joined, placement

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = ops.REDUCE_TYPES


class CollectiveNode(Node):
    """A collective's IR node, with the user's line that asked for it (the analysis and the report name it).

    The line is not part of the graph's key: ranks started from different folders still build one graph.
    """

    __slots__ = ("site",)

    def __init__(self, op, operands, template, meta, site: str | None):
        super().__init__(op, operands, template, meta, *recorder.debug_info())
        self.site = site


def world_size() -> int:
    """The replicas taking part in the job: its processes (1 for a process that joined no job)."""
    backend.jax_devices()  # a process started by torchrun or xladev.launch joins its job on first use
    return placement().world_size if joined() else 1


def global_ordinal() -> int:
    """This process's replica number in the job (its rank; 0 outside a job)."""
    backend.jax_devices()
    return placement().rank if joined() else 0


def local_ordinal() -> int:
    """This process's replica number on its host (its local rank; 0 outside a job)."""
    backend.jax_devices()
    return placement().local_rank if joined() else 0


# ---- argument checks -------------------------------------------------------------------------------
def _check_reduce_type(reduce_type: str, name: str) -> None:
    if reduce_type not in ops.REDUCE_TYPES:
        raise ValueError(f"{name}: unknown reduce_type {reduce_type!r}; use one of "
                         + ", ".join(f"'{t}'" for t in ops.REDUCE_TYPES))


def _groups(groups, name: str) -> tuple:
    """Replica groups as a tuple of tuples; () for one group of every replica.

    Raises:
      ValueError: the groups do not split the replicas into groups of one size.
    """
    if not groups:
        return ()
    world = world_size()
    groups = tuple(tuple(int(r) for r in g) for g in groups)
    flat = sorted(r for g in groups for r in g)
    if flat != list(range(world)) or len({len(g) for g in groups}) != 1:
        raise ValueError(f"{name}: groups={[list(g) for g in groups]} must split the {world} replicas "
                         f"(0..{world - 1}) into groups of one size, each replica in exactly one group")
    if len(groups) == 1:
        return ()  # one group of every replica: the native collective
    return groups


def _group_size(groups: tuple) -> int:
    return len(groups[0]) if groups else world_size()


def _device_tensors(tensors: Sequence, name: str) -> None:
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"{name} takes xla tensors, got a tensor on {getattr(t, 'device', type(t).__name__)}")
        if t._st.device_index != 0 and world_size() > 1:
            raise DistributedError(f"{name}: a tensor on {t.device}; collectives run between the processes of the "
                                   "job, each on its xla:0 (torch_xla.device())")


def _record(opdef, operands: list, template: tuple, meta, site: str | None):
    node = CollectiveNode(opdef, tuple(operands), (template, ()), meta, site)
    recorder.count(opdef.name)
    return node


def _site() -> str | None:
    """`file.py:LINE (function)` of the user's line calling the collective (as the analysis names sites)."""
    frame = stack.user_frame()
    if frame is None:
        return None
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"


def _checked_dim(t: torch.Tensor, dim: int, name: str, what: str = "dim") -> int:
    rank = t.dim()
    if not -rank <= dim < max(rank, 1):
        raise IndexError(f"{name}: {what}={dim} is out of range for a tensor of {rank} dimension(s)")
    return dim % rank if rank else 0


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
    name = "all_reduce"
    _check_reduce_type(reduce_type, name)
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs] if single else list(inputs)
    _device_tensors(tensors, name)
    if world_size() == 1:
        return inputs.clone() if single else inputs  # PyTorch/XLA: nothing is reduced with one replica
    if reduce_type in (REDUCE_AND, REDUCE_OR) and any(t.dtype.is_floating_point or t.dtype.is_complex for t in tensors):
        raise TypeError(f"{name}: reduce_type '{reduce_type}' needs integer or bool tensors")
    groups = _groups(groups, name)
    if not tensors:
        return inputs
    site = _site()
    with _execution_lock:
        metas = tuple(Meta(tuple(t.shape), t.dtype) for t in tensors)
        node = _record(ops.ALL_REDUCE, [t._node() for t in tensors],
                       ((SLOT,) * len(tensors), reduce_type, float(scale), groups, world_size()), metas, site)
        if single:
            return XlaTensor(Storage(getitem(node, 0), 0), metas[0])
        for i, t in enumerate(tensors):
            t._assign(getitem(node, i))
    return inputs


def all_gather(value: torch.Tensor, dim: int = 0, groups=None, output: torch.Tensor | None = None,
               pin_layout: bool = True) -> torch.Tensor:
    """Concatenates every replica's `value` along `dim`, in replica order (PyTorch/XLA's `xm.all_gather`).

    Args:
      value: this replica's tensor.
      dim: the dimension to concatenate along.
      groups: replica groups; each replica gathers its own group's values.
      output: a tensor to write the result into (returned).
      pin_layout: accepted for PyTorch/XLA's signature.

    Returns:
      The gathered tensor (`output` when given).
    """
    name = "all_gather"
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
      input: this replica's tensor; `scatter_dim`'s size must divide by `shard_count`.
      scale: multiplies the result.
      scatter_dim: the dimension split between the replicas.
      shard_count: the replicas of a group (the world size without groups).
      groups: replica groups; None for all replicas.
      output: a tensor to write the result into (returned).
      pin_layout: accepted for PyTorch/XLA's signature.

    Raises:
      ValueError: shard_count is not the group size, or does not divide the dimension.
    """
    name = "reduce_scatter"
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


def _into(output: torch.Tensor | None, result: torch.Tensor, name: str) -> torch.Tensor:
    if output is None:
        return result
    if tuple(output.shape) != tuple(result.shape):
        raise ValueError(f"{name}: output has shape {list(output.shape)}, the result {list(result.shape)}")
    with torch.no_grad():
        output.copy_(result)
    return output


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
    """Waits for every replica to reach `tag` and returns each replica's `payload`, by rank
    (PyTorch/XLA's `xm.rendezvous`: the bytes travel through XLA all-gathers).

    Args:
      tag: the rendezvous's name (in the analysis's cause).
      payload: bytes to share.
      replicas: every replica, or None/[]: only a global rendezvous exists.

    Raises:
      ValueError: a subset of the replicas. TypeError: payload is not bytes.
    """
    if replicas and len(replicas) != world_size():
        raise ValueError("rendezvous: only a global rendezvous is supported (replicas=None)")
    if not isinstance(payload, (bytes, bytearray)):
        raise TypeError(f"rendezvous: payload must be bytes, not {type(payload).__name__}")
    if world_size() == 1:
        return [bytes(payload)]
    device = torch.device("xla", 0)
    with sync_cause(Cause(CauseKind.COLLECTIVE, f"rendezvous {tag!r}")):
        size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
        sizes = download([all_gather(size)])[0].tolist()
        longest = max(sizes)
        if longest == 0:
            return [b"" for _ in sizes]
        data = torch.zeros(longest, dtype=torch.uint8)
        if payload:
            data[:len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
        gathered = download([all_gather(data.to(device))])[0]
    return [bytes(gathered[i * longest:i * longest + n].tolist()) for i, n in enumerate(sizes)]


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
