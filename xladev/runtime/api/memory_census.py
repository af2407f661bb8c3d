"""What holds device memory now: every live buffer, what kind of tensor holds it, and the user line that made it.

`xladev.debug.memory_report()` and `live_buffers()` read this. A census walks the Python heap once (the garbage
collector's objects) to find the device tensors, the optimizers and the autograd graphs that hold buffers, so it
costs a fraction of a second and is taken when asked, never per op. Each buffer gets one kind, the first that applies:

- `parameter`: an `nn.Parameter`'s data;
- `gradient`: a parameter's `.grad`;
- `optimizer state`: a value in an optimizer's `state` (Adam's moments, momentum buffers);
- `saved activation`: a tensor an autograd graph keeps for its backward pass;
- `batch`: data uploaded from the host that none of the above holds (inputs, labels);
- `other`: any other tensor's data (a loss kept in a list, a metric);
- `runtime`: a live device array no tensor holds: the scalar cache (Python numbers fed to graphs, bounded), the RNG
  key, a buffer kept for donation.

The line is where the data was made: an upload's user line, or the user line that recorded the op whose result the
buffer holds (the op's own line under XLA_IR_DEBUG=1, else the line where an op of its signature was first recorded).
Buffers are counted once however many tensors (views, saved copies) share them; their sum is checked against jax's
own live arrays, which `device_bytes` gives.
"""

from __future__ import annotations

import dataclasses
import gc

import torch

from xladev.runtime.execute import device_memory
from xladev.runtime.execute.execution import execution
from xladev.runtime.graph import backend
from xladev.runtime.graph.ir import DataNode
from xladev.runtime.graph.irtext import shape_text
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.tensor import XlaTensor
from xladev.schema.units import format_bytes

# The kinds, in the order a buffer held by several takes the first.
KINDS = ("parameter", "gradient", "optimizer state", "saved activation", "batch", "other", "runtime")
UNKNOWN_LINE = "an unknown line"
# What a `runtime` buffer is, where a line would be.
SCALAR_CACHE = "the scalar cache (Python numbers fed to graphs)"
RUNTIME_STATE = "the runtime's own state (the RNG key, buffers kept for donation)"
STALE_VIEW = "an earlier step's graph, kept by a view's cached value until the view is read again"


@dataclasses.dataclass(frozen=True)
class LiveBuffer:
    """One live device buffer.

    Attributes:
      nbytes: its size in bytes.
      shape: its shape and dtype as the IR prints them (`f32[16,32]`).
      kind: one of `KINDS`.
      line: `fn@file.py:LINE` of the user's line that made it, or `UNKNOWN_LINE`.
      tensors: how many device tensors hold it (0 for `runtime`).
    """

    nbytes: int
    shape: str
    kind: str
    line: str
    tensors: int


