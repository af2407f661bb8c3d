"""Collectives of a list of tensors: `reduce_scatter` and `all_gather` of several tensors in one collective.

PyTorch/XLA's `xm.reduce_scatter(reduce_type, [t1, t2, ...], ...)` and `xm.all_gather([t1, t2, ...], ...)`
reduce (gather) every tensor of the list in one coalesced collective and return a list of results; with
`output=[o1, o2, ...]` the results are written into those tensors, and the list is returned. Here the list
is one `xla::reduce_scatter_coalesced` (`xla::all_gather_coalesced`) node in the step's graph, one output per
tensor. `pin_layout` is accepted either way (XLA picks the layouts under jax, so there is nothing to pin).

The `*_bucketized` variants split the list into buckets of at most `bucket_cap_mb` megabytes and run one
coalesced collective per bucket (a tensor larger than the cap gets a bucket of its own).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from xladev.runtime.distributed import collective_args as a
from xladev.runtime.execute.execution import lock
from xladev.runtime.graph.ir import SLOT, Meta, getitem
from xladev.runtime.lowering import collective_ops as ops
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor


def tensor_list(value, name: str, what: str = "input") -> list[torch.Tensor]:
    """`value` as a list of tensors.

    Raises:
      TypeError: `value` is not a list or tuple of tensors.
    """
    if not isinstance(value, (list, tuple)) or any(not isinstance(v, torch.Tensor) for v in value):
        raise TypeError(f"{name}: `{what}` needs to be a Tensor or a list of Tensors, but given "
                        f"{_describe(value)}")
    return list(value)


def _describe(value) -> str:
    if isinstance(value, (list, tuple)):
        kinds = sorted({type(v).__name__ for v in value if not isinstance(v, torch.Tensor)})
        return f"a {type(value).__name__} holding {', '.join(kinds)}"
    return type(value).__name__


def _outputs(output, count: int, name: str) -> list[torch.Tensor] | None:
    """The `output=` list of a list collective, checked against the number of inputs.

    Raises:
      TypeError: not a list of tensors. ValueError: its length differs from the input list's.
    """
    if output is None:
        return None
    outputs = tensor_list(output, name, "output")
    if len(outputs) != count:
        raise ValueError(f"{name}: `output` length doesn't match `input` length: {len(outputs)} vs {count}")
    return outputs


def _write(results: list[torch.Tensor], outputs: list[torch.Tensor] | None, output, name: str):
    if outputs is None:
        return results
    for out, result in zip(outputs, results):
        a.into(out, result, name)
    return output


def reduce_scatter(reduce_type: str, inputs: Sequence[torch.Tensor], scale: float, scatter_dim: int,
                   shard_count: int, groups=None, output=None) -> list[torch.Tensor]:
    """Reduces every tensor of `inputs` across the replicas, each replica keeping its slice of each, in one
    collective (`xladev.reduce_scatter` with a list).

    Args:
      reduce_type, scale, scatter_dim, shard_count, groups: as `xladev.reduce_scatter`, for every tensor.
      inputs: this replica's tensors; each one's `scatter_dim` must divide by `shard_count`.
      output: a list of tensors, one per input, to write the results into (then returned).

    Returns:
      The list of slices (or `output`).

    Raises:
      TypeError: not a list of xla tensors. ValueError: as `xladev.reduce_scatter`, naming the tensor.
    """
    name = "reduce_scatter"
    a.check_reduce_type(reduce_type, name)
    tensors = tensor_list(inputs, name)
    outputs = _outputs(output, len(tensors), name)
    a.device_tensors(tensors, name)
    groups = a.replica_groups(groups, name) if a.world_size() > 1 else ()
    expected = a.group_size(groups)
    if shard_count != expected:
        raise ValueError(f"{name}: shard_count={shard_count}, but each group has {expected} replica(s)")
    dims = []
    for i, t in enumerate(tensors):
        dim = a.checked_dim(t, scatter_dim, f"{name} (input {i})", "scatter_dim")
        if t.shape[dim] % shard_count:
            raise ValueError(f"{name}: input {i}: dimension {dim} of size {t.shape[dim]} does not split into "
                             f"{shard_count} shards")
        dims.append(dim)
    if not tensors:
        return _write([], outputs, output, name)
    if len(set(dims)) > 1:
        raise ValueError(f"{name}: scatter_dim={scatter_dim} names different dimensions of the inputs {dims} "
                         "(their ranks differ); give a non-negative scatter_dim")
    if a.world_size() == 1:
        results = [t * scale if scale != 1.0 else t.clone() for t in tensors]
        return _write(results, outputs, output, name)
    metas = []
    for t in tensors:
        shape = list(t.shape)
        shape[dims[0]] //= shard_count
        metas.append(Meta(tuple(shape), t.dtype))
    params = ((SLOT,) * len(tensors), reduce_type, float(scale), dims[0], shard_count, groups, a.world_size())
    results = _record_list(ops.REDUCE_SCATTER_COALESCED, tensors, params, metas)
    return _write(results, outputs, output, name)


def all_gather(inputs: Sequence[torch.Tensor], dim: int = 0, groups=None, output=None) -> list[torch.Tensor]:
    """Gathers every tensor of `inputs` from the replicas along `dim`, in one collective (`xladev.all_gather`
    with a list).

    Args:
      inputs: this replica's tensors.
      dim, groups: as `xladev.all_gather`, for every tensor.
      output: a list of tensors, one per input, to write the results into (then returned).

    Returns:
      The list of gathered tensors (or `output`).

    Raises:
      TypeError: not a list of xla tensors. ValueError: bad groups, or an output of the wrong shape.
    """
    name = "all_gather"
    tensors = tensor_list(inputs, name)
    outputs = _outputs(output, len(tensors), name)
    a.device_tensors(tensors, name)
    dims = [a.checked_dim(t, dim, f"{name} (input {i})") for i, t in enumerate(tensors)]
    if not tensors:
        return _write([], outputs, output, name)
    if len(set(dims)) > 1:
        raise ValueError(f"{name}: dim={dim} names different dimensions of the inputs {dims} (their ranks "
                         "differ); give a non-negative dim")
    if a.world_size() == 1:
        return _write([t.clone() for t in tensors], outputs, output, name)
    groups = a.replica_groups(groups, name)
    count = a.group_size(groups)
    metas = []
    for t in tensors:
        shape = list(t.shape)
        shape[dims[0]] *= count
        metas.append(Meta(tuple(shape), t.dtype))
    results = _record_list(ops.ALL_GATHER_COALESCED, tensors, ((SLOT,) * len(tensors), dims[0], groups,
                                                               a.world_size()), metas)
    return _write(results, outputs, output, name)


def _record_list(opdef, tensors: list, params: tuple, metas: list) -> list[torch.Tensor]:
    """Records one multi-output collective over `tensors`; its outputs as new tensors."""
    site = a.site()
    with lock:
        node = a.record(opdef, [t._node() for t in tensors], params, tuple(metas), site)
        return [XlaTensor(Storage(getitem(node, i), 0), meta) for i, meta in enumerate(metas)]


def bucketized(collective: Callable, inputs, output, bucket_cap_mb: float, name: str) -> list[torch.Tensor]:
    """Runs `collective(bucket_inputs, bucket_outputs)` over buckets of `inputs` of at most `bucket_cap_mb` MB.

    Args:
      collective: one list collective, e.g. `lambda ins, outs: reduce_scatter(..., ins, ..., output=outs)`.
      inputs: the tensors.
      output: None, or a list of tensors matching `inputs`.
      bucket_cap_mb: the most megabytes of input per collective; 0 puts each tensor in a bucket of its own.
      name: the collective's name, for errors.

    Returns:
      Every result, in the order of `inputs` (`output` when given).

    Raises:
      TypeError: `inputs` (or `output`) is not a list of tensors. ValueError: a negative cap, or lengths differ.
    """
    tensors = tensor_list(inputs, name, "input_list")
    outputs = _outputs(output, len(tensors), name)
    if bucket_cap_mb < 0:
        raise ValueError(f"{name}: bucket_cap_mb={bucket_cap_mb} must not be negative")
    cap = bucket_cap_mb * 1024 * 1024
    buckets, current, size = [], [], 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes > cap:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
    if current:
        buckets.append(current)
    results = []
    for bucket in buckets:
        results.extend(collective([tensors[i] for i in bucket], None if outputs is None else [outputs[i] for i in bucket]))
    return output if outputs is not None else results
