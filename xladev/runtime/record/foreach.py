"""`_foreach_*` ops (torch's multi-tensor optimizers, `clip_grad_norm_`): one recorded node per call.

A `_foreach_<op>` over N tensors is recorded as one node of N outputs (`aten::_foreach_<op>`, one op in the
counters), lowered to the N per-tensor lowerings inside the one graph. Each element goes through the
per-tensor op's signature cache (`recording.derive`), so its template, output metadata and Python numbers
(graph inputs, not constants) are exactly those of the per-tensor op. Calls that cannot be grouped (an
element op with no plain lowering, CPU operands, a list whose writes feed a later element) run element by
element, as before.

`install()` lets torch's optimizers choose this path: `torch.optim` takes its foreach implementation only
for tensors whose type is in `_foreach_supported_types` and whose device type is in its device list (which
already names the PrivateUse1 backend, `xla`); the device's tensor subclass is added to the types.
"""

from __future__ import annotations

import functools

import torch

from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.graph.ir import SLOT, Frozen, Meta, Node, OpDef, getitem, rebuild
from xladev.runtime.lowering.registry import LOWERINGS, LoweringContext
from xladev.runtime.graph.meta import MetaUnsupported
from xladev.runtime.graph.op_traits import op_traits
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.recording import derive, derive_general, op_entry, write_into
from xladev.runtime.record.special_handlers import SPECIAL_HANDLERS, special
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor, wrap

aten = torch.ops.aten

# Scalars that the _foreach_ schemas take positionally but the per-tensor methods take by keyword.
_FOREACH_KEYWORD = {"addcdiv": "value", "addcmul": "value"}

# The per-tensor op of a `_foreach_` op whose other operand is a number (`.Scalar`, `.ScalarList`): torch.maximum
# and minimum take tensors only (ASGD's capturable step calls _foreach_maximum_(mus, 1.0)).
_WITH_A_NUMBER = {"maximum": "clamp_min", "minimum": "clamp_max"}

# Ops whose `.Tensor` overload is the one PyTorch's Python bindings call with a number as `other` (x.mul(0.9)
# records aten.mul.Tensor): a grouped element records what the per-tensor call would.
_TENSOR_TAKES_NUMBERS = frozenset(("add", "sub", "mul", "div"))


