"""PyTorch's own decompositions, used for ops without a lowering so the lowered op set stays small.

Two sources, in order:
  1. an explicit table: `core_aten_decompositions()` plus a few more from `torch._decomp`;
  2. any op with a CompositeImplicitAutograd kernel (`movedim`, `flatten`, `to.dtype`, `real`...).
     Such ops normally decompose above the device, but one called from inside another decomposition
     (which runs below autograd) reaches the device whole; its own composite kernel decomposes it.
"""

from __future__ import annotations

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

from xladev.runtime.lowering.registry import LOWERINGS, PYTORCH_DECOMPOSED
from xladev.runtime.record.special_handlers import SPECIAL_HANDLERS

aten = torch.ops.aten

# The ops decomposed by PyTorch's table rather than a composite kernel (beyond core_aten_decompositions).
_EXPLICIT = [
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten.native_dropout_backward,
    aten.logit_backward,
    aten.hardswish, aten.hardswish_backward, aten.hardsigmoid, aten.hardsigmoid_backward,
    aten.elu_backward, aten.softplus_backward, aten.hardtanh_backward, aten.glu, aten.glu_backward,
    aten.binary_cross_entropy, aten.binary_cross_entropy_backward, aten.huber_loss, aten.huber_loss_backward,
    aten.smooth_l1_loss, aten.smooth_l1_loss_backward, aten.soft_margin_loss, aten.soft_margin_loss_backward,
    aten.nll_loss2d_backward, aten.upsample_nearest2d, aten.upsample_bilinear2d,
    aten.im2col, aten.col2im, aten.reflection_pad1d, aten.reflection_pad2d, aten.replication_pad1d,
    aten.replication_pad2d, aten.linalg_vector_norm, aten.norm,
    # Composites of lowered ops: fewer lowerings, same numbers.
    aten.native_group_norm, aten.native_group_norm_backward, aten._native_batch_norm_legit,
    aten._batch_norm_with_update, aten.batch_norm_backward, aten.adaptive_max_pool2d,
    # The functional batch norm AOTAutograd puts in torch.compile graphs (running statistics as outputs).
    aten._native_batch_norm_legit_functional,
    aten.grid_sampler_2d, aten.upsample_bicubic2d, aten.upsample_trilinear3d, aten.upsample_nearest1d,
    aten.upsample_nearest3d, aten.upsample_linear1d, aten._upsample_nearest_exact1d,
    aten._upsample_nearest_exact2d, aten._upsample_nearest_exact3d,
    aten.special_i1, aten.special_i0e, aten.special_i1e, aten.special_erfcx, aten.special_ndtri,
    aten.special_log_ndtr, aten.special_xlog1py, aten.special_entr, aten.igamma, aten.igammac,
    aten.ldexp,
    aten.narrow_copy, aten.unbind_copy, aten.as_strided_scatter, aten.logspace, aten.take,
    aten.native_dropout_backward, aten.multi_margin_loss, aten.embedding_bag,
]

# Decompositions that are worse than the CPU fallback or than the op's own lowering path:
# data-dependent outputs must fall back (their meta kernel refuses them anyway).
_EXCLUDED: set = set()


def composite_implicit(op):
    """`op.decompose` when `op` has a CompositeImplicitAutograd kernel, else None."""
    if not isinstance(op, torch._ops.OpOverload):
        return None
    try:
        has = torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), torch._C.DispatchKey.CompositeImplicitAutograd)
    except RuntimeError:
        return None
    return op.decompose if has else None


class _Composites(torch.utils._python_dispatch.TorchDispatchMode):
    """Active while a decomposition runs: decomposes the composite-implicit ops it calls.

    Below autograd, `x.to(dtype)`, `movedim`, `flatten`, `real`... are not decomposed by PyTorch and
    would reach the device whole (the view-like ones then fall back to the CPU). Everything else
    passes through to the device unchanged.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in LOWERINGS and _is_composite(func):
            with self:  # the composite's own inner ops decompose too (`type_as` calls `to`)
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


_composite_cache: dict = {}


def _is_composite(func) -> bool:
    found = _composite_cache.get(func)
    if found is None:
        found = _composite_cache[func] = composite_implicit(func) is not None and not _is_special(func)
    return found


def _is_special(func) -> bool:
    return func in SPECIAL_HANDLERS


def with_composites(fn):
    """`fn` run with `_Composites` active (a decomposition's inner ops decompose fully).

    A decomposition may decline some arguments: it returns NotImplemented, and the caller runs the op
    another way (on the CPU).
    """

    def run(*args, **kwargs):
        with _Composites():
            return fn(*args, **kwargs)

    run.__wrapped__ = fn
    return run


class _Decompositions(dict):
    """The explicit table, completed lazily by composite-implicit kernels. Lowered ops never decompose.

    Filled on first use, when every lowering module (and `decompose_with_pytorch`) has registered.
    """

    def __init__(self) -> None:
        super().__init__()
        self._filled = False

    def _fill(self) -> None:
        table = dict(core_aten_decompositions())
        table.update(get_decompositions(_EXPLICIT + PYTORCH_DECOMPOSED))
        # Lowered ops keep their lowering; decompositions only fill gaps.
        self.update({op: with_composites(fn) for op, fn in table.items()
                     if op not in LOWERINGS and op not in _EXCLUDED})
        self._filled = True

    def get(self, op, default=None):
        if not self._filled:
            self._fill()
        try:
            return self[op]
        except KeyError:
            pass
        except TypeError:  # unhashable: not an op
            return default
        fn = None if op in LOWERINGS or op in _EXCLUDED else composite_implicit(op)
        if fn is None:
            return default
        self[op] = fn
        return fn

    def __contains__(self, op) -> bool:
        return self.get(op) is not None


DECOMPOSITIONS = _Decompositions()
