"""A graph as text: IR in PyTorch/XLA's format (`get_tensors_text`, graph dumps), Graphviz, root hashes.

    IR {
      %0 = f32[2,2]{1,0} xla::device_data(), xla_shape=f32[2,2]{1,0}
      %1 = f32[2,2]{1,0} aten::add(%0, %0), xla_shape=f32[2,2]{1,0}, ROOT=0
    }

Multi-output ops print a tuple shape and are referenced as `%N.i`, as in PyTorch/XLA. A special scalar
(0, 1, -1) baked into an op prints as its own `prim::Constant` operand, as PyTorch/XLA prints its
constant scalars, with the dtype PyTorch/XLA gives it (runtime/graph/scalars.py); in the graph it stays a
constant of the op's lowering, never an input:

      %1 = f32[] prim::Constant(), xla_shape=f32[], value=1
      %2 = f32[2,2]{1,0} aten::add(%0, %1), xla_shape=f32[2,2]{1,0}
"""

from __future__ import annotations

import hashlib

import torch

from xladev.runtime.graph import scalars
from xladev.runtime.graph.ir import DATA_OP, GETITEM_OP, SCALAR_OP, SLOT, Frozen, Graph, Meta
from xladev.runtime.graph.op_traits import op_traits

_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "s64", torch.int32: "s32", torch.int16: "s16", torch.int8: "s8", torch.uint8: "u8",
    torch.bool: "pred", torch.complex64: "c64", torch.complex128: "c128", torch.uint32: "u32",
    torch.uint16: "u16", torch.uint64: "u64",
}


def dtype_short(dtype: torch.dtype) -> str:
    """XLA's short name of a dtype: f32, s64, pred..."""
    return _SHORT.get(dtype, str(dtype).replace("torch.", ""))


def plain_shape(meta) -> str:
    """`f32[2,3]`: a shape without its layout, as PyTorch/XLA prints a tensor's (debug info, dumps' output
    shardings), unlike the IR text's."""
    return f"{dtype_short(meta.dtype)}[{','.join(str(d) for d in meta.shape)}]"


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


def node_attributes(node, numbers: bool = True) -> list[tuple[str, object]]:
    """The constants baked into a node, named by the op's schema (`eps`, `dim`...), in argument order.

    Operands (and arguments holding operands) are left out; they are the `%N` references. With
    `numbers=False`, so are the numbers in Scalar and Tensor slots (`constants`, printed as operands).
    """
    template = node.template
    if template is None:
        return []
    args, kwargs = template
    aten = node.op.aten
    names = [a.name for a in aten._schema.arguments] if aten is not None else list(node.op.params)
    traits = op_traits(aten) if aten is not None and not numbers else None
    out = []
    for i, value in enumerate(args):
        if _has_slot(value) or isinstance(value, Frozen):
            continue
        if traits is not None and i in traits.scalar_positions and _is_number(value):
            continue
        name = names[i] if i < len(names) else f"arg{i}"
        out.append((name, value))
    for name, value in kwargs:
        if _has_slot(value) or isinstance(value, Frozen):
            continue
        if traits is not None and name in traits.scalar_names and _is_number(value):
            continue
        out.append((name, value))
    return out


def _operand_refs(node, numbers: dict, new_constant) -> list[str]:
    """The `%N` of each operand in argument order, with a `prim::Constant` made for each baked number."""
    refs = [numbers[id(o)] for o in node.operands]
    for k, (before, value) in enumerate(constants(node)):
        refs.insert(before + k, new_constant(value))
    return refs


def _slots(value) -> int:
    if value is SLOT:
        return 1
    if type(value) is tuple:
        return sum(_slots(v) for v in value)
    return 0


def _is_number(value) -> bool:
    return type(value) is int or type(value) is float


def constants(node) -> list[tuple[int, object]]:
    """The Python numbers baked into an op's Scalar and Tensor slots (the special scalars 0, 1, -1):
    PyTorch/XLA's `prim::Constant` operands. Each is (how many operands precede it, value)."""
    aten = node.op.aten
    template = node.template
    if aten is None or template is None:
        return []
    traits = op_traits(aten)
    args, kwargs = template
    found = []
    before = 0
    for i, value in enumerate(args):
        if i in traits.scalar_positions and _is_number(value):
            found.append((before, value))
        elif not isinstance(value, Frozen):
            before += _slots(value)
    for name, value in kwargs:
        if name in traits.scalar_names and _is_number(value):
            found.append((before, value))
        elif not isinstance(value, Frozen):
            before += _slots(value)
    return found


