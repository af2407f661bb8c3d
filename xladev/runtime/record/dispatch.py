"""Routing: every aten op on an XlaTensor arrives here and becomes IR, a view, or a CPU fallback.

Order of preference for an op: a special handler (copies, value reads), a jax lowering, one of
PyTorch's decompositions, then the CPU fallback. In-place and `out=` variants are recorded as their
functional op, then written into their target (recording.py).
"""

from __future__ import annotations

import threading

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.graph import fork_guard, span_clock
from xladev.runtime.record.decompositions import DECOMPOSITIONS
from xladev.runtime.execute.execution import execution, lock as _execution_lock
from xladev.runtime.record.fake_operands import FakeOperands
from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.lowering.registry import LOWERINGS
from xladev.runtime.graph.meta import MetaUnsupported, _run_meta
from xladev.runtime.graph.op_traits import op_traits
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record import backward_errors
from xladev.runtime.record.arguments import mismatch
from xladev.runtime.record.recording import (device_of, op_entry, record, record_cached, record_general, record_into,
                                      record_view, write_into)
from xladev.runtime.record.special_handlers import SPECIAL_HANDLERS
from xladev.runtime.record.tensor import XlaTensor

aten = torch.ops.aten
_local = threading.local()


def _inplace(route, func, args, kwargs):
    self = args[0]
    how = route.inplace
    if how == _INPLACE_VIEW:
        return _inplace_view(func, route.target, args, kwargs)
    if how == _VIA_TARGET:
        target, recorded = route.target, route.entry
        if recorded is not None and record_into(recorded, func, args, kwargs):
            return self  # the functional twin is lowered: its value went straight into `self`
        result = handle(target, args, kwargs)
    elif how == _SELF_LOWERED:  # a lowering of the in-place op itself computes the new value
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
        if res.dtype != out.dtype and torch.can_cast(res.dtype, out.dtype):
            _check_exact_out_dtype(func, args, kwargs)
        write_into(out, res)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _check_exact_out_dtype(func, args, kwargs) -> None:
    """Eager's dtype check of an out= tensor the result could be cast into: some ops (mm, bmm, addmm...) want the
    out dtype exactly. The op's meta kernel, run on meta tensors of the same shapes and dtypes, says which, and
    raises its error (`Expected out tensor to have dtype torch.float32 but got torch.bfloat16 instead`)."""
    try:
        _run_meta(func, args, kwargs)
    except MetaUnsupported:  # no meta kernel for it: the cast stands
        pass


# How each op is routed, read once per op from the registries (complete once `device.register()` has
# imported every lowering and handler) and its schema. Keyed by id because an OpOverload's __hash__ is a
# Python function; the entry holds the op, checked on use.
_RECORD, _VIEW, _INPLACE, _OUT, _OTHER = range(5)
# In-place ops: the functional twin computes the value (_VIA_TARGET), or the op's own lowering does, or
# neither (decomposed or run on the CPU); in-place view ops only change the metadata.
_VIA_TARGET, _SELF_LOWERED, _INPLACE_VIEW, _INPLACE_OTHER = range(4)


class Route:
    """How one aten op is handled: the one entry per op that the dispatcher reads.

    Attributes:
      func: the aten overload.
      special: its special handler (special_handlers.py), or None.
      kind: _RECORD (lowered: recorded as a node), _VIEW, _INPLACE, _OUT (an out= variant) or _OTHER
        (decomposed, or run on the CPU).
      inplace: for an _INPLACE op, how its value is computed (_VIA_TARGET, _SELF_LOWERED, _INPLACE_VIEW,
        _INPLACE_OTHER); else None.
      target: for an _INPLACE op, its functional twin (or the view op of an in-place view op); else None.
      entry: the recording entry (recording.op_entry) of what records the value on the fast path: the op itself
        for _RECORD, the functional twin for _VIA_TARGET when nothing but `record` handles it; else None.
    """

    __slots__ = ("func", "special", "kind", "inplace", "target", "entry")

    def __init__(self, func, special, kind: int, inplace: int | None = None, target=None, entry=None) -> None:
        self.func, self.special, self.kind = func, special, kind
        self.inplace, self.target, self.entry = inplace, target, entry


_routes: dict[int, Route] = {}


