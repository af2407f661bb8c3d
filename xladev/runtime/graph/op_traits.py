"""Per-op facts read once from the aten schema: view or in-place, out= names, Scalar positions."""

from __future__ import annotations

import torch

_cache: dict = {}
# Ops whose output shape depends on the value of a Scalar argument: those values are baked in.
_SHAPE_FROM_SCALARS = {"aten::arange", "aten::range"}


class OpTraits:
    """Schema facts of one aten overload.

    Attributes:
      is_view: returns an alias of its first argument without writing to it.
      is_inplace: writes to its first argument and returns it (`add_`).
      out_names: names of `out=` arguments, for out variants.
      functional: the overload computing the same value without mutation, if one exists.
      scalar_positions / scalar_names: arguments of schema type Scalar (fed as graph inputs).
    """

    __slots__ = ("is_view", "is_inplace", "out_names", "functional", "scalar_positions", "scalar_names", "_shifted")

    def shifted(self) -> "OpTraits":
        """The same traits for the argument list without its first element."""
        if self._shifted is None:
            s = OpTraits.__new__(OpTraits)
            s.is_view, s.is_inplace, s.out_names, s.functional = self.is_view, self.is_inplace, self.out_names, self.functional
            s.scalar_positions = frozenset(i - 1 for i in self.scalar_positions if i > 0)
            s.scalar_names = self.scalar_names
            s._shifted = s
            self._shifted = s
        return self._shifted


def _find_overload(packet_name: str, overload: str):
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None:
        return None
    try:
        return getattr(packet, overload)
    except AttributeError:
        return None


def _functional_for(func, schema, is_inplace: bool, out_names):
    name = schema.name.split("::")[1]
    overload = schema.overload_name or "default"
    if is_inplace and name.endswith("_"):
        # Same overload name first, but only if its arguments have the same types: `pow_.Scalar`
        # (Tensor self, Scalar exponent) is `pow.Tensor_Scalar`, not `pow.Scalar` (Scalar self).
        wanted = [str(a.type) for a in schema.arguments]
        packet = getattr(torch.ops.aten, name[:-1], None)
        if packet is None:
            return None
        names = [overload] + [o for o in packet.overloads() if o != overload]
        for candidate in names:
            found = _find_overload(name[:-1], candidate)
            if found is not None and [str(a.type) for a in found._schema.arguments] == wanted:
                return found
        return None
    if out_names:
        candidates = []
        if overload == "out":
            candidates.append("default")
        for suffix in ("_out", "_values", "values", "out"):
            if overload.endswith(suffix):
                candidates.append(overload[: -len(suffix)].rstrip("_") or "default")
        candidates.append("default")
        # Same argument types as the out variant minus `out`: `div.out` is `div.Tensor`, not
        # `div.default` (two Scalars, returns a float).
        wanted = [str(a.type) for a in schema.arguments if not a.is_out]
        packet = getattr(torch.ops.aten, name, None)
        others = [o for o in packet.overloads() if o not in candidates] if packet is not None else []
        for candidate in candidates + others:
            found = _find_overload(name, candidate)
            if found is not None and [str(a.type) for a in found._schema.arguments] == wanted:
                return found
    return None


def op_traits(func) -> OpTraits:
    traits = _cache.get(func)
    if traits is not None:
        return traits
    schema = func._schema
    arguments = schema.arguments
    first_alias = arguments[0].alias_info if arguments else None
    returns = schema.returns
    ret_alias = returns[0].alias_info if returns else None
    out_names = tuple(a.name for a in arguments if a.is_out)
    t = OpTraits.__new__(OpTraits)
    t.is_inplace = bool(first_alias is not None and first_alias.is_write and not out_names and not arguments[0].kwarg_only)
    t.is_view = bool(ret_alias is not None and not ret_alias.is_write and first_alias is not None and not first_alias.is_write)
    t.out_names = out_names
    t.functional = _functional_for(func, schema, t.is_inplace, out_names)
    # Python numbers in Tensor slots (`x / 0.05` reaches div.Tensor) are operands too.
    scalar_types = ("Scalar", "Optional[Scalar]", "Scalar?", "number", "Optional[number]", "Tensor", "Optional[Tensor]")
    if schema.name in _SHAPE_FROM_SCALARS:
        scalar_types = ()
    t.scalar_positions = frozenset(i for i, a in enumerate(arguments) if str(a.type) in scalar_types and not a.kwarg_only)
    t.scalar_names = frozenset(a.name for a in arguments if str(a.type) in scalar_types)
    t._shifted = None
    _cache[func] = t
    return t
