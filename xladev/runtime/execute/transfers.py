"""Host<->device copies: uploads, downloads and printing, and the exact cause of each value read."""

from __future__ import annotations

import contextlib
import threading
import time
import weakref

import numpy as np
import torch

from xladev.events import Cause, CauseKind, TransferFromDevice, bus
from xladev.runtime.graph import annotate, backend, device_put, fork_guard, stack, steps
from xladev.runtime.graph.span_clock import spent
from xladev.runtime.execute.execution import execution
from xladev.runtime.graph.ir import DataNode, Meta, rebuild
from xladev.runtime.graph.stack import user_location

_local = threading.local()

# While the host-memory watch suspects growth (runtime/api/host_memory_growth.py), each CPU copy a read makes is
# noted here, {id: (weak reference, the user line that read it)}, so the census can name what keeps them. None:
# nothing is noted, and a read pays nothing for it.
host_copy_lines: dict | None = None


def _note_host_copy(cpu: torch.Tensor) -> None:
    lines = host_copy_lines
    if lines is None:
        return
    key = id(cpu)
    lines[key] = (weakref.ref(cpu, lambda _ref, k=key: lines.pop(k, None)), user_location() or "an unknown line")


@contextlib.contextmanager
def reading(kind: str):
    """Names the value access in progress; the outermost one wins (`.tolist()` over its inner `.cpu()`)."""
    outer = getattr(_local, "kind", None)
    if outer is None:
        _local.kind = kind
    try:
        yield
    finally:
        if outer is None:
            _local.kind = None


@contextlib.contextmanager
def sync_cause(cause: Cause):
    """Overrides the cause of reads inside the block (fallback ops, step closures)."""
    outer = getattr(_local, "cause", None)
    _local.cause = cause
    try:
        yield
    finally:
        _local.cause = outer


def current_cause(default_kind: str) -> Cause:
    cause = getattr(_local, "cause", None)
    if cause is not None:
        return cause
    return Cause(CauseKind.VALUE_ACCESS, getattr(_local, "kind", None) or default_kind)


def arrays_of(tensors: list, cause: Cause) -> list:
    """Device arrays for these tensors (XlaTensors), syncing what is pending in one graph.

    Raises:
      RuntimeError: in a forked child of a process that had started the device (fork_guard).
    """
    fork_guard.check()
    bases = [t._st for t in tensors if t._chain is None and type(t._st.value) is not DataNode]
    if bases:
        execution.sync_storages(list({id(s): s for s in bases}.values()), cause,
                                stack.capture_frames() if bus.wants_frames else None)
    nodes = [t._node() for t in tensors]
    arrays: list = [None] * len(tensors)
    by_device: dict[int, list[int]] = {}
    for i, t in enumerate(tensors):
        by_device.setdefault(t._st.device_index, []).append(i)
    for device_index, positions in sorted(by_device.items()):  # one graph per device
        got = execution.materialize([nodes[i] for i in positions], cause, device_index)
        for i, array in zip(positions, got):
            arrays[i] = array
    for t, node, array in zip(tensors, nodes, arrays):
        if t._chain is not None and type(node) is not DataNode:
            t._vnode = DataNode(array, node.meta)
            t._vver = t._st.version
    return arrays


