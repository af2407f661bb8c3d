"""PyTorch/XLA's hand-written XLA builder (`xb.Op`, `xb.Type`, `xb.Shape`) over jax: each `Op` holds a jax value
(an array, or a tuple of arrays for a tuple op) inside a function that `call_jax` traces, and each builder method is
the `jax.lax` operation of the same XLA semantics. `xla_op_registry.register(name, fn)` runs such a function on xla
tensors as one node of the step's graph.

One entry per op in the tables below; methods that need more than one lax call are written out. A builder method
with no meaning here (a computation handed over as an XLA proto, `build`, dynamic shapes) raises an error that
names `xb.call_jax`, the way to write any computation in jax.
"""

from __future__ import annotations

import torch

from xladev.errors import XladevError
from xladev.runtime.graph.backend import to_jnp_dtype, to_torch_dtype
from xladev.runtime.graph.irtext import dtype_short

# XLA's primitive types by PyTorch/XLA's names: the short names XLA prints (`f32`, `bf16`, `pred`, ...).
_TORCH_TYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.uint8, torch.int8,
                torch.uint16, torch.int16, torch.uint32, torch.int32, torch.uint64, torch.int64, torch.complex64,
                torch.complex128, torch.bool)
XLA_PT_TYPE_MAP = {dtype_short(dtype): dtype for dtype in _TORCH_TYPES}
PT_XLA_TYPE_MAP = {dtype: name for name, dtype in XLA_PT_TYPE_MAP.items()}


class Type:
    """XLA's element types, as PyTorch/XLA names them (`xb.Type.F32` is ``"f32"``)."""

    F32, F64, BF16, F16 = "f32", "f64", "bf16", "f16"
    U8, S8, U16, S16, U32, S32, U64, S64 = "u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64"
    C64, C128, PRED = "c64", "c128", "pred"


class BuilderError(XladevError, NotImplementedError):
    """A builder method xladev does not provide; its message names the way to write the computation in jax."""


def _unsupported(what: str) -> BuilderError:
    return BuilderError(f"torch_xla.core.xla_builder: {what} is not supported by xladev; write the computation as a "
                        "jax function and run it with xb.call_jax(fn, args) (docs/compat.md)")


class Shape:
    """An op's shape: its element type (`Type`) and sizes, or a tuple of shapes.

    Args:
      dtype: a `Type` name (None for a tuple).
      sizes: the dimensions.
      elements: the element shapes of a tuple shape.
    """

    def __init__(self, dtype: str | None, sizes=(), elements: tuple["Shape", ...] | None = None):
        self._dtype, self._sizes, self._elements = dtype, tuple(int(s) for s in sizes), elements

    @classmethod
    def create(cls, dtype, sizes, dynamic_dimensions=None) -> "Shape":
        if dynamic_dimensions:
            raise _unsupported("a shape with dynamic dimensions")
        return cls(dtype, sizes)

    @property
    def shape(self) -> "Shape":
        return self

    def is_tuple(self) -> bool:
        return self._elements is not None

    def tuple_size(self) -> int:
        return len(self._elements or ())

    def tuple_shape(self, index: int) -> "Shape":
        return self._elements[index]

    def is_dynamic(self) -> bool:
        return False

    def as_scalar(self) -> "Shape":
        return Shape(self._dtype, ())

    def rank(self) -> int:
        return len(self._sizes)

    @property
    def sizes(self) -> tuple[int, ...]:
        return self._sizes

    @property
    def dynamic_dimensions(self) -> tuple[bool, ...]:
        return (False,) * len(self._sizes)

    @property
    def dtype(self) -> str | None:
        return self._dtype

    def __repr__(self) -> str:
        if self._elements is not None:
            return "(" + ", ".join(map(repr, self._elements)) + ")"
        return f"{self._dtype}[{','.join(map(str, self._sizes))}]"


def _jnp_type(name: str | None):
    return to_jnp_dtype(XLA_PT_TYPE_MAP[name] if name else torch.float32)


