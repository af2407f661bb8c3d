"""Output shapes and dtypes from PyTorch's own meta kernels, memoised by argument signature.

The key holds each tensor's shape and dtype and each Python scalar's type (not its value), so a
changing learning rate hits the cache. Data-dependent ops (nonzero, masked_select...) have no meta
kernel; they raise MetaUnsupported and the caller falls back to the CPU.
"""

from __future__ import annotations

import torch

from xladev.errors import XladevError
from xladev.runtime.graph.ir import SLOT, Meta, ScalarType

_cache: dict = {}
_unsupported: set = set()

# Shape rules for ops whose PyTorch meta kernel is missing or rejects valid arguments: op → a function
# with the op's signature taking and returning meta tensors, as a meta kernel would. Lowering modules
# register them next to their lowerings (the fused RNN cells in lowering/rnn.py).
SHAPE_RULES: dict = {}


class MetaUnsupported(XladevError):
    """This op cannot be recorded lazily (no meta kernel, or a data-dependent output shape)."""


def scalar_type_name(dtype: torch.dtype) -> str:
    """PyTorch's C++ name of a dtype (`Float`, `Long`, `BFloat16`, `ComplexFloat`), as its error messages write it."""
    # A CPU tensor's legacy type string carries that name for every dtype (`torch.ComplexFloatTensor`).
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def _to_meta(value):
    if isinstance(value, torch.Tensor):  # device tensors (XlaTensor) and CPU ones alike
        return torch.empty(tuple(value.shape), dtype=value.dtype, device="meta")
    if isinstance(value, (list, tuple)):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, torch.device):
        return torch.device("meta")
    return value


def _meta_of(value):
    if isinstance(value, torch.Tensor):
        return Meta(tuple(value.shape), value.dtype)
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return type(value)(_meta_of(v) for v in value) if isinstance(value, list) else tuple(_meta_of(v) for v in value)
    raise MetaUnsupported(f"non-tensor output {type(value).__name__}")


def _run_meta(func, args, kwargs):
    meta_args = _to_meta(tuple(args))
    meta_kwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    if "device" in meta_kwargs or _is_factory(func):
        meta_kwargs["device"] = torch.device("meta")
    try:
        return SHAPE_RULES.get(func, func)(*meta_args, **meta_kwargs)
    except (NotImplementedError, torch._subclasses.fake_tensor.DynamicOutputShapeException,
            torch._subclasses.fake_tensor.DataDependentOutputException) as exc:
        raise MetaUnsupported(str(exc)) from None
    except RuntimeError as exc:
        text = str(exc)
        if "meta" in text.lower() and ("not implemented" in text.lower() or "could not run" in text.lower()
                                        or "doesn't support" in text.lower() or "data-dependent" in text.lower()):
            raise MetaUnsupported(text) from None
        raise


def _is_factory(func) -> bool:
    return not any(isinstance(a.type, torch.TensorType) or "Tensor" in str(a.type) for a in func._schema.arguments)


def infer_meta(func, key, args, kwargs):
    """The output Meta (or tuple of Metas) of `func` on these arguments.

    Raises:
      MetaUnsupported: the op has no usable meta kernel.
      RuntimeError: invalid arguments, with PyTorch's own message.
    """
    full_key = (func, key)
    try:
        found = _cache.get(full_key)
    except TypeError:  # an unhashable argument: do not memoise
        full_key = None
        found = None
    if found is not None:
        return found
    # Remembered per signature, not per op: `x[mask]` has no meta (data-dependent), `x[indices]` has.
    if full_key is not None and full_key in _unsupported:
        raise MetaUnsupported(str(func))
    try:
        out = _run_meta(func, args, kwargs)
    except MetaUnsupported:
        if full_key is not None:
            _unsupported.add(full_key)
        raise
    meta = _meta_of(out)
    if isinstance(meta, list):
        raise MetaUnsupported(f"{func} returns a list")
    if full_key is not None:
        _cache[full_key] = meta
    return meta


_view_cache: dict = {}
_VIEW = torch.ops.aten.view.default


def view_meta(func, base, key, args, kwargs):
    """Shape, strides and storage offset of a view, computed on a strided meta tensor.

    Returns:
      (Meta, strides, offset), or a list of those for ops returning several views.
    """
    storage_numel = 1
    for d in base._st.value.meta.shape:
        storage_numel *= d
    full_key = (func, tuple(base.shape), base.stride(), base.storage_offset(), storage_numel, base.dtype, key)
    try:
        found = _view_cache.get(full_key)
    except TypeError:
        full_key, found = None, None
    if found is not None:
        return found
    meta_base = torch.empty(storage_numel, dtype=base.dtype, device="meta").as_strided(
        tuple(base.shape), base.stride(), base.storage_offset())
    rest = tuple(_to_meta(a) for a in args[1:])
    try:
        out = func(meta_base, *rest, **kwargs)
    except NotImplementedError as exc:
        raise MetaUnsupported(str(exc)) from None
    except RuntimeError as exc:
        if func is not _VIEW or "view size is not compatible" not in str(exc):
            raise
        # xla's values have no memory layout: its strides are PyTorch's where it matters for views, but an
        # elementwise op's output is contiguous where eager's TensorIterator keeps its inputs' permuted layout,
        # so `.view` of a transpose of it can fail here and not in eager (and a graph AOTAutograd traced with
        # eager's strides says `view`). The view is then taken of the value as laid out contiguously, as
        # PyTorch/XLA's views always are: the same elements, in the same order.
        out = func(torch.empty(tuple(base.shape), dtype=base.dtype, device="meta"), *rest, **kwargs)

    def describe(t):
        return (Meta(tuple(t.shape), t.dtype), t.stride(), t.storage_offset())

    result = [describe(t) for t in out] if isinstance(out, (list, tuple)) else describe(out)
    if full_key is not None:
        _view_cache[full_key] = result
    return result
