"""Recording an op as IR: its operands and template, its output metadata, and writes into tensors.

`record` is the common end of most ops: the arguments are split into operand nodes and a hashable
template, PyTorch's meta kernel gives the output shapes, and new device tensors hold the new node.

Everything but the operands is a function of the op and its argument signature (each tensor's shape
and dtype, each Python number's type, each constant), so it is derived once per signature and kept
(`_trace`, `_view_positional`): a hot op pays for reading its arguments, one dict lookup, a Node and
its output tensor. Arguments the signature key does not cover (CPU tensors, devices, lists of floats)
take the general path, `record_general` (`arguments.flatten`, then PyTorch's meta kernel, itself
memoised per signature). Both give the same graphs: `use_signature_cache(False)` compares them.
"""

from __future__ import annotations

import itertools
import math

import torch

from xladev.runtime.record import arguments
from xladev.runtime.graph.ir import SLOT, Meta, Node, getitem
from xladev.runtime.lowering.registry import LOWERINGS
from xladev.runtime.graph.meta import MetaUnsupported, infer_meta, scalar_type_name, view_meta
from xladev.runtime.graph.op_traits import op_traits
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor, wrap, wrap_view
from xladev.runtime.lowering.views import ViewStep

aten = torch.ops.aten


# ---- the signature cache: what an op needs at one argument signature, derived once ---------------------
class _Op:
    """One aten overload as recording sees it: traits, lowering and IR name, read once, and the
    argument signatures it was recorded with (`_Signature` by `_trace`'s key)."""

    __slots__ = ("func", "traits", "scalar_slots", "opdef", "sigs", "views")

    def __init__(self, func):
        self.func = func
        self.traits = op_traits(func)
        # Where a Python number is an operand (a graph input): Scalar positions and keyword names.
        self.scalar_slots = self.traits.scalar_positions | self.traits.scalar_names
        self.opdef = LOWERINGS.get(func)
        self.sigs: dict = {}
        self.views: dict = {}  # a view op's signatures (`_view_positional`)


class _Signature:
    """Everything `record` derives from an argument signature: the template (constants in place, SLOT
    where an operand goes), the output Meta(s), and how the Python numbers become inputs (`arguments.plan_scalars`)."""

    __slots__ = ("template", "meta", "plan")

    def __init__(self, template, meta, plan):
        self.template = template
        self.meta = meta
        self.plan = plan


# id(op) → _Op: an OpOverload's __hash__ is a Python function (a fifth of a microsecond per lookup, and
# the general path looks an op up six times); its id is an int. The entry holds the op, checked on use.
_ops: dict[int, _Op] = {}
# An op recorded with ever-new signatures (a `view` to many sizes) keeps at most this many: the cache is
# cleared and refilled, never a reason to keep memory.
_SIGNATURES_PER_OP = 2048


_enabled = True


def use_signature_cache(enabled: bool) -> bool:
    """Turns the signature cache on or off (off: every op takes the general path, as before the cache
    existed); returns the previous setting. For tests and benchmarks that compare the two."""
    global _enabled
    previous, _enabled = _enabled, bool(enabled)
    return previous


def clear_signatures() -> None:
    """Forgets every signature (the next op of each signature derives its entry again)."""
    for op in list(_ops.values()):
        op.sigs.clear()
        op.views.clear()


def op_entry(func) -> _Op:
    """The `_Op` of an aten overload (made on first use; safe from any thread, a race makes two alike)."""
    op = _ops.get(id(func))
    if op is None or op.func is not func:
        op = _ops[id(func)] = _Op(func)
    return op


def _trace(op: _Op, args, kwargs, device_index):
    """Records `op(*args, **kwargs)` as a Node through its signature cache (`derive`).

    Returns:
      (node, device index), or None, having recorded nothing, when an argument needs the general path.

    Raises:
      MetaUnsupported, RuntimeError: as `record`.
    """
    derived = derive(op, args, kwargs, device_index)
    if derived is None:
        return None
    operands, sig, device = derived
    if recorder.scopes_used or recorder.ir_debug:
        location, scope = recorder.debug_info()
    else:
        location = scope = None
    opdef = op.opdef
    if opdef is None:
        raise KeyError(op.func)  # as LOWERINGS[func]: only lowered ops are recorded
    node = Node(opdef, tuple(operands), sig.template, sig.meta, location, scope)
    recorder.count(opdef.name)
    return node, device


