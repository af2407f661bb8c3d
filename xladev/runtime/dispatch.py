"""Routing: every aten op on an XlaTensor arrives here and becomes IR, a view, or a CPU fallback.

Order of preference for an op: a special handler (copies, value reads), a jax lowering, one of
PyTorch's decompositions, then the CPU fallback. In-place and `out=` variants are recorded as their
functional op, then written into their target (recording.py).
"""

from __future__ import annotations

import threading
import time

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.decompositions import DECOMPOSITIONS
from xladev.runtime.execution import execution, lock as _execution_lock
from xladev.runtime.fake_operands import FakeOperands
from xladev.runtime.fallback import run_on_cpu
from xladev.runtime.lowering.registry import LOWERINGS
from xladev.runtime.meta import MetaUnsupported
from xladev.runtime.op_traits import op_traits
from xladev.runtime.recorder import recorder
from xladev.runtime.recording import device_of, mismatch, record, record_view, write_into
from xladev.runtime.special_handlers import SPECIAL_HANDLERS
from xladev.runtime.tensor import XlaTensor

aten = torch.ops.aten
_local = threading.local()


def _inplace(func, args, kwargs):
    self = args[0]
    target = op_traits(func).functional
    if torch.Tag.inplace_view in func.tags:
        return _inplace_view(func, target, args, kwargs)
    if target is not None and (target in LOWERINGS or target in SPECIAL_HANDLERS or target in DECOMPOSITIONS):
        result = handle(target, args, kwargs)
    elif func in LOWERINGS:  # a lowering of the in-place op itself computes the new value
        result = record(func, args, kwargs)
    else:
        return decompose_or_fallback(func, args, kwargs)
    write_into(self, result, func)
    return self


_INPLACE_VIEW_TARGETS = {aten.swapdims_.default: aten.transpose.int, aten.swapaxes_.default: aten.transpose.int}


def _inplace_view(func, target, args, kwargs):
    """`squeeze_`, `unsqueeze_`, `transpose_`, `t_`, `as_strided_`...: `self` becomes a view of itself.

    The value does not change, only the metadata: the functional view op gives the new view chain,
    shape and strides, which are set on `self` below the Python key, as eager PyTorch does.
    """
    self = args[0]
    target = _INPLACE_VIEW_TARGETS.get(func, target)
    if target is None or target not in LOWERINGS or not op_traits(target).is_view:
        return run_on_cpu(func, args, kwargs)
    view = record_view(target, args, kwargs)
    self._chain = view._chain
    self._vnode = None
    self._vver = -1
    with torch._C._DisableTorchDispatch():
        torch.ops.aten.as_strided_.default(self, tuple(view.shape), view.stride(), view.storage_offset())
    return self


def _out_variant(func, args, kwargs):
    traits = op_traits(func)
    outs = [kwargs[name] for name in traits.out_names]
    for out in outs:
        if not isinstance(out, XlaTensor):
            raise mismatch(f"xla:{device_of(args, kwargs)}", str(out.device))
    functional = traits.functional
    if functional is None:
        raise MetaUnsupported(f"no functional form of {func}")
    fkwargs = {k: v for k, v in kwargs.items() if k not in traits.out_names}
    result = handle(functional, args, fkwargs)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for out, res in zip(outs, results):
        if tuple(out.shape) != tuple(res.shape):
            if out.numel() == 0 and out._chain is None:
                # `out` was created empty to be resized by the op: adopt the result's metadata.
                raise MetaUnsupported("out= resize")
            raise RuntimeError(f"out= tensor has shape {list(out.shape)}, expected {list(res.shape)}")
        write_into(out, res)
    return outs[0] if len(outs) == 1 else tuple(outs)


def handle(func, args, kwargs):
    """Routes one aten op: its special handler, else `handle_regular`."""
    special = SPECIAL_HANDLERS.get(func)
    if special is not None:
        return special(func, args, kwargs)
    return handle_regular(func, args, kwargs)


def handle_regular(func, args, kwargs):
    """Routes an op past its special handler (for handlers that prepare arguments, then record)."""
    traits = op_traits(func)
    try:
        if traits.is_view:
            return record_view(func, args, kwargs)
        if traits.is_inplace:
            return _inplace(func, args, kwargs)
        if traits.out_names:
            return _out_variant(func, args, kwargs)
        if func in LOWERINGS:
            return record(func, args, kwargs)
    except MetaUnsupported:
        return run_on_cpu(func, args, kwargs)
    return decompose_or_fallback(func, args, kwargs)


def decompose_or_fallback(func, args, kwargs):
    """Runs `func` as PyTorch's decomposition of it, or on the CPU when there is none (or it declines)."""
    decomposition = DECOMPOSITIONS.get(func)
    active = getattr(_local, "decomposing", None)
    if active is None:
        active = _local.decomposing = set()
    if decomposition is not None and func not in active:
        active.add(func)
        try:
            out = decomposition(*args, **kwargs)
        finally:
            active.discard(func)
        if out is not NotImplemented:
            return out
        # The decomposition declined these arguments: the op runs on the CPU.
    return run_on_cpu(func, args, kwargs)


def dispatch(func, args, kwargs):
    """Every aten op on an XlaTensor (its `__torch_dispatch__`, set by `device.register()`), timed."""
    start = time.perf_counter_ns()
    if recorder.eager_debug:
        return _dispatch_eagerly(func, args, kwargs, start)
    # An op and a step barrier never interleave: an op on another thread reads a tensor's value either
    # before the barrier took it or after the barrier replaced it by device data, never the pending
    # value of a graph whose input buffers the barrier donated (execution._donatable).
    try:
        with _execution_lock:
            return handle(func, args, kwargs)
    except FakeOperands as fake:
        return fake.run_faked(func, args, kwargs)
    finally:
        recorder.add_tracing_time(time.perf_counter_ns() - start)


def _dispatch_eagerly(func, args, kwargs, start):
    """XLA_USE_EAGER_DEBUG_MODE: run each top-level op as soon as it is recorded (one small graph per op)."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        with _execution_lock:
            result = handle(func, args, kwargs)
    finally:
        _local.depth = depth
        recorder.add_tracing_time(time.perf_counter_ns() - start)
    if depth == 0:
        execution.flush(Cause(CauseKind.EAGER_DEBUG, func._schema.name))
    return result