def _shape_of(value) -> Shape:
    if isinstance(value, tuple):
        return Shape(None, (), tuple(_shape_of(v) for v in value))
    return Shape(PT_XLA_TYPE_MAP[to_torch_dtype(value.dtype)], value.shape)


def _value(x):
    """The jax value of an `Op` (a number as a weak-typed scalar)."""
    return x.op if isinstance(x, Op) else x


def _lift(result):
    """A jax value as an `Op` (a tuple or list of values: a tuple op)."""
    if isinstance(result, Op):
        return result
    if isinstance(result, (tuple, list)):
        return Op(tuple(_value(r) for r in result))
    return Op(result)


def _computation(fn):
    """A Python function of ops (PyTorch/XLA calls it with a tuple op's elements) as a function of jax values."""
    if not callable(fn):
        raise _unsupported("a computation that is not a Python function")

    def run(*values):
        return _lift(fn(*(Op(v) for v in values))).op

    return run


class _Builder:
    """The one builder of a traced function: ops need no builder of their own here."""

    def __repr__(self) -> str:
        return "<xladev builder>"


BUILDER = _Builder()


class Op:
    """An XLA operation's value inside a traced function (PyTorch/XLA's `xb.Op`).

    Args:
      op: a jax array, or a tuple of them for a tuple op.
    """

    def __init__(self, op):
        self.op = op

    def shape(self) -> Shape:
        return _shape_of(self.op)

    def builder(self) -> _Builder:
        return BUILDER

    def build(self, name):
        raise _unsupported("Op.build")

    def __bool__(self):
        raise TypeError("xb.Op: the value of an op is not known while the computation is built; use "
                        "Op.mkconditional or Op.select")

    # ---- shapes and types ------------------------------------------------------------------------
    def reshape(self, sizes, dimensions=None, inferred_dimension=None) -> "Op":
        from jax import lax

        return Op(lax.reshape(self.op, tuple(sizes), tuple(dimensions) if dimensions is not None else None))

    def broadcast(self, sizes) -> "Op":
        from jax import lax

        return Op(lax.broadcast(self.op, tuple(sizes)))

    def broadcast_in_dim(self, sizes, dimensions) -> "Op":
        from jax import lax

        return Op(lax.broadcast_in_dim(self.op, tuple(sizes), tuple(dimensions)))

    def slice(self, start_indices, limit_indices, strides=None) -> "Op":
        from jax import lax

        return Op(lax.slice(self.op, tuple(start_indices), tuple(limit_indices),
                            tuple(strides) if strides is not None else None))

    def slice_in_dim(self, start_index, limit_index, dimno, stride=1) -> "Op":
        from jax import lax

        return Op(lax.slice_in_dim(self.op, start_index, limit_index, stride, dimno))

    def dynamic_slice(self, start_indices, slice_sizes) -> "Op":
        from jax import lax

        return Op(lax.dynamic_slice(self.op, [_value(i) for i in start_indices], tuple(slice_sizes)))

    def dynamic_update_slice(self, update, start_indices) -> "Op":
        from jax import lax

        return Op(lax.dynamic_update_slice(self.op, _value(update), [_value(i) for i in start_indices]))

    def cast(self, to_type) -> "Op":
        from jax import lax

        return Op(lax.convert_element_type(self.op, _jnp_type(to_type)))

    def bitcast(self, to_type) -> "Op":
        from jax import lax

        return Op(lax.bitcast_convert_type(self.op, _jnp_type(to_type)))

    def pad(self, value, config) -> "Op":
        from jax import lax

        return Op(lax.pad(self.op, _value(value), [tuple(c) for c in config]))

    def transpose(self, permutation) -> "Op":
        from jax import lax

        return Op(lax.transpose(self.op, tuple(permutation)))

    def rev(self, dimensions) -> "Op":
        from jax import lax

        return Op(lax.rev(self.op, tuple(dimensions)))

    def get_dimension_size(self, dimension) -> "Op":
        import jax.numpy as jnp

        return Op(jnp.asarray(self.op.shape[dimension], dtype=jnp.int32))

    def get_tuple_element(self, index) -> "Op":
        if not isinstance(self.op, tuple):
            raise TypeError(f"xb.Op.get_tuple_element: the op is not a tuple (its shape is {self.shape()})")
        return Op(self.op[index])

    # ---- selection, linear algebra ---------------------------------------------------------------
    def select(self, true_value, false_value) -> "Op":
        from jax import lax

        return Op(lax.select(self.op, _value(true_value), _value(false_value)))

    def clamp(self, min_value, max_value) -> "Op":
        from jax import lax

        return Op(lax.clamp(_value(min_value), self.op, _value(max_value)))

    def triangualr_solve(self, b, left_side, lower, unit_diagonal, transpose_a) -> "Op":
        """Solves op(A)·x = b (or x·op(A) = b when not `left_side`) for this op as A (PyTorch/XLA's spelling)."""
        from jax.lax import linalg

        return Op(linalg.triangular_solve(self.op, _value(b), left_side=left_side, lower=lower,
                                          transpose_a=transpose_a, unit_diagonal=unit_diagonal))

    triangular_solve = triangualr_solve

    # ---- control flow ----------------------------------------------------------------------------
    def mkconditional(self, ops, true_fn, false_fn, **kwargs) -> "Op":
        """`true_fn(*ops)` when this predicate holds, else `false_fn(*ops)`."""
        from jax import lax

        return Op(lax.cond(self.op, _computation(true_fn), _computation(false_fn), *(_value(o) for o in ops)))

    def conditional(self, true_operand, false_operand, true_computation, false_computation) -> "Op":
        """`true_computation` of `true_operand` when this predicate holds, else `false_computation` of
        `false_operand` (a tuple operand is passed as its elements)."""
        from jax import lax

        def apply(fn):
            run = _computation(fn)
            return lambda operand: run(*operand) if isinstance(operand, tuple) else run(operand)

        on_true, on_false = apply(true_computation), apply(false_computation)
        return Op(lax.cond(self.op, lambda t, f: on_true(t), lambda t, f: on_false(f), true_operand.op,
                           false_operand.op))

    def while_loop(self, condition_computation, body_computation) -> "Op":
        """Runs `body_computation` on this tuple's elements while `condition_computation` of them holds."""
        from jax import lax

        condition, body = _computation(condition_computation), _computation(body_computation)
        return Op(lax.while_loop(lambda state: condition(*state), lambda state: tuple(body(*state)),
                                 tuple(self.op)))

    @classmethod
    def mkwhile(cls, ops, condition_fn, body_fn, **kwargs) -> "Op":
        return cls.tuple(ops).while_loop(condition_fn, body_fn)

    # ---- constants and tuples --------------------------------------------------------------------
    def scalar_like(self, value) -> "Op":
        shape = self.shape()
        return Op.scalar(BUILDER, value, dtype=shape.dtype).broadcast(shape.sizes)

    def zeros_like(self) -> "Op":
        return self.scalar_like(0)

    def ones_like(self) -> "Op":
        return self.scalar_like(1)

    @classmethod
    def tuple(cls, ops, builder=None) -> "Op":
        return Op(tuple(_value(o) for o in ops))

    @classmethod
    def concat_in_dim(cls, ops, dimension, builder=None) -> "Op":
        from jax import lax

        return Op(lax.concatenate([_value(o) for o in ops], dimension))

    @classmethod
    def call(cls, computation, ops, builder=None) -> "Op":
        return Op(_computation(computation)(*(_value(o) for o in ops)))

    @classmethod
    def constant(cls, builder, value) -> "Op":
        import jax.numpy as jnp

        if isinstance(value, torch.Tensor):
            return Op(jnp.asarray(value.detach().cpu().numpy()))
        return Op(jnp.asarray(value))

    @classmethod
    def scalar(cls, builder, value, dtype=None) -> "Op":
        import jax.numpy as jnp

        return Op(jnp.asarray(value, dtype=_jnp_type(dtype)))

    @classmethod
    def zero(cls, builder, dtype=None) -> "Op":
        return cls.scalar(builder, 0, dtype=dtype)

    @classmethod
    def one(cls, builder, dtype=None) -> "Op":
        return cls.scalar(builder, 1, dtype=dtype)

    @classmethod
    def iota(cls, builder, shape, iota_dimension) -> "Op":
        from jax import lax

        return Op(lax.broadcasted_iota(_jnp_type(shape.dtype), shape.sizes, iota_dimension))

    @classmethod
    def to_torch_type(cls, dtype) -> torch.dtype:
        return XLA_PT_TYPE_MAP[dtype] if dtype else torch.float32

    @classmethod
    def from_torch_type(cls, dtype) -> str:
        return PT_XLA_TYPE_MAP[dtype]


