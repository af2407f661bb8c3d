"""Summaries of runtime graphs for the pure diff in `xladev.graphdiff` (no device buffers kept)."""

from __future__ import annotations

from xladev.graphdiff import GraphSummary, InputSummary, NodeSummary, closest, differences  # noqa: F401
from xladev.runtime.ir import DATA_OP, SCALAR_OP
from xladev.runtime.irtext import dtype_short, node_attributes, shape_text


def summarize(graph) -> GraphSummary:
    """A GraphSummary of a runtime Graph."""
    nodes = []
    inputs = []
    for node in graph.nodes:
        if node.op is DATA_OP or node.op is SCALAR_OP:
            inputs.append(InputSummary("scalar" if node.op is SCALAR_OP else "data", tuple(node.meta.shape),
                                       dtype_short(node.meta.dtype), getattr(node, "created_at", None)))
            continue
        nodes.append(NodeSummary(node.op.name, tuple(node_attributes(node)), shape_text(node.meta), node.location))
    return GraphSummary(graph.hash, tuple(nodes), tuple(inputs), len(graph.roots))
