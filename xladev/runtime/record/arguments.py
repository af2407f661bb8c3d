"""An op's arguments as recording splits them: operand nodes, a hashable template and a signature key,
and the dtype each Python number takes as a graph input (its plan).

The general walk (`flatten`) takes any argument: lists, CPU 0-dim tensors, keyword arguments, devices.
recording.py's signature cache (`_trace`) goes through it once per op and argument signature.
"""

from __future__ import annotations

import torch

from xladev._flags import config
from xladev.runtime.graph import scalars
from xladev.runtime.record.fake_operands import FakeOperands, is_fake
from xladev.runtime.graph.ir import SLOT, Meta, Node, ScalarType, scalar_node
from xladev.runtime.record.tensor import XlaTensor

# 0, 1 and -1 are baked into graphs as constants, as in PyTorch/XLA; XLA_NO_SPECIAL_SCALARS=1 feeds them as inputs.
special_scalars = scalars.NONE_SPECIAL if config.no_special_scalars else scalars.SPECIAL


def _on_flag(name, value) -> None:
    global special_scalars
    if name == "no_special_scalars":
        special_scalars = scalars.NONE_SPECIAL if value else scalars.SPECIAL


config.on_update(_on_flag)


def mismatch(a: str, b: str) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def argument(args, kwargs, index: int, name: str, default):
    """One argument of an op call, passed by position or by keyword.

    Args:
      args, kwargs: the call's arguments.
      index: the argument's position in the op's schema.
      name: its name in the schema.
      default: its value when the call leaves it out.

    Returns:
      The value.
    """
    return kwargs.get(name, args[index] if len(args) > index else default)


PLAIN_TYPES = frozenset((bool, str, type(None), torch.dtype, torch.memory_format, torch.layout))


def flatten(args, kwargs, traits, device_ref):
    """Splits an op's arguments into operand nodes, a hashable template and a meta-cache key.

    A Python number fed as an input is left in `operands` as the number itself: its dtype depends on
    the whole op (`bind_scalars` makes it a node).

    Args:
      args, kwargs: the op's arguments.
      traits: the op's OpTraits (which arguments are Scalars).
      device_ref: [device index or None], set to the device of the first device tensor met.

    Raises:
      RuntimeError: device tensors of two devices, or a CPU tensor that is not 0-dim.

    Returns:
      (operands, template, key, numbers) where template is (args, kwargs-items) with SLOT for operands
      and `numbers` tells whether `operands` holds Python numbers.
    """
    if not kwargs:
        # Fast path, same results as `walk` below: positional device tensors, Python scalars and
        # plain constants (most ops). Anything else (lists, CPU tensors, devices) takes the general walk.
        operands = []
        key = []
        template = []
        device = device_ref[0]
        scalar_pos = traits.scalar_positions
        numbers = False
        for i, value in enumerate(args):
            kind = type(value)
            if kind is XlaTensor:
                st = value._st
                if device is None:
                    device = st.device_index
                elif device != st.device_index:
                    raise mismatch(f"xla:{device}", f"xla:{st.device_index}")
                operands.append(st.value if value._chain is None else value._node())
                key.append((value.shape, value.dtype))
                template.append(SLOT)
            elif (kind is int or kind is float) and i in scalar_pos and value not in special_scalars:
                operands.append(value)
                key.append(ScalarType(kind))
                template.append(SLOT)
                numbers = True
            elif kind is int or kind is float or kind in PLAIN_TYPES:
                key.append((kind, value))  # True == 1 == 1.0 as dict keys, not as arguments
                template.append(value)
            else:
                break
        else:
            device_ref[0] = device
            return operands, (tuple(template), ()), tuple(key), numbers
    operands: list = []
    key: list = []

    def walk(value, is_scalar_arg):
        if isinstance(value, XlaTensor):
            index = value._st.device_index
            if device_ref[0] is None:
                device_ref[0] = index
            elif device_ref[0] != index:
                raise mismatch(f"xla:{device_ref[0]}", f"xla:{index}")
            operands.append(value._node())
            key.append((value.shape, value.dtype))
            return SLOT
        if isinstance(value, torch.Tensor):
            if value.dim() != 0 or value.device.type != "cpu":
                if is_fake(value):  # inside a torch.compile trace: the fake mode runs this op (fake_operands.py)
                    raise FakeOperands(value)
                raise mismatch("xla:0" if device_ref[0] is None else f"xla:{device_ref[0]}", str(value.device))
            # A CPU 0-dim tensor mixes with device tensors, as in eager PyTorch: feed it as a scalar input.
            operands.append(scalar_node(value.item(), value.dtype))
            key.append(((), value.dtype))
            return SLOT
        if isinstance(value, (list, tuple)):
            key.append((list, len(value)))  # keeps the nesting: sum(x, [1]) is not sum(x, [], True)
            out = tuple(walk(v, False) for v in value)
            return out
        if is_scalar_arg and type(value) in (int, float) and value not in special_scalars:
            # A Python scalar operand becomes a graph input, so a new value (a learning rate, a
            # bias correction) reuses the compiled graph instead of recompiling it.
            operands.append(value)
            key.append(ScalarType(type(value)))
            return SLOT
        if isinstance(value, torch.device):
            key.append("device")
            return None
        key.append((type(value), value))
        return value

    scalar_pos = traits.scalar_positions
    template_args = tuple([walk(a, i in scalar_pos) for i, a in enumerate(args)])
    # Keyword names are part of the key: f(x, a=True, b=False) is not f(x, b=True, a=False).
    template_kwargs = tuple((k, key.append(k) or walk(v, k in traits.scalar_names))
                            for k, v in kwargs.items()) if kwargs else ()
    numbers = any(type(o) is int or type(o) is float for o in operands)
    # `walk` refers to itself through its closure: a cycle that would keep `operands` (old device data)
    # alive until the garbage collector runs, and so keep the step barrier from donating that data.
    walk = None  # noqa: F841
    return operands, (template_args, template_kwargs), tuple(key), numbers