def _binary(name: str, lax_name: str):
    def method(self, rhs):
        from jax import lax

        return Op(getattr(lax, lax_name)(self.op, _value(rhs)))

    method.__name__ = name
    return method


def _unary(name: str, lax_name: str):
    def method(self):
        from jax import lax

        return Op(getattr(lax, lax_name)(self.op))

    method.__name__ = name
    return method


# XLA's element-wise operations: the method of `Op` -> the `jax.lax` function of the same semantics (integer
# division truncates, `%` is XLA's remainder, `>>` XLA's logical shift on unsigned and arithmetic on signed types).
_BINARY = {
    "__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div", "__pow__": "pow",
    "__mod__": "rem", "__and__": "bitwise_and", "__or__": "bitwise_or", "__xor__": "bitwise_xor",
    "__eq__": "eq", "__ne__": "ne", "__le__": "le", "__lt__": "lt", "__ge__": "ge", "__gt__": "gt",
    "__lshift__": "shift_left", "__matmul__": "dot", "atan2": "atan2", "max": "max", "min": "min",
}
_UNARY = {
    "__neg__": "neg", "__invert__": "bitwise_not", "__not__": "bitwise_not", "acos": "acos", "asin": "asin",
    "atan": "atan", "ceil": "ceil", "cos": "cos", "cosh": "cosh", "erf": "erf", "erfc": "erfc",
    "erfinf": "erf_inv", "exp": "exp", "expm1": "expm1", "floor": "floor", "log": "log", "log1p": "log1p",
    "sqrt": "sqrt", "real": "real", "imag": "imag", "clz": "clz", "conj": "conj", "rsqrt": "rsqrt", "sin": "sin",
    "sinh": "sinh", "tan": "tan", "tanh": "tanh",
}
for _name, _lax in _BINARY.items():
    setattr(Op, _name, _binary(_name, _lax))