def constant_meta(node, value) -> Meta:
    """The 0-d shape and dtype of a constant baked into `node`, as PyTorch/XLA types it."""
    template = node.template
    traits = op_traits(node.op.aten)
    kinds = [type(v) for i, v in enumerate(template[0]) if i in traits.scalar_positions and _is_number(v)]
    kinds += [type(v) for k, v in template[1] if k in traits.scalar_names and _is_number(v)]
    out = node.meta
    while out is not None and type(out) is not Meta:
        out = next((m for m in out if m is not None), None)
    dtype = scalars.scalar_dtype(node.op.aten, type(value), [o.meta for o in node.operands], kinds,
                                 None if out is None else out.dtype)
    return Meta((), dtype)


def scalar_text(value) -> str:
    """A number as PyTorch/XLA prints a scalar's value: `1`, `-0`, `0.5` (C++ stream formatting)."""
    return f"{value:g}" if type(value) is float else str(value)


def _attr_text(value) -> str:
    if isinstance(value, torch.dtype):
        return dtype_short(value)
    if type(value) is tuple:
        return "(" + ", ".join(_attr_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if isinstance(value, str) else str(value)


def bodies_of(graph: Graph) -> list:
    """The sub-graphs (`subgraph.Body`) the graph's nodes run, nested ones included, each once, in order met.

    A node holds a body in its template (a scan's `body=`): any template value with a `graph` that is a Graph.
    """
    found: dict[str, object] = {}
    todo = [graph]
    while todo:
        for node in todo.pop(0).nodes:
            template = node.template
            if template is None or not template[1]:
                continue
            for _, value in template[1]:
                inner = getattr(value, "graph", None)
                if isinstance(inner, Graph) and value.name not in found:
                    found[value.name] = value
                    todo.append(inner)
    return list(found.values())


def graph_to_text(graph: Graph) -> str:
    """The IR text of a graph; roots are marked `ROOT=i` in root order. Each body a node runs (a scan's)
    follows, once, as `body_<hash> { ... }`, its parameters numbered by `index=`."""
    text = _ir_block(graph, "IR")
    for body in bodies_of(graph):
        text += "\n" + _ir_block(body.graph, body.name)
    return text


def _ir_block(graph: Graph, title: str) -> str:
    numbers: dict[int, str] = {}
    lines = [f"{title} {{"]
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
        context = ""
        if node.scope:
            context += f", scope={node.scope}"
        if node.location:
            context += f", location={node.location}"

        def new_constant(value, node=node, context=context):
            nonlocal counter
            ref = f"%{counter}"
            counter += 1
            const_shape = shape_text(constant_meta(node, value))
            lines.append(f"  {ref} = {const_shape} prim::Constant(), xla_shape={const_shape}, "
                         f"value={scalar_text(value)}{context}")
            return ref

        operands = ", ".join(_operand_refs(node, numbers, new_constant))
        ref = f"%{counter}"
        counter += 1
        numbers[id(node)] = ref
        shape = shape_text(node.meta)
        extra = "".join(f", {name}={_attr_text(value)}" for name, value in node_attributes(node, numbers=False))
        name = node.op.name
        param = getattr(node, "param_index", None)
        if param is not None:  # a body's parameter (subgraph.ParamNode)
            name = "xla::parameter"
            extra += f", index={param}"
        sharding = getattr(node, "sharding", None)
        if sharding:  # as PyTorch/XLA prints a sharded tensor's IR
            extra += f", sharding={sharding}"
        extra += context
        if id(node) in roots:
            extra += ", ROOT=" + ",".join(map(str, roots[id(node)]))
        lines.append(f"  {ref} = {shape} {name}({operands}), xla_shape={shape}{extra}")
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
        consts = []
        for _, value in constants(node):
            const = f"node{count}"
            count += 1
            consts.append(const)
            lines.append(f'  {const} [label="prim::Constant\\n{shape_text(constant_meta(node, value))}'
                         f'\\nvalue={scalar_text(value)}"]')
        name = f"node{count}"
        count += 1
        names[id(node)] = name
        label = f"{node.op.name}\\n{shape_text(node.meta)}"
        attrs = node_attributes(node, numbers=False)
        if attrs:
            label += "\\n" + ", ".join(f"{k}={v}" for k, v in attrs)[:80].replace('"', "'")
        if node.location:
            label += f"\\n{node.location}"
        style = ', style="filled", fillcolor="lightblue"' if id(node) in roots else ""
        lines.append(f'  {name} [label="{label}"{style}]')
        for source in [names[id(o)] for o in node.operands] + consts:
            lines.append(f"  {source} -> {name}")
    lines.append("}")
    return "\n".join(lines) + "\n"
