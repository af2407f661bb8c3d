"""IR text in PyTorch/XLA's format (`get_tensors_text`, graph dumps).

    IR {
      %0 = f32[2,2]{1,0} xla::device_data(), xla_shape=f32[2,2]{1,0}
      %1 = f32[2,2]{1,0} aten::add(%0, %0), xla_shape=f32[2,2]{1,0}, ROOT=0
    }

Multi-output ops print a tuple shape and are referenced as `%N.i`, as in PyTorch/XLA.
"""

from __future__ import annotations

import torch

from xladev.runtime.ir import GETITEM_OP, Graph, Meta

_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "s64", torch.int32: "s32", torch.int16: "s16", torch.int8: "s8", torch.uint8: "u8",
    torch.bool: "pred", torch.complex64: "c64", torch.complex128: "c128", torch.uint32: "u32",
    torch.uint16: "u16", torch.uint64: "u64",
}


def shape_text(meta) -> str:
    """`f32[2,3]{1,0}`: dtype, dims and the row-major layout, as XLA prints shapes."""
    if meta is None:
        return "()"
    if not isinstance(meta, Meta):
        return "(" + ", ".join(shape_text(m) for m in meta) + ")"
    name = _SHORT.get(meta.dtype, str(meta.dtype).replace("torch.", ""))
    dims = ",".join(str(d) for d in meta.shape)
    layout = "{" + ",".join(str(i) for i in reversed(range(len(meta.shape)))) + "}" if meta.shape else ""
    return f"{name}[{dims}]{layout}"


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
        extra = ""
        if node.scope:
            extra += f", scope={node.scope}"
        if node.location:
            extra += f", location={node.location}"
        if id(node) in roots:
            extra += ", ROOT=" + ",".join(map(str, roots[id(node)]))
        lines.append(f"  {ref} = {shape} {node.op.name}({operands}), xla_shape={shape}{extra}")
    lines.append("}")
    return "\n".join(lines) + "\n"
