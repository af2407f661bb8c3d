"""A graph as text: IR in PyTorch/XLA's format (`get_tensors_text`, graph dumps), Graphviz, root hashes.

    IR {
      %0 = f32[2,2]{1,0} xla::device_data(), xla_shape=f32[2,2]{1,0}
      %1 = f32[2,2]{1,0} aten::add(%0, %0), xla_shape=f32[2,2]{1,0}, ROOT=0
    }

Multi-output ops print a tuple shape and are referenced as `%N.i`, as in PyTorch/XLA.
"""

from __future__ import annotations

import hashlib

import torch

from xladev.runtime.ir import DATA_OP, GETITEM_OP, SCALAR_OP, SLOT, Frozen, Graph, Meta

_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "s64", torch.int32: "s32", torch.int16: "s16", torch.int8: "s8", torch.uint8: "u8",
    torch.bool: "pred", torch.complex64: "c64", torch.complex128: "c128", torch.uint32: "u32",
    torch.uint16: "u16", torch.uint64: "u64",
}


def dtype_short(dtype: torch.dtype) -> str:
    """XLA's short name of a dtype: f32, s64, pred..."""
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def shape_text(meta) -> str:
    """`f32[2,3]{1,0}`: dtype, dims and the row-major layout, as XLA prints shapes."""
    if meta is None:
        return "()"
    if not isinstance(meta, Meta):
        return "(" + ", ".join(shape_text(m) for m in meta) + ")"
    name = dtype_short(meta.dtype)
    dims = ",".join(str(d) for d in meta.shape)
    layout = "{" + ",".join(str(i) for i in reversed(range(len(meta.shape)))) + "}" if meta.shape else ""
    return f"{name}[{dims}]{layout}"


def _has_slot(value) -> bool:
    if value is SLOT:
        return True
    if type(value) is tuple:
        return any(_has_slot(v) for v in value)
    return False


def node_attributes(node) -> list[tuple[str, object]]:
    """The constants baked into a node, named by the op's schema (`eps`, `dim`...), in argument order.

    Operands (and arguments holding operands) are left out; they are the `%N` references.
    """
    template = node.template
    if template is None:
        return []
    args, kwargs = template
    schema_args = node.op.aten._schema.arguments if node.op.aten is not None else ()
    out = []
    for i, value in enumerate(args):
        if _has_slot(value) or isinstance(value, Frozen):
            continue
        name = schema_args[i].name if i < len(schema_args) else f"arg{i}"
        out.append((name, value))
    for name, value in kwargs:
        if not _has_slot(value) and not isinstance(value, Frozen):
            out.append((name, value))
    return out


def _attr_text(value) -> str:
    if isinstance(value, torch.dtype):
        return dtype_short(value)
    if type(value) is tuple:
        return "(" + ", ".join(_attr_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if isinstance(value, str) else str(value)


def graph_to_text(graph: Graph) -> str:
    """The IR text of a graph; roots are marked `ROOT=i` in root order."""
    numbers: dict[int, str] = {}
    lines = ["IR {"]
    roots: dict[int, list[int]] = {}
    for i, root in enumerate(graph.roots):
        roots.setdefault(id(root), []).append(i)
    counter = 0
    for node in graph.nodes:
        if node.op is GETITEM_OP:
            source = node.operands[0]
            index = node.template[0][1]
            numbers[id(node)] = f"{numbers[id(source)]}.{index}"
            if id(node) in roots:
                lines.append(f"  {numbers[id(node)]} = ROOT=" + ",".join(map(str, roots[id(node)])))
            continue
        ref = f"%{counter}"
        counter += 1
        numbers[id(node)] = ref
        operands = ", ".join(numbers[id(o)] for o in node.operands)
        shape = shape_text(node.meta)
        extra = "".join(f", {name}={_attr_text(value)}" for name, value in node_attributes(node))
        if node.scope:
            extra += f", scope={node.scope}"
        if node.location:
            extra += f", location={node.location}"
        if id(node) in roots:
            extra += ", ROOT=" + ",".join(map(str, roots[id(node)]))
        lines.append(f"  {ref} = {shape} {node.op.name}({operands}), xla_shape={shape}{extra}")
    lines.append("}")
    return "\n".join(lines) + "\n"


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
