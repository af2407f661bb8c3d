"""What an FX program's call depends on of its arguments (fx_program.py): the key of its plan (a symbolic
graph's concrete signature, how each view argument is given), the strides it was traced with, the buffers
of pending arguments (constants computed once), and the check that no argument it writes shares data with
another.
"""

from __future__ import annotations

import math

import torch

from xladev.errors import XladevError
from xladev.events import Cause, CauseKind
from xladev.runtime.graph.ir import DataNode
from xladev.runtime.graph.storage import write_data
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import arrays_of

# The cause of computing a call's pending inputs before its program runs.
INPUTS = Cause(CauseKind.DYNAMO_INPUTS)


def is_folded(t: XlaTensor) -> bool:
    """Whether a view argument is given to the program as its base's buffer (the program applies the view)."""
    return t._chain is not None and type(t._st.value) is DataNode


def view_key(t: XlaTensor) -> tuple:
    """What a plan depends on of a view argument: its base, layout and view ops when folded; that it is a view."""
    if not is_folded(t):
        return ("view",)
    return (t._st.value.meta, t.stride(), t.storage_offset(),
            tuple((step.opdef.name, step.template, step.meta, step.index) for step in t._chain))


def signature(args: list) -> tuple:
    """The concrete input signature of a graph with symbolic sizes: shapes, dtypes and numbers."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append((tuple(a.shape), a.dtype))
        elif isinstance(a, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
            out.append(a)
        else:
            out.append(type(a))
    return tuple(out)


def concrete_strides(value) -> tuple | None:
    """A traced tensor input's strides, when they are plain numbers."""
    if not isinstance(value, torch.Tensor):
        return None
    strides = value.stride()
    return tuple(strides) if all(type(s) is int for s in strides) else None


def has_symbolic_shape(value) -> bool:
    """Whether a traced input is a tensor with a symbolic size (dynamo's dynamic shapes)."""
    return isinstance(value, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in value.shape)


class AliasedInputsError(XladevError, RuntimeError):
    """A compiled graph writes an input whose data another of its inputs shares: the graph, captured as if the
    inputs were independent, would read the other's old value."""


def check_written_aliases(name: str, writes, args: list) -> None:
    """Raises when an argument the graph writes shares its storage with another tensor argument (a `detach()`,
    an alias or an overlapping view of it). TorchDynamo and AOTAutograd cannot see that device tensors alias, so
    the captured graph reads the other argument's value from before the write, where eager reads it after.

    Args:
      name: the graph's name, for the message.
      writes: the plan's writes, (argument index, output index, meta) per argument the graph writes.
      args: the call's arguments.

    Raises:
      AliasedInputsError: naming the two inputs; nothing ran.
    """
    storages = [a._st for a in args if type(a) is XlaTensor]
    if len(set(map(id, storages))) == len(storages):
        return  # every tensor argument has data of its own: the common case, one set
    owners: dict[int, list[int]] = {}
    for i, a in enumerate(args):
        if type(a) is XlaTensor:
            owners.setdefault(id(a._st), []).append(i)
    written = {i for i, _, _ in writes}
    for group in owners.values():
        if len(group) < 2 or written.isdisjoint(group):
            continue
        tensors = [args[i] for i in group]
        if all(t._chain is not None for t in tensors) and disjoint(tensors):
            continue  # views of one base that share no element (rows of a matrix) are independent
        i = next(i for i in group if i in written)
        j = next(j for j in group if j != i)
        raise AliasedInputsError(
            f"the torch.compile graph {name!r} writes its input {i}, and its input {j} shares that tensor's data (a "
            "detach(), an alias or an overlapping view of it). TorchDynamo cannot see that xla tensors alias, so the "
            f"compiled graph would read input {j}'s value from before the write, where eager PyTorch reads it after. "
            "Pass the tensor once, or .clone() the other one before the call.")


def disjoint(views: list) -> bool:
    """Whether views of one storage occupy element spans (first to last element) that do not intersect."""
    spans = []
    for t in views:
        if t.numel() == 0:
            continue
        start = t.storage_offset()
        spans.append((start, start + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))))
    spans.sort()
    return all(end < next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


# Values of pending inputs computed from no input at all (`ones`, `zeros`, `full` of a constant: the loss
# gradient's seed), by signature and device: each is computed once, not by a graph before every call.
_constants: dict = {}
_CONSTANTS_KEPT = 64
_CONSTANT_MAX_ELEMENTS = 1 << 16


def constants_of(waiting: list, arrays: list, device_index: int) -> list:
    """Fills the positions of `waiting` inputs that are constants from `_constants` (computing those not seen
    yet) and makes each such tensor device data; returns the inputs still to compute."""
    rest, fresh, filled = [], [], []
    for position, t in waiting:
        node = t._st.value
        if t._chain is not None or node.operands or type(node) is DataNode or math.prod(node.meta.shape) > \
                _CONSTANT_MAX_ELEMENTS:
            rest.append((position, t))
            continue
        key = (node.signature(), device_index)
        array = _constants.get(key)
        if array is None:
            fresh.append((position, t, key))
        else:
            arrays[position] = array
            filled.append((t._st, DataNode(array, node.meta)))
    if fresh:
        if len(_constants) + len(fresh) > _CONSTANTS_KEPT:
            _constants.clear()
        for (position, t, key), array in zip(fresh, arrays_of([t for _, t, _ in fresh], INPUTS)):
            arrays[position] = _constants[key] = array
    write_data(filled)
    return rest


def input_arrays(tensors: list, device_index: int) -> list:
    """The buffers of a first call's inputs, computed as every later call computes them: a constant (the ones
    AOTAutograd feeds a backward as the loss's incoming gradient) through `_constants`, so that the first later
    call finds it there rather than computing it once more, in another graph, and compiling that."""
    arrays = [None] * len(tensors)
    rest = constants_of(list(enumerate(tensors)), arrays, device_index)
    if rest:
        for (position, _), array in zip(rest, arrays_of([t for _, t in rest], INPUTS)):
            arrays[position] = array
    return arrays