def _route(func) -> Route:
    route = _routes.get(id(func))
    if route is not None and route.func is func:
        return route
    special = SPECIAL_HANDLERS.get(func)
    traits = op_traits(func)
    if traits.is_view:
        route = Route(func, special, _VIEW)
    elif traits.is_inplace:
        target = traits.functional
        if torch.Tag.inplace_view in func.tags:
            route = Route(func, special, _INPLACE, _INPLACE_VIEW, target)
        elif target is not None and (target in LOWERINGS or target in SPECIAL_HANDLERS or target in DECOMPOSITIONS):
            # The target's recording entry when nothing but `record` handles it (record_into's fast path).
            plain = target not in SPECIAL_HANDLERS and _route(target).kind == _RECORD
            route = Route(func, special, _INPLACE, _VIA_TARGET, target, op_entry(target) if plain else None)
        elif func in LOWERINGS:
            route = Route(func, special, _INPLACE, _SELF_LOWERED)
        else:
            route = Route(func, special, _INPLACE, _INPLACE_OTHER)
    elif traits.out_names:
        route = Route(func, special, _OUT)
    elif func in LOWERINGS:
        route = Route(func, special, _RECORD, entry=op_entry(func))
    else:
        route = Route(func, special, _OTHER)
    _routes[id(func)] = route
    return route


def handle(func, args, kwargs):
    """Routes one aten op: its special handler, else `handle_regular`."""
    route = _routes.get(id(func))
    if route is None or route.func is not func:
        route = _route(func)
    special = route.special
    if special is not None:
        return special(func, args, kwargs)
    return _regular(route, func, args, kwargs)


def handle_regular(func, args, kwargs):
    """Routes an op past its special handler (for handlers that prepare arguments, then record)."""
    return _regular(_route(func), func, args, kwargs)


def _regular(route, func, args, kwargs):
    kind = route.kind
    try:
        if kind == _RECORD:
            return record(func, args, kwargs)
        if kind == _VIEW:
            return record_view(func, args, kwargs)
        if kind == _INPLACE:
            return _inplace(route, func, args, kwargs)
        if kind == _OUT:
            return _out_variant(func, args, kwargs)
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


def torch_dispatch(cls, func, types, args=(), kwargs=None):
    """Every aten op on an XlaTensor, timed: its `__torch_dispatch__` (set by `device.register()`).

    Raises:
      RuntimeError: in a forked child of a process whose runtime had started (fork_guard), and as the op does.
    """
    if fork_guard.blocked:
        fork_guard.check(func)
    for kind in types:
        if kind.__dict__.get("wraps_xla_tensors"):
            # A wrapper of device tensors among the operands (XLAShardedTensor): torch then asks its
            # __torch_dispatch__, which unwraps them and calls the op again.
            return NotImplemented
    if kwargs is None:
        kwargs = {}
    if backward_errors.kept and backward_errors.failed():  # an earlier op of this backward pass failed
        return backward_errors.placeholder(func, args)
    started = span_clock.op_began()
    if recorder.eager_debug:
        return _dispatch_eagerly(func, args, kwargs, started)
    # An op and a step barrier never interleave: an op on another thread reads a tensor's value either
    # before the barrier took it or after the barrier replaced it by device data, never the pending
    # value of a graph whose input buffers the barrier donated (donation.donatable).
    try:
        with _execution_lock:
            route = _routes.get(id(func))
            if route is None or route.func is not func:
                route = _route(func)
            if route.special is None:  # the common ops, straight to the signature cache
                kind = route.kind
                try:
                    if kind == _RECORD:
                        out = record_cached(route.entry, args, kwargs)
                        return out if out is not None else record_general(func, args, kwargs)
                    elif kind == _INPLACE and route.entry is not None and record_into(route.entry, func, args, kwargs):
                        return args[0]
                except MetaUnsupported:
                    return run_on_cpu(func, args, kwargs)
            return handle(func, args, kwargs)
    except FakeOperands as fake:
        return fake.run_faked(func, args, kwargs)
    except Exception as exc:
        if backward_errors.keep(exc):  # raised by backward() instead: see backward_errors
            return backward_errors.placeholder(func, args)
        raise
    finally:
        recorder.add_tracing_time(span_clock.op_ended(started))


def _dispatch_eagerly(func, args, kwargs, started):
    """XLA_USE_EAGER_DEBUG_MODE: run each top-level op as soon as it is recorded (one small graph per op)."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        with _execution_lock:
            result = handle(func, args, kwargs)
    finally:
        _local.depth = depth
        recorder.add_tracing_time(span_clock.op_ended(started))
    if depth == 0:
        execution.flush(Cause(CauseKind.EAGER_DEBUG, func._schema.name))
    return result
