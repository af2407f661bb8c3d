"""The CPU fallback: an op with no lowering runs in eager PyTorch on the host, then its results go back.

It never gives a wrong answer: inputs are synced and copied down, the op runs on the CPU exactly as
eager PyTorch would, arguments the op mutates are written back through their aliases, and new results
are uploaded. Each run emits a Fallback event named `aten::op.overload`, as PyTorch/XLA counts it.

Some ops have no CPU kernel at all (CUDA-only ops such as `_fused_dropout`, or the fused RNN cells
before they were lowered). Such an op runs as PyTorch's decomposition of it, on the device; without
one it raises UnsupportedOpError naming the op, never the dispatcher's "Could not run ... 'CPU'
backend" from deep inside.
"""

from __future__ import annotations

import re
import threading
import time

import torch
from torch._decomp import decomposition_table

from xladev.errors import XladevError
from xladev.events import Cause, CauseKind, Fallback, bus
from xladev.runtime.graph import annotate, stack, steps
from xladev.runtime.graph.span_clock import spent
from xladev.runtime.record.decompositions import composite_implicit, with_composites
from xladev.runtime.lowering.registry import LOWERINGS
from xladev.runtime.record.recording import write_into
from xladev.runtime.record.tensor import XlaTensor, new_tensor
from xladev.runtime.execute.transfers import download, sync_cause, upload


_local = threading.local()
_NO_CPU_KERNEL = re.compile(r"Could not run '([^']+)' with arguments from the 'CPU' backend")


class UnsupportedOpError(XladevError, NotImplementedError):
    """An op has no xladev lowering, no CPU kernel and no PyTorch decomposition.

    Attributes:
      op_name: the op, `aten::name.overload`.
    """

    def __init__(self, message: str, op_name: str):
        super().__init__(message)
        self.op_name = op_name


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


def _has_cpu_kernel(func) -> bool:
    """Whether the dispatcher can run `func` on CPU tensors (a CPU or composite kernel, or a factory's
    BackendSelect kernel, which picks the backend from its arguments)."""
    try:
        name = func.name()
        return (torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU")
                or torch._C._dispatch_has_kernel_for_dispatch_key(name, torch._C.DispatchKey.BackendSelect))
    except (AttributeError, RuntimeError):  # not a registered aten overload: let the call itself decide
        return True


def _decomposition(func):
    """PyTorch's decomposition of `func` (its table, else the op's composite kernel), or None."""
    return decomposition_table.get(func) or composite_implicit(func)


def _without_cpu_kernel(func, args, kwargs, missing: str | None = None):
    """Runs `func` as its decomposition on the device, since the CPU cannot run it.

    Args:
      missing: the op the dispatcher could not run on the CPU, when it is not `func` itself
        (a CPU kernel of `func` calls it).

    Raises:
      UnsupportedOpError: there is no decomposition, or it needs `func` itself again (or declines).
    """
    name = fallback_name(func)
    active = getattr(_local, "decomposing", None)
    if active is None:
        active = _local.decomposing = set()
    declined = UnsupportedOpError(_unsupported_message(func, name, missing, "PyTorch's decomposition of it does "
                                                       "not handle these arguments"), name)
    if func in active:  # its decomposition called it again
        raise declined
    decomposition = _decomposition(func)
    if decomposition is None:
        raise UnsupportedOpError(_unsupported_message(func, name, missing, "PyTorch has no decomposition of it"),
                                 name)
    active.add(func)
    try:
        out = with_composites(decomposition)(*args, **kwargs)
    finally:
        active.discard(func)
    if out is NotImplemented:  # it declined these arguments, and the CPU cannot run the op
        raise declined
    return out


def _unsupported_message(func, name: str, missing: str | None, why_not_decomposed: str) -> str:
    if func in LOWERINGS:  # lowered, but it fell back: no shape rule for these arguments
        head = f"{name} has no CPU kernel, and its xladev lowering has no shape rule for these arguments"
    elif missing and missing != name:
        head = f"{name} has no xladev lowering, and its CPU kernel calls {missing}, which has no CPU kernel"
    else:
        head = f"{name} has neither an xladev lowering nor a CPU kernel"
    return f"{head}; {why_not_decomposed}, so it cannot run on the xla device"


def run_on_cpu(func, args, kwargs):
    """Runs `func` on CPU copies of its device arguments and returns device results.

    An op the CPU cannot run runs as its PyTorch decomposition on the device instead.

    Raises:
      UnsupportedOpError: the op has no CPU kernel and no decomposition.
    """
    if not _has_cpu_kernel(func):
        return _without_cpu_kernel(func, args, kwargs)
    name = fallback_name(func)
    with annotate.fallback_span(name, steps.current()):
        return _run_on_cpu(func, name, args, kwargs)


def _run_on_cpu(func, name: str, args, kwargs):
    """`run_on_cpu` of an op that has a CPU kernel (see there)."""
    device_index = _check_devices(args, kwargs)
    found: list[XlaTensor] = []
    _collect(args, found)
    _collect(list(kwargs.values()), found)
    unique = list({id(t): t for t in found}.values())
    called_ns = time.perf_counter_ns()
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
    missing = None
    kernel_start = time.perf_counter_ns()
    try:
        result = func(*cpu_args, **cpu_kwargs)
    except NotImplementedError as exc:
        found = _NO_CPU_KERNEL.search(str(exc))
        if found is None:
            raise
        missing = found.group(1)
    if missing is not None:
        # The op's CPU kernel calls one without a CPU kernel. Nothing was written back yet, so the op
        # can still decompose; outside the `except`, so an error does not drag the dispatcher's along.
        return _without_cpu_kernel(func, args, kwargs, missing)
    kernel_ns = time.perf_counter_ns() - kernel_start
    spent(kernel_ns)
    if bus.active:  # after the kernel, to carry its time; stamped with the time of the call
        frames = stack.capture_frames() if bus.wants_frames else None
        bus.emit(Fallback(called_ns, steps.current(), name, frames, kernel_ns))

    # Write back every argument the op mutated, so aliases on the device see the change.
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