def install() -> None:
    """Lets torch's optimizers (and `clip_grad_norm_`, `zero_grad`) take their foreach path on device tensors."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for types in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if XlaTensor not in types:
            types.append(XlaTensor)


def _lower_group(ctx, entries, *values):
    """The N per-tensor lowerings of a grouped node, each with its own context (its node, metas, op)."""
    node = ctx.node
    outputs = []
    start = 0
    for (name, template, count), meta in zip(entries, node.meta):
        element = Node(LOWERINGS[_ELEMENT_OPS[name]], node.operands[start:start + count], template, meta)
        args, kwargs = rebuild(template, values[start:start + count])
        outputs.append(element.op.lower(LoweringContext(element), *args, **kwargs))
        start += count
    return tuple(outputs)


_GROUPS: dict[str, OpDef] = {}


def _group_op(name: str) -> OpDef:
    opdef = _GROUPS.get(name)
    if opdef is None:
        opdef = _GROUPS[name] = OpDef(f"aten::_foreach_{name}", _lower_group, multi_output=True,
                                      params=("ops",))
    return opdef


# (op name, element argument kinds) → (the per-tensor overload's name, the overload), or None where the element op is
# not a plain lowering.
_elements: dict = {}
# A grouped node's template names each element's overload by a string (`aten::add.Tensor`): graph keys hash
# strings in C, where an OpOverload's __hash__ is a Python function called for every element at every lookup.
_ELEMENT_OPS: dict[str, object] = {}


def _element_op(each: str, call: list, call_kwargs: dict):
    """The aten overload the per-tensor call `torch.<each>(*call, **call_kwargs)` records, when it is a plain
    lowered op (no special handler, not a view), as (its name in `_ELEMENT_OPS`, the overload); None otherwise."""
    numbers = any(type(a) is int or type(a) is float for a in call[1:])
    key = (each, numbers)
    if key in _elements:
        return _elements[key]
    packet = getattr(aten, each, None)
    found = None
    if packet is not None:
        if numbers and each not in _TENSOR_TAKES_NUMBERS:
            names = ("Tensor_Scalar", "Scalar", "default")
        else:
            names = ("Tensor", "Tensor_Tensor", "default")
        overloads = packet.overloads()
        for name in names:
            if name in overloads:
                func = getattr(packet, name)
                if func in LOWERINGS and func not in SPECIAL_HANDLERS and not op_traits(func).is_view:
                    found = (f"{func._schema.name}.{name}", func)
                    _ELEMENT_OPS[found[0]] = func
                break
    _elements[key] = found
    return found


def _record_group(op: str, calls: list, inplace: bool):
    """Records the element calls as one node.

    Args:
      op: the foreach op's name (`add` for `_foreach_add_`).
      calls: [(per-tensor op name, positional arguments, keyword arguments)], one per element.
      inplace: the results are written into each call's first argument.

    Returns:
      The list of results (the targets when in place), or None, having recorded nothing, when the call
      cannot be grouped.

    Raises:
      RuntimeError: the arguments are invalid for the per-tensor op, as eager PyTorch says.
    """
    operands: list = []
    entries = []
    metas = []
    firsts = []  # each element's first operand: the value an in-place element writes over
    device = None
    written: set[int] = set()  # storages an earlier element writes: a later element must not read them
    # One schema overload: every element's arguments are of the same kinds (tensors, or numbers), so one op.
    element = _element_op(*calls[0])
    if element is None:
        return None
    name, func = element
    for _, call, call_kwargs in calls:
        if type(call[0]) is not XlaTensor:
            return None
        if inplace:
            for value in call:
                if type(value) is XlaTensor and id(value._st) in written:
                    return None
            written.add(id(call[0]._st))
        try:
            derived = derive(op_entry(func), call, call_kwargs, None)
            if derived is None:  # arguments the signature cache does not take: the general way, as `record`
                element_operands, template, meta, element_device = derive_general(func, call, call_kwargs)
            else:
                element_operands, sig, element_device = derived
                template, meta = sig.template, sig.meta
        except MetaUnsupported:
            return None
        if type(meta) is not Meta or (device is not None and element_device != device):
            return None  # elements on two devices are two graphs' work: element by element, as eager
        device = element_device
        firsts.append(element_operands[0])
        operands.extend(element_operands)
        entries.append((name, template, len(element_operands)))
        metas.append(meta)
    location, scope = recorder.debug_info() if recorder.scopes_used or recorder.ir_debug else (None, None)
    template = ((Frozen(entries),) + (SLOT,) * len(operands), ())
    opdef = _group_op(op)
    recorder.locate(opdef.name, template)  # a recompilation for a changed constant names this line
    node = Node(opdef, tuple(operands), template, tuple(metas), location, scope)
    recorder.count(opdef.name)
    results = []
    for i, ((each, call, _), meta) in enumerate(zip(calls, metas)):
        value = getitem(node, i)
        if not inplace:
            results.append(wrap(Storage(value, device), meta))
            continue
        dst = call[0]
        if meta == firsts[i].meta:
            dst._assign(value)
            # PyTorch/XLA makes (and drops) a tensor for the functional op's result, as recording.record_into counts it.
            recorder.tensors_created += 1
            recorder.count_freed()
        else:  # a result to broadcast or convert: write_into's checks and errors
            write_into(dst, wrap(Storage(value, device), meta), getattr(aten, each + "_", None))
        results.append(dst)
    return results


def _foreach(func, args, kwargs):
    """`_foreach_<op>[_]`: one grouped node where the per-tensor op is a plain lowering (`_record_group`), else
    one lazy per-tensor op per list element (no CPU fallback, no sync).

    Raises:
      RuntimeError: the tensor lists differ in length, or the per-tensor op refuses its arguments.
    """
    name = func._schema.name.split("::")[1]
    inplace = name.endswith("_")
    op = name[len("_foreach_"):].rstrip("_")
    if len(args) == 2 and not isinstance(args[0], (list, tuple)) and isinstance(args[1], (list, tuple)) \
            and not inplace and not kwargs:  # _foreach_pow.ScalarAndTensor: a number to each tensor's power
        return [getattr(torch, op)(args[0], t) for t in args[1]]
    if not args or not isinstance(args[0], (list, tuple)):
        return run_on_cpu(func, args, kwargs)
    if op == "norm":
        norms = _norms(*args, **kwargs)
        if norms is not None:
            return norms
    keyword = _FOREACH_KEYWORD.get(op)

    # The `.Tensor` overloads pass per-tensor scalars as one 1-D tensor: read them as numbers.
    names = [a.name for a in func._schema.arguments]
    args = [a.tolist() if isinstance(a, torch.Tensor) and names[i] == "scalars" else a for i, a in enumerate(args)]
    count = len(args[0])
    for value in list(args[1:]) + list(kwargs.values()):
        if isinstance(value, (list, tuple)) and len(value) != count:
            # Eager's words (its foreach kernels check the lists before any work).
            if value and not isinstance(value[0], torch.Tensor):
                raise RuntimeError("Tensor list must have same number of elements as scalar list.")
            raise RuntimeError(f"Tensor lists must have the same number of tensors, got {count} and {len(value)}")

    def pick(value, i):
        return value[i] if isinstance(value, (list, tuple)) else value

    calls = []
    for i in range(count):
        call = [pick(a, i) for a in args]
        call_kwargs = {k: pick(v, i) for k, v in kwargs.items()}
        if keyword is not None and len(call) > 3:
            call_kwargs[keyword] = call.pop(3)
        each = op  # the op on each tensor
        if op in _WITH_A_NUMBER and len(call) > 1 and not isinstance(call[1], torch.Tensor):
            each = _WITH_A_NUMBER[op]
        calls.append((each, call, call_kwargs))
    if calls and op != "copy":
        grouped = _record_group(op, calls, inplace)
        if grouped is not None:
            return None if inplace else grouped
    results = []
    for each, call, call_kwargs in calls:
        if each == "copy" and not inplace:  # the functional copy (AOTAutograd's of `_foreach_copy_`): self's
            results.append(torch.empty_like(call[0]).copy_(call[1]))  # shape and dtype, src's values
            continue
        method = getattr(call[0], each + "_" if inplace else each, None)
        if method is not None:
            results.append(method(*call[1:], **call_kwargs))
        else:  # no in-place method (maximum_, minimum_...): compute, then write into the tensor
            results.append(call[0].copy_(getattr(torch, each)(*call, **call_kwargs)))
    return None if inplace else results


_FLOATING = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))


def _norms(tensors, ord=2, dtype=None):
    """`_foreach_norm` (clip_grad_norm_'s) as one node: every tensor's vector norm in one jax function, where the
    per-tensor path records a power, a sum and a root for each. None for what that path handles instead
    (an empty tensor, a dtype other than a floating one, tensors of several devices).
    """
    tensors = list(tensors)
    if (not tensors or not isinstance(ord, (int, float)) or isinstance(ord, bool)
            or (dtype is not None and dtype not in _FLOATING)
            or not all(isinstance(t, XlaTensor) and t.dtype in _FLOATING and t.numel() for t in tensors)
            or len({t.device for t in tensors}) != 1):
        return None
    from xladev.runtime.record.jax_call import call_jax

    with torch.no_grad():  # below autograd: torch's own formula differentiates _foreach_norm above this
        if dtype is not None:  # cast here: the jax function's precision follows its inputs' (float64 turns x64 on)
            tensors = [t if t.dtype == dtype else t.to(dtype) for t in tensors]
        return list(call_jax(_norm_function(float(ord)), tuple(tensors), name="foreach_norm"))


@functools.lru_cache(maxsize=64)
def _norm_function(ord: float):
    """The jax function of `_foreach_norm` at one order (cached: its traces are reused every step)."""
    import jax.numpy as jnp

    def foreach_norm(*xs):
        return tuple(jnp.linalg.vector_norm(x, ord=ord) for x in xs)

    return foreach_norm


def _register() -> None:
    for schema in torch._C._jit_get_all_schemas():  # `dir(aten)` only lists packets already loaded
        if schema.name.startswith("aten::_foreach_"):
            packet = getattr(aten, schema.name[len("aten::"):])
            special(getattr(packet, schema.overload_name or "default"))(_foreach)


_register()
