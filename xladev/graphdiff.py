"""What changed between two graphs: inputs' shapes and dtypes, baked constants, the op sequence.

Pure data and functions (no torch, no runtime), shared by the live analysis, `assert_no_recompiles`
and `xladev diff` on dump files. Differences are ordered by how likely each is the root cause: an
input whose shape changed explains the downstream shape changes, so those are not repeated.
"""

from __future__ import annotations

import dataclasses
import re

MAX_LINES = 6


@dataclasses.dataclass(frozen=True)
class NodeSummary:
    op: str
    constants: tuple
    shape: str
    location: str | None


@dataclasses.dataclass(frozen=True)
class InputSummary:
    kind: str          # "data" (a device buffer) or "scalar" (a Python number fed as input)
    shape: tuple
    dtype: str         # XLA's short name: f32, s64, pred...
    created_at: str | None
    donated: bool = False  # its buffer is given to the executable (an in-place update's old value)


@dataclasses.dataclass
class GraphSummary:
    """A compiled graph, described without its buffers."""

    hash: str
    nodes: tuple[NodeSummary, ...]
    inputs: tuple[InputSummary, ...]
    num_outputs: int
    compile_ns: int = 0

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.op for n in self.nodes)


def _common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def closest(candidates: list[GraphSummary], new: GraphSummary) -> GraphSummary:
    """The earlier graph most like `new`: longest common op prefix, then same inputs, then most recent."""
    def score(item):
        index, old = item
        return (_common_prefix(old.ops, new.ops), len(old.inputs) == len(new.inputs), index)

    return max(enumerate(candidates), key=score)[1]


# What a line of `differences` says changed: the kinds the recompilation rule tells apart.
INPUT_SHAPE, CONSTANT, STRUCTURE = "input shape", "constant", "structure"


def change_kind(line: str) -> str:
    """`INPUT_SHAPE`, `CONSTANT` or `STRUCTURE` for one line written by `differences`."""
    if line.startswith(("input ", "Python scalar input ")) and ": shape " in line:
        return INPUT_SHAPE
    if line.startswith(("constant", "... and")) and "constant" in line or line.startswith("an input changed between"):
        return CONSTANT
    return STRUCTURE


def recompile_kind(lines) -> str:
    """What one recompilation changed, from its `differences` lines: only input shapes, only constants
    (shapes may follow), or the graph's structure."""
    kinds = {change_kind(line) for line in lines}
    if not kinds or STRUCTURE in kinds:
        return STRUCTURE
    return CONSTANT if CONSTANT in kinds else INPUT_SHAPE


def _input_text(index: int, inp: InputSummary) -> str:
    where = f", created at {inp.created_at}" if inp.created_at else ""
    what = "Python scalar input" if inp.kind == "scalar" else "input"
    return f"{what} {index}{where}"


def _meta_text(shape: tuple, dtype: str) -> str:
    return f"{dtype}[{','.join(map(str, shape))}]"


def _where(node: NodeSummary) -> str:
    return f" at {node.location}" if node.location else ""


# How a node recorded in the backward pass is located (`xladev.runtime.graph.stack.op_location`): the backward() line.
BACKWARD_SUFFIX = " (backward)"


def _cause_rank(node: NodeSummary) -> int:
    if not node.location:
        return 2
    return 1 if node.location.endswith(BACKWARD_SUFFIX) else 0


_CONSTANT_CHANGE_RE = re.compile(r"^constants? (?:(\S+) )?(?:baked into |of )(\S+?)(?: at (.+?))? changed: ")


def changed_constant(line: str) -> tuple[str, str | None] | None:
    """``(op, location)`` of one `differences` line saying a baked constant changed (location None when not
    recorded, ``fn@file.py:LINE`` or with `` (backward)``); None for another line."""
    match = _CONSTANT_CHANGE_RE.match(line)
    if match is None:
        return None
    return match.group(2), match.group(3)


def _inputs_added_removed(old: GraphSummary, new: GraphSummary) -> list[str]:
    from collections import Counter

    before = Counter(_meta_text(i.shape, i.dtype) for i in old.inputs)
    after = Counter(_meta_text(i.shape, i.dtype) for i in new.inputs)
    lines = []
    for label, diff in (("added", after - before), ("removed", before - after)):
        if diff:
            items = ", ".join(f"{shape} x{n}" if n > 1 else shape for shape, n in diff.most_common(5))
            more = f", ... ({sum(diff.values())} in all)" if len(diff) > 5 else ""
            lines.append(f"inputs {label}: {items}{more}")
    return lines


def _only_sizes_changed(a: tuple, b: tuple) -> bool:
    """Integer constants (sizes, dims) that follow an input's new shape are consequences, not causes."""
    for (_, x), (_, y) in zip(a, b):
        if x != y and not (isinstance(x, (int, tuple)) and isinstance(y, (int, tuple))
                           and not isinstance(x, bool) and not isinstance(y, bool)):
            return False
    return len(a) == len(b)


