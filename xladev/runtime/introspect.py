"""Looking at pending graphs without running them: IR text, HLO, StableHLO, Graphviz, hashes."""

from __future__ import annotations

import hashlib

from xladev.runtime.ir import DATA_OP, GETITEM_OP, SCALAR_OP, Graph
from xladev.runtime.irtext import graph_to_text, node_attributes, shape_text


def graph_of(tensors) -> Graph:
    """The graph computing these device tensors (their current values), as a barrier would build it."""
    from xladev.runtime.tensor import XlaTensor

    nodes = []
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"expected xla tensors, got {type(t).__name__} on {getattr(t, 'device', '?')}")
        nodes.append(t._node())
    return Graph(nodes)


def pending_graph() -> Graph:
    """The graph the next `mark_step` would run (every live tensor with pending IR)."""
    from xladev.runtime.tensor import pending_storages

    storages = pending_storages()
    return Graph([s.value for s in storages])


def lowered(graph: Graph):
    """jax's Lowered object of a graph (lowering only; nothing is compiled or run)."""
    import jax

    from xladev.runtime import backend
    from xladev.runtime.executor import graph_function

    avals = [jax.ShapeDtypeStruct(n.meta.shape, backend.to_jnp_dtype(n.meta.dtype)) for n in graph.inputs]
    return jax.jit(graph_function(graph)).lower(*avals)


def root_hashes(graph: Graph) -> list[str]:
    """A structural hash per root: its op, attributes, shape and its operands' hashes."""
    hashes: list[str] = []
    input_pos = {id(n): i for i, n in enumerate(graph.inputs)}
    for node in graph.nodes:
        h = hashlib.md5()
        if node.op is DATA_OP or node.op is SCALAR_OP:
            h.update(f"input{input_pos[id(node)]}:{shape_text(node.meta)}".encode())
        else:
            h.update(repr(node.signature()).encode())
            for operand in node.operands:
                h.update(hashes[graph.position(operand)].encode())
        hashes.append(h.hexdigest())
    return [hashes[graph.position(r)] for r in graph.roots]


def graph_to_dot(graph: Graph) -> str:
    """Graphviz text of a graph: one node per op, edges from operands, roots marked."""
    lines = ["digraph G {"]
    roots = {id(r): i for i, r in enumerate(graph.roots)}
    names = {}
    count = 0
    for node in graph.nodes:
        if node.op is GETITEM_OP:
            source = names[id(node.operands[0])]
            names[id(node)] = source
            continue
        name = f"node{count}"
        count += 1
        names[id(node)] = name
        label = f"{node.op.name}\\n{shape_text(node.meta)}"
        attrs = node_attributes(node)
        if attrs:
            label += "\\n" + ", ".join(f"{k}={v}" for k, v in attrs)[:80].replace('"', "'")
        if node.location:
            label += f"\\n{node.location}"
        style = ', style="filled", fillcolor="lightblue"' if id(node) in roots else ""
        lines.append(f'  {name} [label="{label}"{style}]')
        for operand in node.operands:
            lines.append(f"  {names[id(operand)]} -> {name}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def text(graph: Graph) -> str:
    return graph_to_text(graph)