# (op traits, meta-cache key) → [(operand index, dtype, conversion)]: how an op's Python numbers become
# inputs. The key holds every tensor's shape and dtype and every number's type, which decide the dtypes.
_plans: dict = {}
_PLANS_SIZE = 65_536
_AS_FLOAT, _INT_RANGE = scalars.AS_FLOAT, scalars.INT_RANGE


def _numbers_of(args, kwargs, traits) -> list[type]:
    """Types of the op's Python numbers in Scalar and Tensor slots, constants included."""
    kinds = [type(a) for i, a in enumerate(args) if i in traits.scalar_positions and type(a) in (int, float)]
    kinds += [type(v) for k, v in kwargs.items() if k in traits.scalar_names and type(v) in (int, float)]
    return kinds


def _out_dtype(meta):
    while meta is not None and type(meta) is not Meta:
        meta = next((m for m in meta if m is not None), None)
    return None if meta is None else meta.dtype


def plan_scalars(func, operands, args, kwargs, traits, meta) -> list:
    """How the Python numbers left in `operands` become inputs: [(operand index, dtype, mode, lo, hi)]
    (`scalars.conversion`), for `apply_plan`. `meta` is the op's output metadata."""
    metas = [o.meta for o in operands if isinstance(o, Node)]
    kinds = _numbers_of(args, kwargs, traits)
    out = _out_dtype(meta)
    plan = []
    for i, value in enumerate(operands):
        kind = type(value)
        if kind is int or kind is float:
            dtype = scalars.scalar_dtype(func, kind, metas, kinds, out)
            how = scalars.conversion(dtype)
            if (how[0] == scalars.AS_FLOAT and kind is float) or (how[0] == scalars.INT_RANGE and dtype is torch.int64):
                how = (scalars.AS_IS, 0, 0)  # already a value of the dtype: nothing to convert
            plan.append((i, dtype) + how)
    return plan


def bind_scalars(func, operands, key, args, kwargs, traits, meta) -> None:
    """Replaces the Python numbers in `operands` by scalar input nodes of the dtype PyTorch/XLA gives them."""
    try:
        plan = _plans.get((traits, key))
    except TypeError:  # an unhashable argument: plan without memoising
        plan = plan_scalars(func, operands, args, kwargs, traits, meta)
    else:
        if plan is None:
            plan = plan_scalars(func, operands, args, kwargs, traits, meta)
            if len(_plans) >= _PLANS_SIZE:
                _plans.clear()
            _plans[(traits, key)] = plan
    apply_plan(plan, operands)


def apply_plan(plan, operands) -> None:
    """Replaces the numbers in `operands` by their scalar input nodes, as `plan` (`plan_scalars`) says."""
    for i, dtype, mode, lo, hi in plan:
        value = operands[i]
        if mode:  # scalars.convert, its common cases inline
            if mode == _AS_FLOAT:
                value = float(value)
            elif mode == _INT_RANGE:
                if not lo <= value <= hi:
                    dtype = torch.int64
            else:
                value, dtype = scalars.convert(value, dtype, mode, lo, hi)
        operands[i] = scalar_node(value, dtype)
