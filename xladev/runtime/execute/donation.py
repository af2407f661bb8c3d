"""Buffer donation: which input buffers a graph may consume in place, and the copy made when one cannot be.

A graph that updates a tensor in place can be handed the tensor's old buffer to write its new value into
(XLA's input/output aliasing), when nothing else can read that buffer afterwards.
"""

from __future__ import annotations

import collections
import sys

from xladev.runtime.graph.ir import DataNode, Graph

_copy = None


def copy_buffer(array):
    """A new buffer holding `array`'s value, for an executable to consume in place of a donated input that
    something else still reads. Through one jitted copy: `Array.copy` goes through jax's op-by-op dispatch,
    about 100 us a call, where a cached executable's call takes about 15 us."""
    global _copy
    if _copy is None:
        import jax
        import jax.numpy as jnp

        _copy = jax.jit(jnp.copy)
    return _copy(array)


def donors_of(storages: list) -> list[DataNode]:
    """The old device data of storages updated in place, when the new value has the same shape and dtype."""
    donors: list[DataNode] = []
    seen: set[int] = set()
    for storage in storages:
        ref = storage.donor
        data = ref() if ref is not None else None
        if data is not None and data.array is not None and data.meta == storage.value.meta and id(data) not in seen:
            seen.add(id(data))
            donors.append(data)
    return donors


def _operand_uses(graph: Graph, wanted: set[int]) -> collections.Counter:
    """How many operand slots of the graph read each wanted node (each slot is one reference to it)."""
    uses: collections.Counter = collections.Counter()
    for node in graph.nodes:
        for operand in node.operands:
            if id(operand) in wanted:
                uses[id(operand)] += 1
    return uses


# References a donor has when only this graph uses it, besides one per operand slot reading it: the
# caller's `donors` list, `graph.inputs`, `graph.nodes`, `donatable`'s local and getrefcount's argument.
_DONOR_BASE_REFS = 5


def donatable(graph: Graph, donors: list[DataNode]) -> tuple[int, ...]:
    """Positions of the donors whose buffers nothing outside this graph can read.

    A donated buffer is gone once the graph ran, so a donor must not be reachable from anything else:
    another tensor holding the same data (made by `copy_` of device data), a view's cached value, a
    pending value left out of this graph. Python's reference count says exactly that: every holder adds
    one, so a donor with no more references than this graph's own is read by nothing else. Its jax array
    must have no holder but the node either.

    Args:
      graph: the graph about to run.
      donors: candidate device data (`donors_of`), each at most once.

    Returns:
      The positions in `graph.inputs` of the donors to donate.
    """
    wanted = {id(d) for d in donors}
    uses = _operand_uses(graph, wanted)
    inputs = graph.inputs
    positions = []
    for i in range(len(inputs)):
        node = inputs[i]
        if (id(node) in wanted and sys.getrefcount(node) == _DONOR_BASE_REFS + uses[id(node)]
                and sys.getrefcount(node.array) == 2):
            positions.append(i)
    return tuple(positions)
