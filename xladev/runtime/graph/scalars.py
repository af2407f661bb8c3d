"""Python numbers fed to ops: which ones are constants, and the dtype each takes, as in PyTorch/XLA.

PyTorch/XLA turns a Python number into a 0-d IR value of an element type chosen by the op, and makes it
a `prim::Constant` when it is special (0, 1 or -1; `XLA_NO_SPECIAL_SCALARS=1` turns that off), else a
device-data input. The element type:

- `OWN`: the number's own type, float64 for a float and int64 for an int. Comparisons
  (`eq`/`ne`/`lt`/`le`/`gt`/`ge`) and the ops PyTorch/XLA generates from the lazy-tensor codegen
  (`addcmul`/`addcdiv` `value`, `elu`, `leaky_relu`, `hardshrink`, `softshrink`, `masked_fill`...).
- `OPMATH`: `div.Scalar` divides in the input's op-math type (float32 for float16/bfloat16 inputs,
  the default dtype for integer ones).
- `PROMOTED`, every other op: PyTorch's result type of the op's tensors and numbers (a number does not
  promote a float32 tensor; a float with an integer tensor gives the default dtype; an int with an
  int32 tensor stays int32). That is what the binary arithmetic ops give a wrapped number, `alpha`
  included, and the input's type the other ops use. An op without tensor operands (`full`,
  `scalar_tensor`) gives its number the output's dtype.

The dtype shows in the IR text, Graph Info and the upload (its bytes, `DeviceDataCacheMiss`). Values
keep eager PyTorch's: the graph computes in the op's promoted dtype anyway.
"""

from __future__ import annotations

import math
import struct

import torch

OWN, PROMOTED, OPMATH = 0, 1, 2

# 0, 1 and -1, as torch::lazy::IsSpecialScalar (|value| == 1 or value == 0); floats match too (1.0 == 1,
# -0.0 == 0). Callers check the type first: bools are not numbers here.
SPECIAL = frozenset((0, 1, -1))
NONE_SPECIAL: frozenset = frozenset()

# Ops whose Python numbers keep their own type (float64/int64) in PyTorch/XLA: comparisons, and the
# ops it generates with the lazy-tensor codegen (their Scalar arguments, and numbers in Tensor slots,
# become device data of the number's own type).
_OWN_TYPE_OPS = frozenset((
    "aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge",
    "aten::addcmul", "aten::addcdiv", "aten::elu", "aten::leaky_relu", "aten::leaky_relu_backward",
    "aten::hardshrink", "aten::hardshrink_backward", "aten::softshrink", "aten::softshrink_backward",
    "aten::masked_fill", "aten::maximum", "aten::minimum", "aten::logical_and", "aten::logical_or",
    "aten::logical_xor", "aten::bitwise_left_shift", "aten::bitwise_right_shift",
))

_rules: dict = {}


def rule(func) -> int:
    """OWN, OPMATH or PROMOTED for an aten overload (see the module docstring)."""
    found = _rules.get(func)
    if found is None:
        name = func._schema.name
        if name in _OWN_TYPE_OPS:
            found = OWN
        elif name == "aten::div" and func._schema.overload_name == "Scalar":
            found = OPMATH
        else:
            found = PROMOTED
        _rules[func] = found
    return found


def _wrapped(kind) -> torch.dtype:
    if kind is float:
        return torch.get_default_dtype()
    if kind is int:
        return torch.int64
    if kind is bool:
        return torch.bool
    return torch.complex128 if torch.get_default_dtype() is torch.float64 else torch.complex64


def _promote(a, b):
    return b if a is None else a if b is None else torch.promote_types(a, b)


_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}


