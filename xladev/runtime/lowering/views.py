"""View chains: replaying a view on its base's current value, and writing a view back into the base.

Writing back is generic: applying a view's own lowering to an iota of the base's shape yields, for
each element of the view, its flat index in the base; the new values are scattered there. This covers
select, slice, transpose, permute, diagonal, unfold and as_strided alike.

A few views are instead bijections of their input's whole value, possibly changing its dtype
(`view_as_real`, `view_as_complex`, `_conj`, `_neg_view`): an iota cannot say where their elements
go, nor how a written value maps back. They register their inverse with `invertible_view`, and
writing through them replaces the whole input by the inverse of the new view value.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from xladev.runtime.graph.ir import SLOT, Frozen, Meta, Node, OpDef, getitem, rebuild
from xladev.runtime.lowering.registry import LoweringContext


class ViewStep(NamedTuple):
    """One view op in a chain: its lowering, template (base at SLOT), output meta, and output index."""

    opdef: OpDef
    template: tuple
    meta: object
    index: int | None


def _apply(step: ViewStep, node: Node) -> Node:
    out = Node(step.opdef, (node,), step.template, step.meta)
    if step.index is not None:
        out = getitem(out, step.index)
    return out


def replay(chain: tuple, base: Node) -> Node:
    node = base
    for step in chain:
        node = _apply(step, node)
    return node


def _lower_view_scatter(ctx, base, new, view_name, frozen_template, view_meta, view_index):
    import jax.numpy as jnp

    step_op = _VIEW_OPS[view_name]
    iota = jnp.arange(base.size, dtype=jnp.int64).reshape(base.shape)
    fake = _FakeNode(step_op, view_meta)
    args, kwargs = rebuild(frozen_template[0], [iota])
    index = step_op.lower(LoweringContext(fake), *args, **kwargs)
    if view_index is not None:
        index = index[view_index]
    new = jnp.broadcast_to(new.astype(base.dtype), index.shape)
    flat = base.reshape(-1).at[index.reshape(-1)].set(new.reshape(-1))
    return flat.reshape(base.shape)


class _FakeNode:
    __slots__ = ("meta", "operands")

    def __init__(self, op, meta):
        self.meta = meta
        self.operands = ()


_VIEW_OPS: dict[str, OpDef] = {}
VIEW_SCATTER = OpDef("xla::view_scatter", _lower_view_scatter)


# View op name → OpDef of its inverse, `fn(ctx, view_value) -> input_value` (ctx.meta: the input's Meta).
_INVERSES: dict[str, OpDef] = {}


def invertible_view(op_name: str, inverse: Callable) -> None:
    """Declares view op `op_name` a bijection of its whole input, written back through `inverse`.

    Args:
      op_name: the view op's IR name (`aten::view_as_real`).
      inverse: `fn(ctx, new_view_value)` returning the input value whose view is `new_view_value`;
        `ctx.meta` is the input's Meta (its shape and dtype).
    """
    _INVERSES[op_name] = OpDef(f"xla::inverse_of_{op_name.split('::')[-1]}", inverse)


def _scatter(step: ViewStep, base: Node, new: Node) -> Node:
    inverse = _INVERSES.get(step.opdef.name)
    if inverse is not None:
        # The view covers all of its input: the input's new value follows from the new view value alone.
        return Node(inverse, (new,), ((SLOT,), ()), base.meta)
    _VIEW_OPS[step.opdef.name] = step.opdef
    template = ((SLOT, SLOT, step.opdef.name, Frozen((step.template,)), step.meta, step.index), ())
    return Node(VIEW_SCATTER, (base, new), template, base.meta)


def scatter_into_base(chain: tuple, base: Node, new: Node) -> Node:
    """The new base value after writing `new` through the view `chain`."""
    intermediates = [base]
    for step in chain[:-1]:
        intermediates.append(_apply(step, intermediates[-1]))
    value = new
    for step, below in zip(reversed(chain), reversed(intermediates)):
        value = _scatter(step, below, value)
    return value
