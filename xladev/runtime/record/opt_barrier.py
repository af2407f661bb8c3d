"""Optimization barriers: `xm.optimization_barrier_(tensors)`, one `xla::optimization_barrier` node.

The node takes every tensor's value and gives each back unchanged, lowered to `jax.lax.optimization_barrier`
(`opt-barrier` in HLO). XLA cannot look through it: values computed from its outputs are never merged with
values computed from its inputs (common-subexpression elimination), and nothing computed from its outputs
is moved before all of its inputs are ready. Gradient checkpointing relies on both (checkpoint.py).
"""

from __future__ import annotations

from typing import Sequence

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.execute.execution import execution, lock
from xladev.runtime.graph.ir import SLOT, Node, OpDef, getitem
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.tensor import XlaTensor


def _lower_barrier(ctx, *values):
    import jax

    return tuple(jax.lax.optimization_barrier(tuple(values)))


# PyTorch/XLA's IR name; one node for the whole list, one output per input.
OPTIMIZATION_BARRIER = OpDef("xla::optimization_barrier", _lower_barrier, multi_output=True)


def barrier_nodes(nodes: Sequence[Node]) -> list[Node]:
    """Records one optimization barrier over `nodes`.

    Args:
      nodes: the values to pass through the barrier (each a single value, not a tuple node).

    Returns:
      The barrier's outputs, one per node, in order.
    """
    nodes = tuple(nodes)
    node = Node(OPTIMIZATION_BARRIER, nodes, ((SLOT,) * len(nodes), ()), tuple(n.meta for n in nodes),
                *recorder.debug_info())
    recorder.count(OPTIMIZATION_BARRIER.name)
    return [getitem(node, i) for i in range(len(nodes))]


def optimization_barrier_(tensors: Sequence[torch.Tensor]) -> None:
    """Passes `tensors` through one optimization barrier, in place (PyTorch/XLA's `xm.optimization_barrier_`).

    Each tensor's value is replaced by the barrier's output for it: the values are the same, but XLA
    computes nothing that reads them before every tensor of the list is ready, and never merges what reads
    them with what read the values before. Autograd does not see the change (no version bump), as in
    PyTorch/XLA.

    Args:
      tensors: xla tensors, all on one device (a list or tuple; empty does nothing).

    Raises:
      TypeError: `tensors` is not a sequence of tensors.
      RuntimeError: a tensor is not on the xla device, or two are on different xla devices.
    """
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"optimization_barrier_ takes a list of tensors, got {type(tensors).__name__}")
    devices = set()
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"optimization_barrier_: item {i} is a {type(t).__name__}, not a tensor")
        if not isinstance(t, XlaTensor):
            raise RuntimeError(f"optimization_barrier_: tensor {i} is on {t.device}; every tensor must be an "
                               f"xla tensor")
        devices.add(t._st.device_index)
    if len(devices) > 1:
        raise RuntimeError(f"optimization_barrier_: the tensors are on several devices "
                           f"({', '.join(f'xla:{d}' for d in sorted(devices))}); one barrier is on one device")
    if not tensors:
        return
    with lock:  # as any op: never interleaved with a barrier's sync on another thread
        outputs = barrier_nodes([t._node() for t in tensors])
        for t, node in zip(tensors, outputs):
            t._assign(node)
    if recorder.eager_debug:  # eager mode runs each op as it is recorded; PyTorch/XLA's runs the barrier too
        execution.flush(Cause(CauseKind.EAGER_DEBUG, OPTIMIZATION_BARRIER.name))
