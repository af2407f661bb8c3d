"""The lowering registry: aten op → jax function.

A lowering is `fn(ctx, *args, **kwargs)` called while jax traces a graph. Tensor arguments arrive as
jax values, everything else as recorded. It returns a jax value (or a tuple for multi-output ops);
graph_lowering.py casts each result to the dtype PyTorch's meta kernel promised, so lowerings may rely on
jax promotion and stay short.
"""

from __future__ import annotations

from typing import Callable

from xladev.runtime.graph.backend import to_jnp_dtype
from xladev.runtime.graph.ir import OpDef

LOWERINGS: dict = {}

# Ops that run as PyTorch's own decomposition (`torch._decomp`) rather than a lowering: registered by
# the lowering module of their family, read once by runtime/record/decompositions.py.
PYTORCH_DECOMPOSED: list = []


def decompose_with_pytorch(*ops) -> None:
    """Lets each of `ops` (aten overloads or packets) run as its `torch._decomp` decomposition."""
    PYTORCH_DECOMPOSED.extend(ops)


def op_name(op) -> str:
    """The IR name of an aten overload: `aten::add` (overloads are not shown, as in PyTorch/XLA)."""
    return op._schema.name


def lowers(*ops) -> Callable:
    """Registers the decorated function as the lowering of each aten overload in `ops`."""

    def register(fn: Callable) -> Callable:
        for op in ops:
            LOWERINGS[op] = OpDef(op_name(op), fn, aten=op)
        return fn

    return register


def promote(ctx, *values) -> tuple:
    """Casts operands to the op's output dtype (PyTorch computes arithmetic in the promoted type)."""
    import jax.numpy as jnp

    dtype = ctx.out_dtype
    return tuple(jnp.asarray(v).astype(dtype) for v in values)


def lowers_promoted(fn: Callable, *ops) -> None:
    """Registers `fn` applied to the operands cast to the output dtype as the lowering of each of `ops`."""

    def lower(ctx, *operands):
        return fn(*promote(ctx, *operands))

    lower.__name__ = lower.__qualname__ = f"promoted_{getattr(fn, '__name__', 'fn')}"
    lowers(*ops)(lower)


class LoweringContext:
    """What a lowering may know about the node it lowers.

    Attributes:
      meta: the node's output Meta (tuple of Metas for multi-output ops).
      in_metas: Metas of the operand nodes, in order.
      node: the IR node (read-only).
    """

    __slots__ = ("meta", "in_metas", "node")

    def __init__(self, node, meta=None):
        self.node = node
        self.meta = node.meta if meta is None else meta
        self.in_metas = tuple(o.meta for o in node.operands)

    @property
    def out_shape(self):
        return self.meta.shape

    @property
    def out_dtype(self):
        return to_jnp_dtype(self.meta.dtype)

    def dtype_of(self, meta_index: int = 0):
        return to_jnp_dtype(self.meta[meta_index].dtype)
