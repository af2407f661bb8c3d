"""What every collective shares: the job's size and this replica's place, argument checks, and recording.

The collectives (collectives.py, and the list collectives of collective_lists.py) check their arguments
with these, then record one `CollectiveNode` on this process's `xla:0`.
"""

from __future__ import annotations

import os
from typing import Sequence

import torch

from xladev.runtime.graph import backend, stack
from xladev.runtime.graph.ir import Node
from xladev.runtime.lowering import collective_ops as ops
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.graph.world import DistributedError, joined, placement


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
def check_reduce_type(reduce_type: str, name: str) -> None:
    if reduce_type not in ops.REDUCE_TYPES:
        raise ValueError(f"{name}: unknown reduce_type {reduce_type!r}; use one of "
                         + ", ".join(f"'{t}'" for t in ops.REDUCE_TYPES))


def replica_groups(groups, name: str) -> tuple:
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
    if groups == (tuple(range(world)),):
        return ()  # one group of every replica, in rank order: the native collective
    # Kept for one group in another order too: a gather concatenates, and a scatter hands out slices, in
    # the order of the replicas in the group (XLA's replica-group semantics).
    return groups


def group_size(groups: tuple) -> int:
    return len(groups[0]) if groups else world_size()


def device_tensors(tensors: Sequence, name: str) -> None:
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"{name} takes xla tensors, got a tensor on {getattr(t, 'device', type(t).__name__)}")
        if t._st.device_index != 0 and world_size() > 1:
            raise DistributedError(f"{name}: a tensor on {t.device}; collectives run between the processes of the "
                                   "job, each on its xla:0 (torch_xla.device())")


def record(opdef, operands: list, template: tuple, meta, site: str | None):
    node = CollectiveNode(opdef, tuple(operands), (template, ()), meta, site)
    recorder.count(opdef.name)
    return node


def site() -> str | None:
    """`file.py:LINE (function)` of the user's line calling the collective (as the analysis names sites)."""
    frame = stack.user_frame()
    if frame is None:
        return None
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"


def checked_dim(t: torch.Tensor, dim: int, name: str, what: str = "dim") -> int:
    rank = t.dim()
    if not -rank <= dim < max(rank, 1):
        raise IndexError(f"{name}: {what}={dim} is out of range for a tensor of {rank} dimension(s)")
    return dim % rank if rank else 0


def into(output: torch.Tensor | None, result: torch.Tensor, name: str) -> torch.Tensor:
    """`result` written into `output` (returned), or `result` when `output` is None.

    An output of another shape takes the result's, as a torch op's `out=` tensor is resized (PyTorch/XLA replaces
    the output's value whatever its shape): with a warning unless it was empty, as torch warns.

    Raises:
      ValueError: `output` has another shape and is a view, or a tensor of another device (it cannot be resized).
    """
    if output is None:
        return result
    if tuple(output.shape) != tuple(result.shape):
        if not isinstance(output, XlaTensor) or output._chain is not None:
            raise ValueError(f"{name}: output has shape {list(output.shape)}, the result {list(result.shape)}; an "
                             "output of another shape is resized, and this one cannot be (it is a view, or not an xla "
                             "tensor): give an output of the result's shape")
        if output.numel():
            stack.warn_at_user(f"{name}: an output with one or more elements was resized since it had shape "
                               f"{list(output.shape)}, which does not match the required output shape "
                               f"{list(result.shape)}")
        result = result.to(output.dtype)
        # The output object takes the result's tensor: its shape, strides and value (torch.utils.swap_tensors, as
        # module conversion keeps Parameters); the result object is dropped.
        torch.utils.swap_tensors(output, result)
        return output
    with torch.no_grad():
        output.copy_(result)
    return output
