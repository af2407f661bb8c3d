"""Reading values back to the host: the exact cause of each read, downloads, and printing."""

from __future__ import annotations

import contextlib
import threading
import time

import torch

from xladev.events import Cause, CauseKind, TransferFromDevice, bus
from xladev.runtime import backend
from xladev.runtime.ir import DataNode

_local = threading.local()


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
    """Device arrays for these tensors, syncing what is pending in one graph."""
    from xladev.runtime.executor import executor

    bases = [t._st for t in tensors if t._chain is None and type(t._st.value) is not DataNode]
    if bases:
        executor.sync_storages(list({id(s): s for s in bases}.values()), cause,
                               _frames() if bus.wants_frames else None)
    nodes = [t._node() for t in tensors]
    arrays = executor.materialize(nodes, cause)
    for t, node, array in zip(tensors, nodes, arrays):
        if t._chain is not None and type(node) is not DataNode:
            t._vnode = DataNode(array, node.meta)
            t._vver = t._st.version
    return arrays


def _frames():
    from xladev.runtime.executor import capture_frames

    return capture_frames()


def download(tensors: list, default_kind: str = ".cpu()") -> list[torch.Tensor]:
    """CPU copies of device tensors, each read counted as a device→host transfer with its cause."""
    import numpy as np

    from xladev.runtime.executor import executor

    cause = current_cause(default_kind)
    arrays = arrays_of(tensors, cause)
    executor.settle()  # the transfer's time is the copy's, not the wait for a graph still running
    out = []
    for t, array in zip(tensors, arrays):
        start = time.perf_counter_ns()
        host = np.asarray(array)
        cpu = backend.numpy_to_torch(host, t.dtype)
        if bus.active:
            bus.emit(TransferFromDevice(time.perf_counter_ns(), _step(), cpu.numel() * cpu.element_size(),
                                        time.perf_counter_ns() - start, cause.detail or cause.kind.value,
                                        _frames() if bus.wants_frames else None))
        out.append(cpu)
    return out


def _step() -> int:
    from xladev.runtime.executor import executor

    return executor.step


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
    from xladev.events import TransferToDevice
    from xladev.runtime.ir import Meta

    start = time.perf_counter_ns()
    array = backend.put(backend.torch_to_numpy(cpu), device_index)
    node = DataNode(array, Meta(tuple(cpu.shape), cpu.dtype), _creation_site() if bus.wants_frames else None)
    if bus.active:
        bus.emit(TransferToDevice(time.perf_counter_ns(), _step(), cpu.numel() * cpu.element_size(),
                                  time.perf_counter_ns() - start))
    return node


def _creation_site() -> str | None:
    from xladev.runtime.recorder import user_location

    return user_location()