def _combine(higher, lower):
    """PyTorch's combine_categories: `higher`'s category wins, within it the types promote."""
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher.is_complex:
        return higher
    if lower.is_complex:
        return _COMPLEX_OF.get(higher, lower) if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher is torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def result_type(metas, kinds) -> torch.dtype | None:
    """`torch.result_type` of tensors (Metas: dimensioned ones outrank 0-d ones) and Python numbers (types)."""
    dims = zeros = wrapped = None
    for meta in metas:
        if meta.shape:
            dims = _promote(dims, meta.dtype)
        else:
            zeros = _promote(zeros, meta.dtype)
    for kind in kinds:
        wrapped = _promote(wrapped, _wrapped(kind))
    return _combine(dims, _combine(zeros, wrapped))


def _fits(kind, dtype) -> bool:
    """A number of type `kind` keeps its value in `dtype`'s category (no float into an integer type)."""
    if kind is float:
        return dtype.is_floating_point or dtype.is_complex
    return dtype is not torch.bool


def scalar_dtype(func, kind, metas, kinds, out) -> torch.dtype:
    """The dtype PyTorch/XLA gives a Python number of type `kind` passed to `func`.

    Args:
      func: the aten overload.
      kind: int or float.
      metas: Metas of the op's tensor operands (0-d scalar inputs included).
      kinds: the types of the op's Python numbers (this one included).
      out: the dtype of the op's (first) output, or None.
    """
    own = torch.float64 if kind is float else torch.int64
    how = rule(func)
    if how == OWN:
        return own
    if not metas:  # full, scalar_tensor, linspace: the dtype asked for
        return out if out is not None and _fits(kind, out) else own
    if how == OPMATH:
        dtype = metas[0].dtype
        if dtype.is_floating_point:
            return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
        return torch.get_default_dtype()
    dtype = result_type(metas, kinds)
    if (out is not None and out is not dtype and (dtype.is_floating_point or dtype.is_complex)
            and (out.is_floating_point or out.is_complex)):
        dtype = torch.promote_types(dtype, out)  # never narrower than the result: full_like(x, v, dtype=float64)
    return dtype if _fits(kind, dtype) else own


# ---- the value uploaded ------------------------------------------------------------------------------
AS_IS, AS_FLOAT, VIA_FLOAT32, INT_RANGE = 0, 1, 2, 3
_F32 = struct.Struct("f")


def conversion(dtype: torch.dtype) -> tuple:
    """(mode, lo, hi): how a number becomes a value of `dtype` (see `convert`); lo and hi are an integer
    dtype's range, or for float16 the magnitude that rounds to infinity (hi)."""
    if dtype is torch.float16:  # numpy rounds a double to float16 directly; c10 and XLA go through float32
        return VIA_FLOAT32, 1, 65520.0  # float16 rounds 65520 and beyond to infinity
    if dtype.is_floating_point or dtype.is_complex:  # ml_dtypes' bfloat16 already goes through float32
        return AS_FLOAT, 0, 0
    if dtype is torch.bool:
        return AS_IS, 0, 0
    info = torch.iinfo(dtype)
    return INT_RANGE, info.min, info.max


def to_float32(value: float) -> float:
    """`value` rounded to float32, as PyTorch (c10) and XLA convert a double to float16 (and bfloat16)."""
    try:
        return _F32.unpack(_F32.pack(value))[0]
    except OverflowError:  # beyond float32's range: infinity, as a C cast gives
        return math.copysign(math.inf, value)


def convert(value, dtype: torch.dtype, mode: int, lo: int, hi: int) -> tuple:
    """(value, dtype) to upload: ints become floats for a float dtype (so `2` and `2.0` are one input, as
    PyTorch/XLA caches device data by value); an int out of an integer dtype's range stays int64."""
    if mode == AS_FLOAT:
        return float(value), dtype
    if mode == VIA_FLOAT32:
        value = to_float32(float(value))
        if abs(value) >= hi:  # infinity here, so numpy does not warn about its overflowing cast
            value = math.copysign(math.inf, value)
        return value, dtype
    if mode == INT_RANGE and not lo <= value <= hi:
        return value, torch.int64
    return value, dtype
