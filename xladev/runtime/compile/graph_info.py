"""The runtime's `xladev.events.GraphInfo`: what subscribers may read of a graph, and nothing more.

Events carry this view instead of the runtime's `Graph`, so sinks never import the runtime. Texts
are made when asked for (a subscriber that writes no dump never pays for one).
"""

from __future__ import annotations

import math

from xladev.graphdiff import GraphSummary, InputSummary, NodeSummary
from xladev.runtime.lowering.graph_lowering import hlo_module_text, lowered
from xladev.runtime.graph.ir import CALL_JAX_OP_NAME, DATA_OP, GETITEM_OP, SCALAR_OP, Graph
from xladev.runtime.graph.irtext import (
    dtype_short, graph_to_dot, graph_to_text, node_attributes, plain_shape, root_hashes, shape_text,
)
from xladev.runtime.graph.op_ledger import RECOMPUTE_SCOPE, recorder
from xladev.runtime.graph.sharding_text import sharding_text

_DIALECTS = ("hlo", "stablehlo")


def node_location(node) -> str | None:
    """The user's line that recorded an IR node.

    Args:
      node: an IR node.

    Returns:
      `fn@file.py:LINE`: its own (XLA_IR_DEBUG), else the line where an op of its signature was first recorded;
      None when neither is known.
    """
    if node.location:
        return node.location
    try:
        return recorder.first_seen_at.get((node.op.name, node.template))
    except TypeError:  # an unhashable template was never located
        return None


class RuntimeGraphInfo:
    """A read-only view of one runtime graph (implements `xladev.events.GraphInfo`)."""

    __slots__ = ("_graph", "hash", "_out_shardings")

    def __init__(self, graph: Graph, out_shardings: tuple | None = None) -> None:
        """`out_shardings`: the jax sharding of each output of an SPMD run (not the buffers: an event may
        outlive them), None otherwise."""
        self._graph = graph
        self.hash = graph.hash
        self._out_shardings = out_shardings

    def summary(self) -> GraphSummary:
        nodes = []
        inputs = []
        donated = frozenset(self._graph.donated)
        for node in self._graph.nodes:
            if node.op is DATA_OP or node.op is SCALAR_OP:
                inputs.append(InputSummary("scalar" if node.op is SCALAR_OP else "data", tuple(node.meta.shape),
                                           dtype_short(node.meta.dtype), getattr(node, "created_at", None),
                                           len(inputs) in donated))
                continue
            nodes.append(NodeSummary(node.op.name, tuple(node_attributes(node)), shape_text(node.meta),
                                     node_location(node)))
        return GraphSummary(self.hash, tuple(nodes), tuple(inputs), self._graph.user_outputs)

    def ir_text(self) -> str:
        return graph_to_text(self._graph)

    def dot_text(self) -> str:
        return graph_to_dot(self._graph)

    def lower(self):
        """jax's `Lowered` of the graph (the runtime's own tools; not part of `GraphInfo`)."""
        return lowered(self._graph)

    def hlo_text(self, dialect: str = "hlo", debug_info: bool = False) -> str:
        if dialect not in _DIALECTS:
            raise ValueError(f"unknown HLO dialect {dialect!r}; expected one of {', '.join(_DIALECTS)}")
        lowering = self.lower()
        if dialect == "hlo":
            return hlo_module_text(lowering, debug_info)
        return lowering.as_text(debug_info=debug_info)

    def root_hashes(self) -> list[str]:
        return root_hashes(self._graph)

    def collectives(self) -> list[tuple[str, int, str | None]]:
        return collectives_of(self._graph)

    def output_shardings(self) -> list[str] | None:
        if self._out_shardings is None:
            return None
        return [f"{plain_shape(root.meta)} {sharding_text(sharding, len(root.meta.shape))}"
                for root, sharding in zip(self._graph.roots, self._out_shardings)]

    def recomputed_ops(self) -> int:
        return sum(1 for node in self._graph.nodes
                   if node.scope and RECOMPUTE_SCOPE in node.scope.split("/") and node.op is not GETITEM_OP)

    def __repr__(self) -> str:
        return f"GraphInfo({self.hash}, {len(self._graph.nodes)} nodes)"


def sharding_layout(graph: Graph, compiled) -> dict:
    """How an SPMD graph's inputs and outputs are split over the devices, as its compile record keeps it.

    Args:
      graph: the graph, compiled for SPMD (its program partitioned over the mesh).
      compiled: its jax `Compiled`, whose input and output shardings XLA's partitioner settled.

    Returns:
      ``{"inputs": [...], "outputs": [...]}``, one entry per input and per output (`graph.roots`) in order:
      ``{"shape": "f32[16,8]", "sharding": "{devices=[4,1]0,1,2,3}", "device_bytes": 128}``, where
      `device_bytes` is what one device holds of it (the largest shard).
    """
    import jax

    def entries(nodes, shardings) -> list[dict]:
        out = []
        for node, sharding in zip(nodes, shardings):
            shape = tuple(node.meta.shape)
            out.append({"shape": plain_shape(node.meta), "sharding": sharding_text(sharding, len(shape)),
                        "device_bytes": math.prod(sharding.shard_shape(shape)) * node.meta.dtype.itemsize})
        return out

    return {"inputs": entries(graph.inputs, jax.tree.leaves(compiled.input_shardings[0])),
            "outputs": entries(graph.roots, jax.tree.leaves(compiled.output_shardings))}


def collectives_of(graph: Graph) -> list[tuple[str, int, str | None]]:
    """(op, bytes from this rank, the user's line) of each collective of `graph`, in order."""
    out = []
    for node in graph.collectives:
        nbytes = 0
        for operand in node.operands:
            numel = 1
            for size in operand.meta.shape:
                numel *= size
            nbytes += numel * operand.meta.dtype.itemsize
        out.append((node.op.name, nbytes, getattr(node, "site", None)))
    return out


def jax_calls_of(graph: Graph) -> tuple[str, ...]:
    """The names of the jax functions and Pallas kernels (`xla::call_jax` nodes) in `graph`, once each, in order."""
    names: dict[str, None] = {}
    for node in graph.nodes:
        if node.op.name == CALL_JAX_OP_NAME:
            names[node.template[0][1]] = None  # record(): template ((operands...), name, computation)
    return tuple(names)