def download(tensors: list, default_kind: str = ".cpu()") -> list[torch.Tensor]:
    """CPU copies of device tensors, each read counted as a device→host transfer with its cause.

    While a profile records, a value read (not a fallback op's, which its own span covers) shows as
    `xladev.sync <kind>` around the graph it forces and the copies, each copy as `xladev.from_device`.
    """
    cause = current_cause(default_kind)
    kind = cause.detail or cause.kind.value
    if cause.kind is CauseKind.FALLBACK:
        span = annotate.NULL
    elif cause.kind is CauseKind.STEP_CLOSURE:
        access = getattr(_local, "kind", None) or default_kind
        span = annotate.sync_span(f"{access} in a step closure", steps.current())
    else:
        span = annotate.sync_span(kind, steps.current())
    with span:
        # A view of computed data (`t[i]`, a slice, a transpose) is read from its base's host copy: compiling a
        # graph per view would compile once per row of `for row in t: row.item()`.
        on_host = [_host_view_source(t) for t in tensors]
        arrays = [None] * len(tensors)
        rest = [i for i, source in enumerate(on_host) if source is None]
        if rest:
            for i, array in zip(rest, arrays_of([tensors[i] for i in rest], cause)):
                arrays[i] = array
            execution.settle()  # the transfer's time is the copy's, not the wait for a graph still running
        out = []
        for t, array, source in zip(tensors, arrays, on_host):
            start = time.perf_counter_ns()
            if source is not None:
                with annotate.from_device_span(t.numel() * t.element_size(), kind, steps.current()):
                    cpu = _read_view(t, *source)
            else:
                with annotate.from_device_span(array.nbytes, kind, steps.current()):
                    host = np.asarray(array)
                cpu = backend.numpy_to_torch(host, t.dtype)
            copy_ns = time.perf_counter_ns() - start
            spent(copy_ns)
            if bus.active:
                bus.emit(TransferFromDevice(time.perf_counter_ns(), steps.current(), cpu.numel() * cpu.element_size(),
                                            copy_ns, kind,
                                            stack.capture_frames() if bus.wants_frames else None))
            _note_host_copy(cpu)
            out.append(cpu)
    return out


def _host_view_source(t):
    """`(base array, base dtype)` when `t` is a view of device data on one device whose every view op is an aten
    op (read on the host by `_read_view`), else None (the view is computed on the device)."""
    chain = t._chain
    if chain is None:
        return None
    base = t._st.value
    if type(base) is not DataNode or base.array is None or len(base.array.sharding.device_set) != 1:
        return None
    if any(step.opdef.aten is None for step in chain):
        return None
    return base.array, base.meta.dtype


def _read_view(t, array, dtype: torch.dtype) -> torch.Tensor:
    """The value of view `t`: its aten view ops replayed on the CPU over the base's host copy (jax keeps that
    copy with the array, so reading many views of one base copies it from the device once)."""
    value = backend.numpy_to_torch(array, dtype, copy=False)
    for step in t._chain:
        args, kwargs = rebuild(step.template, [value])
        value = step.opdef.aten(*args, **kwargs)
        if step.index is not None:
            value = value[step.index]
        if value.is_conj() or value.is_neg():  # device tensors carry no such bit: `_conj` is the conjugate itself
            value = value.resolve_conj().resolve_neg()
    return value.clone(memory_format=torch.contiguous_format)  # a copy of its own, contiguous, as a device read


def tensor_repr(t) -> str:
    """`repr` of a device tensor as eager PyTorch prints it, with `device='xla:N'`."""
    with reading("print"):
        cpu = download([t], "print")[0]
    text = torch._tensor_str._str(cpu)
    contents = torch._tensor_str._tensor_str(cpu, len("tensor(")) if cpu.numel() else "[]"
    at = text.find(contents)
    insert_at = at + len(contents) if at >= 0 else len(text) - 1
    suffix = f", device='{t.device}'"
    if t.grad_fn is not None:
        tail = f", grad_fn=<{type(t.grad_fn).__name__}>"
    elif t.requires_grad:
        tail = ", requires_grad=True"
    else:
        tail = ""
    text = text[:insert_at] + suffix + text[insert_at:]
    return text[:-1] + tail + ")" if tail else text


def upload(cpu: torch.Tensor, device_index: int = 0) -> DataNode:
    """Copies a CPU tensor to the device and returns its data node (counted as a host→device transfer)."""
    array = device_put.put(backend.torch_to_numpy(cpu), device_index)
    # The line always, for the live-memory census (a batch or a parameter is named by it): an upload costs far
    # more than finding it. `created_at` keeps it only for the sinks that want frames, as before.
    location = user_location()
    data = DataNode(array, Meta(tuple(cpu.shape), cpu.dtype), location if bus.wants_frames else None)
    data.origin = location
    return data