@dataclasses.dataclass(frozen=True)
class MemoryRow:
    """The buffers of one kind made at one line: the memory report's row."""

    kind: str
    line: str
    buffers: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    """A census of one device's memory.

    Attributes:
      device: `xla:N`.
      buffers: every live buffer, biggest first.
      device_bytes: what jax's live arrays on the device add up to (each buffer once): the census' total is this.
      pending: device tensors whose value is not computed yet (they hold no buffer until the next barrier).
    """

    device: str
    buffers: tuple[LiveBuffer, ...]
    device_bytes: int
    pending: int

    @property
    def total_bytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)

    def rows(self) -> list[MemoryRow]:
        """The buffers grouped by kind and line, biggest first."""
        groups: dict[tuple[str, str], list[int]] = {}
        for b in self.buffers:
            group = groups.setdefault((b.kind, b.line), [0, 0])
            group[0] += 1
            group[1] += b.nbytes
        rows = [MemoryRow(kind, line, count, nbytes) for (kind, line), (count, nbytes) in groups.items()]
        rows.sort(key=lambda r: (-r.nbytes, KINDS.index(r.kind), r.line))
        return rows

    def by_kind(self) -> dict[str, int]:
        """Bytes per kind, in `KINDS` order (kinds with no buffer left out)."""
        totals = {kind: 0 for kind in KINDS}
        for b in self.buffers:
            totals[b.kind] += b.nbytes
        return {kind: n for kind, n in totals.items() if n}

    def render(self, top: int = 10) -> str:
        """The report as text: a headline, then the `top` biggest holders by kind and line.

        Args:
          top: how many rows to show (the rest are summed on one line).

        Returns:
          The text.
        """
        lines = [f"Device memory on {self.device}: {format_bytes(self.total_bytes)} in {len(self.buffers)} "
                 f"buffer(s) (jax's live arrays: {format_bytes(self.device_bytes)})"]
        kinds = ", ".join(f"{kind} {format_bytes(n)}" for kind, n in self.by_kind().items())
        if kinds:
            lines.append(f"  by kind: {kinds}")
        if self.pending:
            lines.append(f"  {self.pending} tensor(s) not computed yet hold no memory until the next barrier")
        rows = self.rows()
        if rows:
            lines.append(f"  {'bytes':>10}  {'buffers':>7}  {'kind':<16}  made at")
            lines += [f"  {format_bytes(r.nbytes):>10}  {r.buffers:>7}  {r.kind:<16}  {r.line}" for r in rows[:top]]
            rest = rows[top:]
            if rest:
                lines.append(f"  {format_bytes(sum(r.nbytes for r in rest)):>10}  "
                             f"{sum(r.buffers for r in rest):>7}  in {len(rest)} more row(s)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def census(device_index: int = 0) -> MemoryReport:
    """Takes a census of one device's live buffers (see the module's docstring).

    Args:
      device_index: the xla device's index in this process.

    Returns:
      The report.

    Raises:
      ValueError: this process has no such device.
    """
    device = backend.jax_devices()[backend.check_index(device_index)]
    tensors, optimizers = _heap_objects()
    holders: dict[int, list] = {}  # buffer key -> [rank of its kind, (line, uploaded), tensor count, nbytes, shape]
    visited: set[int] = set()

    def hold(t, rank: int) -> None:
        if id(t) in visited or t._st.device_index != device_index:
            return
        visited.add(id(t))
        nodes = (t._st.value, t._vnode if t._chain is not None else None)  # a view may hold its own replayed data
        for node in nodes:
            if type(node) is not DataNode or node.array is None:
                continue
            for key, nbytes in device_memory.buffers_on(node.array, device):
                held = holders.get(key)
                if held is None:
                    holders[key] = [rank, _line_of(node), 1, nbytes, shape_text(node.meta)]
                else:
                    held[0] = min(held[0], rank)
                    held[2] += 1

    params, grads, states = [], [], []
    for t in tensors:
        if isinstance(t, torch.nn.Parameter):
            params.append(t)
            if isinstance(t.grad, XlaTensor):
                grads.append(t.grad)
    for opt in optimizers:
        for state in list(opt.state.values()):
            if isinstance(state, dict):
                states += [v for v in state.values() if isinstance(v, XlaTensor)]
    groups = ((params, "parameter"), (grads, "gradient"), (states, "optimizer state"),
              (_saved_tensors(tensors), "saved activation"), (tensors, "other"))  # `other` is a batch when uploaded
    for group, kind in groups:
        for t in group:
            hold(t, KINDS.index(kind))
    pending = len({id(t._st) for t in tensors
                   if t._st.device_index == device_index and type(t._st.value) is not DataNode})
    buffers = []
    for key, (rank, line, count, nbytes, shape) in holders.items():
        kind = KINDS[rank]
        if kind == "other" and line[1]:
            kind = "batch"
        buffers.append(LiveBuffer(nbytes, shape, kind, line[0], count))
    live = device_memory.live_buffers(device)
    cached = {device_memory.buffer_key(a) for a in list(execution.scalars.values())}
    stale = _stale_view_inputs(tensors, device)
    for key, nbytes in live.items():
        if key not in holders:
            what = SCALAR_CACHE if key in cached else STALE_VIEW if key in stale else RUNTIME_STATE
            buffers.append(LiveBuffer(nbytes, "", "runtime", what, 0))
    buffers.sort(key=lambda b: (-b.nbytes, KINDS.index(b.kind), b.line))
    return MemoryReport(f"xla:{device_index}", tuple(buffers), sum(live.values()), pending)


def _heap_objects() -> tuple[list, list]:
    """The live device tensors and optimizers, from the garbage collector's objects.

    The test is on the type, never `isinstance` on the object: that reads `__class__`, which some objects compute
    (with warnings or errors)."""
    tensors, optimizers = [], []
    optimizer_type = torch.optim.Optimizer
    for obj in gc.get_objects():
        cls = type(obj)
        if issubclass(cls, XlaTensor):
            tensors.append(obj)
        elif issubclass(cls, optimizer_type):
            optimizers.append(obj)
    return tensors, optimizers


def _stale_view_inputs(tensors: list, device) -> set[int]:
    """The buffers that views' cached values from before a barrier still reach.

    A view caches the IR node it last replayed; after a barrier computes its base, that node is stale but kept
    until the view is read again, and with it the inputs of the graph it was part of (an earlier batch)."""
    keys: set[int] = set()
    seen: set[int] = set()
    stack = [t._vnode for t in tensors
             if t._chain is not None and t._vver != t._st.version and t._vnode is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is DataNode:
            if node.array is not None and not node.array.is_deleted():
                keys.update(key for key, _ in device_memory.buffers_on(node.array, device))
            continue
        stack += node.operands
    return keys


def _saved_tensors(tensors: list) -> list:
    """The device tensors that the autograd graphs of these tensors keep for their backward pass."""
    saved, seen = [], set()
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        for name in dir(fn):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(fn, name)
            except RuntimeError:  # freed by a backward pass already run
                continue
            values = value if isinstance(value, (tuple, list)) else (value,)
            saved += [v for v in values if isinstance(v, XlaTensor)]
        stack += [next_fn for next_fn, _ in fn.next_functions]
    return saved


def _line_of(node: DataNode) -> tuple[str, bool]:
    """(the user line that made the data, whether it was uploaded)."""
    origin = node.origin
    if type(origin) is str:
        return origin, True
    if origin is not None:
        op_name, template, location = origin
        if location:
            return location, False
        try:
            first = recorder.first_seen_at.get((op_name, template))
        except TypeError:  # an unhashable template was never located
            first = None
        if first:
            return first, False
    return UNKNOWN_LINE, False