def derive(op: _Op, args, kwargs, device_index):
    """What recording `op(*args, **kwargs)` needs, through the op's signature cache; records nothing.

    The key holds the keyword names in order, then for each argument: a tensor's shape and dtype (its
    value's Meta, which is the tensor's own), a Python number's type where it is an operand, a constant's
    type and value (see `_constant_key`). That is everything the template, the output metadata and the
    numbers' dtypes depend on: a changed shape, dtype, number type, constant or keyword is a new key.

    Args:
      op: the op's `_Op` (`op_entry`).
      args, kwargs: its arguments.
      device_index: the device the operands must be on, or None for the first device tensor's.

    Returns:
      (operand nodes, its `_Signature`, device index), or None when an argument needs the general path
      (`arguments.flatten`): a CPU tensor, a list of anything but ints or bools, a device, another object.

    Raises:
      MetaUnsupported, RuntimeError: as `record`.
    """
    if not _enabled:
        return None
    operands = []
    key = []
    device = device_index
    scalar_slots = op.scalar_slots
    numbers = False
    slots = enumerate(args)
    if kwargs:
        slots = itertools.chain(slots, kwargs.items())
        key.append(tuple(kwargs))  # the keyword names, in order: f(x, a=1, b=2) is not f(x, b=1, a=2)
    for slot, value in slots:  # (position or keyword name, argument)
        kind = type(value)
        if kind is XlaTensor:
            st = value._st
            if device is None:
                device = st.device_index
            elif device != st.device_index:
                raise arguments.mismatch(f"xla:{device}", f"xla:{st.device_index}")
            node = st.value if value._chain is None else value._node()
            operands.append(node)
            key.append(node.meta)
        elif (kind is int or kind is float) and slot in scalar_slots and value not in arguments.special_scalars:
            operands.append(value)
            key.append(kind)
            numbers = True
        else:
            constant = _constant_key(kind, value)
            if constant is None:
                return None
            key.append(constant)
    key = tuple(key)
    sig = op.sigs.get(key)
    if sig is None:
        sig = _new_signature(op, args, kwargs, key, device)
    if numbers:
        arguments.apply_plan(sig.plan, operands)
    return operands, sig, device or 0


def _constant_key(kind, value):
    """The key of a constant argument (baked into the template), or None when only the general path
    takes it. Equal keys must mean equal templates: a type goes with each value (1, 1.0 and True are
    equal numbers), and a zero float with its sign (-0.0 == 0.0, but they are different constants)."""
    if kind is int or kind is float:
        return (kind, value) if value or kind is int else (kind, value, math.copysign(1.0, value))
    if kind in arguments.PLAIN_TYPES:
        return (kind, value)
    if kind is list or kind is tuple:  # sizes, dims, output masks
        items = tuple(value)
        first = type(items[0]) if items else int
        if first is not int and first is not bool:
            return None
        for item in items:
            if type(item) is not first:
                return None
        return (list, first, items)
    return None


def _new_signature(op: _Op, args, kwargs, key, device) -> _Signature:
    """Derives a signature's entry the general way (`arguments.flatten`, `infer_meta`,
    `arguments.plan_scalars`) and keeps it."""
    func, traits = op.func, op.traits
    operands, template, flat_key, numbers = arguments.flatten(args, kwargs, traits, [device])
    meta = infer_meta(func, flat_key, args, kwargs)
    plan = arguments.plan_scalars(func, operands, args, kwargs, traits, meta) if numbers else ()
    sig = _Signature(template, meta, plan)
    # A new signature is a new constant (a slice bound, a size) or shape: where it was first recorded is the line a
    # recompilation for it names. Derived here only, off the path of cached signatures.
    if op.opdef is not None:
        recorder.locate(op.opdef.name, template)
    sigs = op.sigs
    if len(sigs) >= _SIGNATURES_PER_OP:
        sigs.clear()
    sigs[key] = sig
    return sig


def record(func, args, kwargs, device_index=None, opdef=None, extra_meta: tuple = ()) -> object:
    """Records `func(*args, **kwargs)` as IR and returns the new device tensor(s).

    Raises:
      MetaUnsupported: no shape rule exists (the caller falls back to the CPU).
      RuntimeError: the arguments are invalid for the op, exactly as eager PyTorch would say.
    """
    if opdef is None and not extra_meta:
        out = record_cached(op_entry(func), args, kwargs, device_index)
        if out is not None:
            return out
    return record_general(func, args, kwargs, device_index, opdef, extra_meta)


