"""The CPU fallback: an op with no lowering runs in eager PyTorch on the host, then its results go back.

It never gives a wrong answer: inputs are synced and copied down, the op runs on the CPU exactly as
eager PyTorch would, arguments the op mutates are written back through their aliases, and new results
are uploaded. Each run emits a FallbackOp event named `aten::op.overload`, as PyTorch/XLA counts it.
"""

from __future__ import annotations

import time

import torch

from xladev.events import Cause, CauseKind, FallbackOp, bus
from xladev.runtime.access import download, sync_cause, upload
from xladev.runtime.tensor import XlaTensor, new_tensor


def fallback_name(func) -> str:
    schema = func._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _collect(value, found: list) -> None:
    if isinstance(value, XlaTensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, found)


def _check_devices(args, kwargs) -> int:
    device_index = None
    cpu_device = None

    def visit(v):
        nonlocal device_index, cpu_device
        if isinstance(v, XlaTensor):
            device_index = v._st.device_index if device_index is None else device_index
        elif isinstance(v, torch.Tensor) and v.dim() > 0:
            cpu_device = str(v.device)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)

    for a in list(args) + list(kwargs.values()):
        visit(a)
    if device_index is not None and cpu_device is not None:
        raise RuntimeError(
            f"Expected all tensors to be on the same device, but found at least two devices, xla:{device_index} and {cpu_device}!")
    return device_index or 0


def run_on_cpu(func, args, kwargs):
    """Runs `func` on CPU copies of its device arguments and returns device results."""
    name = fallback_name(func)
    device_index = _check_devices(args, kwargs)
    found: list[XlaTensor] = []
    _collect(args, found)
    _collect(list(kwargs.values()), found)
    unique = list({id(t): t for t in found}.values())
    frames = None
    if bus.active:
        from xladev.runtime.executor import capture_frames, executor

        frames = capture_frames() if bus.wants_frames else None
        bus.emit(FallbackOp(time.perf_counter_ns(), executor.step, name, frames))
    with sync_cause(Cause(CauseKind.FALLBACK, name)):
        cpus = download(unique) if unique else []
    to_cpu = {id(t): c for t, c in zip(unique, cpus)}

    def down(v):
        if isinstance(v, XlaTensor):
            return to_cpu[id(v)]
        if isinstance(v, (list, tuple)):
            return type(v)(down(x) for x in v)
        if isinstance(v, torch.device) and v.type == "xla":
            return torch.device("cpu")
        return v

    cpu_args = down(tuple(args))
    cpu_kwargs = {k: down(v) for k, v in kwargs.items()}
    result = func(*cpu_args, **cpu_kwargs)

    # Write back every argument the op mutated, so aliases on the device see the change.
    from xladev.runtime.dispatch import write_into

    written = {}
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            original = args[i] if i < len(args) else kwargs.get(arg.name)
            # `Tensor(a!)[]` (the in-place _foreach_ ops) mutates every tensor of the list.
            for target in (original if isinstance(original, (list, tuple)) else (original,)):
                if isinstance(target, XlaTensor):
                    fresh = new_tensor(upload(to_cpu[id(target)], device_index), device_index)
                    write_into(target, fresh)
                    written[id(to_cpu[id(target)])] = target

    def up(v):
        if isinstance(v, torch.Tensor):
            if id(v) in written:
                return written[id(v)]
            return new_tensor(upload(v, device_index), device_index)
        if isinstance(v, (list, tuple)):
            return type(v)(up(x) for x in v)
        return v

    return up(result)
