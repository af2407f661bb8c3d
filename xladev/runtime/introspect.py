"""Looking at pending graphs without running them: IR text, HLO, StableHLO, Graphviz, hashes.

The debug API (`xladev.debug`) reads graphs through this module: the graph of some tensors, the one
the next barrier would run, and their text forms (irtext.py) and lowering (graph_lowering.py).
"""

from __future__ import annotations

from xladev.runtime.graph_lowering import lowered
from xladev.runtime.ir import Graph
from xladev.runtime.irtext import graph_to_dot, graph_to_text, root_hashes
from xladev.runtime.storage import pending_storages
from xladev.runtime.tensor import XlaTensor

__all__ = ["graph_of", "graph_to_dot", "lowered", "pending_graph", "root_hashes", "text"]


def graph_of(tensors) -> Graph:
    """The graph computing these device tensors (their current values), as a barrier would build it."""
    nodes = []
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"expected xla tensors, got {type(t).__name__} on {getattr(t, 'device', '?')}")
        nodes.append(t._node())
    return Graph(nodes)


def pending_graph() -> Graph:
    """The graph the next `mark_step` would run (every live tensor with pending IR)."""
    storages = pending_storages()
    return Graph([s.value for s in storages])


def text(graph: Graph) -> str:
    return graph_to_text(graph)