def record_general(func, args, kwargs, device_index=None, opdef=None, extra_meta: tuple = ()) -> object:
    """`record` the general way, for any arguments: `arguments.flatten`, then the memoised meta kernel."""
    operands, template, meta, index = derive_general(func, args, kwargs, device_index)
    if extra_meta:
        meta = tuple(meta) + tuple(extra_meta)
    if opdef is None:
        opdef = LOWERINGS[func]
    recorder.locate(opdef.name, template)
    node = Node(opdef, tuple(operands), template, meta, *recorder.debug_info())
    recorder.count(opdef.name)
    if type(meta) is Meta:
        return wrap(Storage(node, index), meta)
    return _outputs(func, node, meta, index)


def derive_general(func, args, kwargs, device_index=None) -> tuple:
    """What recording `func(*args, **kwargs)` needs, for any arguments (`derive` is the cached way); records nothing.

    Returns:
      (operand nodes, template, output metadata, device index).

    Raises:
      MetaUnsupported, RuntimeError: as `record`.
    """
    traits = op_traits(func)
    device_ref = [device_index]
    operands, template, key, numbers = arguments.flatten(args, kwargs, traits, device_ref)
    meta = infer_meta(func, key, args, kwargs)
    if numbers:
        arguments.bind_scalars(func, operands, key, args, kwargs, traits, meta)
    return operands, template, meta, device_ref[0] or 0


def record_cached(op: _Op, args, kwargs, device_index=None) -> object:
    """`record(op.func, args, kwargs)` through the signature cache (`_trace`).

    Returns:
      The new device tensor(s), or None, having recorded nothing, when an argument needs `record`.
    """
    traced = _trace(op, args, kwargs, device_index)
    if traced is None:
        return None
    node, index = traced
    meta = node.meta
    if type(meta) is Meta:
        return wrap(Storage(node, index), meta)
    return _outputs(op.func, node, meta, index)


def record_into(op: _Op, func, args, kwargs) -> bool:
    """In-place op `func` on `args[0]`, `op` its functional twin: records the new value and
    writes it into `args[0]`, without a result tensor when the value has that tensor's shape and dtype.

    Returns:
      False, having recorded nothing, when the general path must do it (`record`, then `write_into`).

    Raises:
      MetaUnsupported: from `write_into`, as the general path raises it.
    """
    dst = args[0]
    if type(dst) is not XlaTensor:
        return False
    try:
        traced = _trace(op, args, kwargs, None)
    except MetaUnsupported:
        return False  # the general path meets it too, and falls back as it always did
    if traced is None:
        return False
    node, index = traced
    meta = node.meta
    if meta == node.operands[0].meta:
        dst._assign(node)
        # PyTorch/XLA makes (and drops) a tensor for the functional op's result: counted as it counts them.
        recorder.tensors_created += 1
        recorder.count_freed()  # the C-level counter the finalizer uses: no property round trip on this hot path
    else:  # a result to broadcast or convert, or not one tensor: write_into's checks and errors
        write_into(dst, wrap(Storage(node, index), meta) if type(meta) is Meta else _outputs(op.func, node, meta, index),
                   func)
    return True


def _outputs(func, node, meta, index) -> object:
    """The device tensors of a multi-output node (None where the op returns None)."""
    outputs = []
    for i, m in enumerate(meta):
        if m is None:
            outputs.append(None)
        elif type(m) is Meta:
            outputs.append(wrap(Storage(getitem(node, i), index), m))
        else:  # a list output (e.g. split-like functional ops)
            raise MetaUnsupported(f"{func} returns nested outputs")
    return type(meta)(outputs) if not isinstance(meta, list) else outputs


def record_view(func, args, kwargs):
    """Records a view op: the result shares the base's storage and extends its view chain."""
    base = args[0]
    if not kwargs and type(base) is XlaTensor:
        out = _view_positional(op_entry(func), base, args)
        if out is not None:
            return out
    traits = op_traits(func)
    device_ref = [base._st.device_index]
    _, template, key, _ = arguments.flatten(args[1:], kwargs, traits.shifted(), device_ref)
    template = ((SLOT,) + template[0], template[1])
    metas = view_meta(func, base, key, args, kwargs)
    opdef = LOWERINGS.get(func)
    if opdef is None:
        raise MetaUnsupported(f"view op {func} has no lowering")
    recorder.locate(opdef.name, template)
    chain = base._chain or ()
    recorder.count(opdef.name)
    if isinstance(metas, list):
        return [
            XlaTensor(base._st, m[0], chain + (ViewStep(opdef, template, metas_tuple(metas), i),), m[1], m[2])
            for i, m in enumerate(metas)
        ]
    meta, strides, offset = metas
    return XlaTensor(base._st, meta, chain + (ViewStep(opdef, template, meta, None),), strides, offset)