for _name, _lax in _UNARY.items():
    setattr(Op, _name, _unary(_name, _lax))
Op.__hash__ = object.__hash__  # `==` builds an op, as in PyTorch/XLA; ops stay usable as dict keys


def _rshift(self, rhs):
    from jax import lax
    import jax.numpy as jnp

    shift = lax.shift_right_logical if jnp.issubdtype(self.op.dtype, jnp.unsignedinteger) else \
        lax.shift_right_arithmetic
    return Op(shift(self.op, _value(rhs)))


Op.__rshift__ = _rshift


def mkshape(dtype, sizes, dynamic_dimensions=None) -> Shape:
    """A shape of `dtype` (a `Type` name) and `sizes`."""
    return Shape.create(dtype, sizes, dynamic_dimensions=dynamic_dimensions)


def tensor_shape(tensor, device="") -> list[Shape] | Shape:
    """The shape of a tensor, or of each tensor of a list."""
    if isinstance(tensor, (list, tuple)):
        return [tensor_shape(t) for t in tensor]
    return Shape(PT_XLA_TYPE_MAP[tensor.dtype], tensor.shape)


def run_ops(opfn, values, kwargs):
    """`opfn` on ops of `values` (jax arrays), as the jax values of its result: what `xla_op_registry` traces."""
    return _lift(opfn(*(Op(v) for v in values), **kwargs)).op