def _donation_changes(old: GraphSummary, new: GraphSummary) -> list[str]:
    """Inputs donated in one graph and not the other: the step barrier donates the old buffer of a tensor
    updated in place only when nothing else holds it, so keeping a reference to one changes the graph."""
    lines = []
    for i, (a, b) in enumerate(zip(old.inputs, new.inputs)):
        if a.donated != b.donated:
            now = "now donated" if b.donated else ("no longer donated: another tensor (a `copy_` of it, a view "
                                                    "read earlier) still holds its old buffer")
            lines.append(f"{_input_text(i, b)} ({_meta_text(b.shape, b.dtype)}) {now}")
    return lines


def differences(old: GraphSummary, new: GraphSummary) -> list[str]:
    """Readable differences of `new` against `old`, root causes first."""
    lines: list[str] = []
    if len(old.inputs) != len(new.inputs):
        lines.append(f"number of graph inputs changed: {len(old.inputs)} -> {len(new.inputs)}")
    if old.num_outputs != new.num_outputs:
        lines.append(f"number of graph outputs changed: {old.num_outputs} -> {new.num_outputs}")
    shape_changed = False
    if len(old.inputs) != len(new.inputs):
        # Positions no longer line up: say which inputs appeared or went away, by shape.
        lines.extend(_inputs_added_removed(old, new))
    for i, (a, b) in enumerate(zip(old.inputs, new.inputs) if len(old.inputs) == len(new.inputs) else ()):
        if (a.shape, a.dtype) == (b.shape, b.dtype):
            continue
        shape_changed = True
        detail = ""
        if a.dtype != b.dtype:
            detail = f"dtype {a.dtype} -> {b.dtype}"
        elif len(a.shape) != len(b.shape):
            detail = f"rank {len(a.shape)} -> {len(b.shape)}"
        else:
            dims = [f"dim {d}: {x} -> {y}" for d, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y]
            detail = ", ".join(dims)
        lines.append(f"{_input_text(i, b)}: shape {_meta_text(a.shape, a.dtype)} -> {_meta_text(b.shape, b.dtype)} ({detail})")
    if old.ops != new.ops:
        k = _common_prefix(old.ops, new.ops)
        if k < len(old.nodes) and k < len(new.nodes):
            lines.append(f"op sequence differs at node {k}: {old.nodes[k].op}{_where(old.nodes[k])} -> "
                         f"{new.nodes[k].op}{_where(new.nodes[k])}")
        elif k < len(new.nodes):
            lines.append(f"new graph has {len(new.nodes) - k} more op(s), starting with {new.nodes[k].op}{_where(new.nodes[k])}")
        else:
            lines.append(f"new graph has {len(old.nodes) - k} fewer op(s); the first missing is "
                         f"{old.nodes[k].op}{_where(old.nodes[k])}")
        lines.append(f"ops: {len(old.nodes)} -> {len(new.nodes)}")
    else:
        changed = 0
        pairs = [(a, b) for a, b in zip(old.nodes, new.nodes) if a.constants != b.constants
                 and not (shape_changed and _only_sizes_changed(a.constants, b.constants))]
        # Root cause first: a constant the user's own line passed (a slice bound), then those of the backward
        # pass (sizes that follow from it), then those recorded nowhere known.
        for a, b in sorted(pairs, key=lambda pair: _cause_rank(pair[1])):
            changed += 1
            if changed <= 3:
                for (name, before), (_, after) in zip(a.constants, b.constants):
                    if before != after:
                        label = f"constant {name}" if name else "constant"
                        lines.append(f"{label} baked into {b.op}{_where(b)} changed: {before!r} -> {after!r}")
                if len(a.constants) != len(b.constants):
                    lines.append(f"constants of {b.op}{_where(b)} changed: {a.constants} -> {b.constants}")
        if changed > 3:
            lines.append(f"... and {changed - 3} more changed constant(s)")
        if not changed and not shape_changed:
            for a, b in zip(old.nodes, new.nodes):
                if a.shape != b.shape:
                    lines.append(f"output shape of {b.op}{_where(b)} changed: {a.shape} -> {b.shape}")
                    break
    for a, b in zip(old.inputs, new.inputs):
        if a.kind != b.kind:
            lines.append("an input changed between device data and a Python scalar")
            break
    if not lines:
        lines.extend(_donation_changes(old, new))
    if not lines:
        lines.append("same ops, shapes and constants; the inputs are aliased differently (the same tensor passed twice?)")
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES} more difference(s)"]
    return lines



def summary_to_json(summary: GraphSummary) -> str:
    """A GraphSummary as JSON text (to hand a graph's description to another process)."""
    import json

    return json.dumps(dataclasses.asdict(summary), default=repr)


def summary_from_json(text: str) -> GraphSummary:
    """The GraphSummary of `summary_to_json`'s text.

    Raises:
      ValueError: the text is not such JSON.
    """
    import json

    def tuples(value):  # JSON has lists only; constants were tuples
        return tuple(tuples(v) for v in value) if isinstance(value, list) else value

    data = json.loads(text)
    nodes = tuple(NodeSummary(n["op"], tuples(n["constants"]), n["shape"], n["location"]) for n in data["nodes"])
    inputs = tuple(InputSummary(i["kind"], tuple(i["shape"]), i["dtype"], i["created_at"], i["donated"])
                   for i in data["inputs"])
    return GraphSummary(data["hash"], nodes, inputs, data["num_outputs"], data.get("compile_ns", 0))