def _view_positional(op: _Op, base: XlaTensor, args):
    """`record_view` through the op's view signatures: the base's shape, dtype, strides and offset, its
    storage's shape, and the other arguments (constants, as in `_trace`) decide the views' metadata and
    steps, derived once by `_new_view_signature`.

    Returns:
      The view(s), or None when an argument needs the general path.
    """
    if not _enabled:
        return None
    st = base._st
    chain = base._chain
    key = [st.value.meta, base.stride(), base.storage_offset()]
    if chain is not None:
        key.append(base.shape)
        key.append(base.dtype)
    scalar_pos = op.traits.scalar_positions  # of the full argument list: the base is position 0
    for i in range(1, len(args)):
        value = args[i]
        kind = type(value)
        if (kind is int or kind is float) and i in scalar_pos and value not in arguments.special_scalars:
            return None  # a graph input: the general path (no view op takes one)
        constant = _constant_key(kind, value)
        if constant is None:
            return None
        key.append(constant)
    key = tuple(key)
    views = op.views.get(key)
    if views is None:
        views = _new_view_signature(op, base, args, key)
    opdef = op.opdef
    recorder.count(opdef.name)
    if chain is None:
        chain = ()
    if type(views) is list:
        return [wrap_view(st, meta, chain + step, strides, offset) for meta, strides, offset, step in views]
    meta, strides, offset, step = views
    return wrap_view(st, meta, chain + step, strides, offset)


def _new_view_signature(op: _Op, base: XlaTensor, args, key):
    """A view signature's (meta, strides, offset, (ViewStep,)), or a list of those, derived the general way."""
    func = op.func
    _, template, flat_key, _ = arguments.flatten(args[1:], {}, op.traits.shifted(), [base._st.device_index])
    template = ((SLOT,) + template[0], template[1])
    metas = view_meta(func, base, flat_key, args, {})
    opdef = op.opdef
    if opdef is None:
        raise MetaUnsupported(f"view op {func} has no lowering")
    recorder.locate(opdef.name, template)  # as `_new_signature`: a view's constants are its template's
    if isinstance(metas, list):
        views = [(m[0], m[1], m[2], (ViewStep(opdef, template, metas_tuple(metas), i),)) for i, m in enumerate(metas)]
    else:
        meta, strides, offset = metas
        views = (meta, strides, offset, (ViewStep(opdef, template, meta, None),))
    cache = op.views
    if len(cache) >= _SIGNATURES_PER_OP:
        cache.clear()
    cache[key] = views
    return views


def metas_tuple(metas) -> tuple:
    return tuple(m[0] for m in metas)


def write_into(dst: XlaTensor, result, func_for_errors=None) -> None:
    """Writes `result` (a device tensor) into `dst` and its aliases, with PyTorch's in-place checks."""
    if not isinstance(result, XlaTensor):
        raise MetaUnsupported(f"{func_for_errors} produced a non-device result")
    if tuple(result.shape) != tuple(dst.shape):
        if func_for_errors is not None and _broadcastable_to(tuple(result.shape), tuple(dst.shape)):
            result = expand_to(result, tuple(dst.shape))
        else:
            raise RuntimeError(
                f"output with shape {list(dst.shape)} doesn't match the broadcast shape {list(result.shape)}"
            )
    if result.dtype != dst.dtype:
        if not torch.can_cast(result.dtype, dst.dtype):
            raise RuntimeError(f"result type {scalar_type_name(result.dtype)} can't be cast to the desired output type "
                               f"{scalar_type_name(dst.dtype)}")
        result = convert(result, dst.dtype)
    dst._assign(result._node())


def _broadcastable_to(src: tuple, dst: tuple) -> bool:
    if len(src) > len(dst):
        return False
    for s, d in zip(reversed(src), reversed(dst)):
        if s != d and s != 1:
            return False
    return True


def expand_to(t: XlaTensor, shape: tuple) -> XlaTensor:
    return record(aten.expand_copy.default, (t, list(shape)), {})


def convert(t: XlaTensor, dtype: torch.dtype) -> XlaTensor:
    return record(aten._to_copy.default, (t,), {"dtype": dtype})


def device_of(args, kwargs) -> int:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, XlaTensor):
            return a._st.device_index
    return 0
