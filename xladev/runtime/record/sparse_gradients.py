"""The gradients eager PyTorch makes sparse (`embedding`, `embedding_bag` with `sparse=True`), made dense.

XLA has no sparse tensors, so neither does the device. PyTorch/XLA answers `embedding_bag(...,
sparse=True)` with the dense gradient and a warning; xladev does the same, and does it for `embedding`
too (where PyTorch/XLA fails). The weight's `.grad` is then a dense tensor equal to eager's
`grad.to_dense()`, which every optimizer for dense gradients (SGD, Adam) takes. It is the gradient of
the same call with `sparse=False` for every argument, so `scale_grad_by_freq=True`, which eager refuses
with a sparse gradient, gets its dense gradient here, as in PyTorch/XLA.

Before, the sparse gradient was made on the CPU and could not be uploaded. Nothing may raise in a
backward op on the device: torch's Python device guard for PrivateUse1 (torch 2.13, torch/csrc/acc)
meets the Python error still set while the engine's device thread unwinds, and the process gets
`SystemError: ... returned NULL without setting an exception` or dies (`Fatal Python error:
Aborted`). So the warning is given in the forward op, on the user's thread at the user's line (an
error there under `-W error` is an ordinary exception), never in the backward op.

Two routes, because the two ops reach the device differently:
  * `_embedding_bag_backward` arrives whole at `__torch_dispatch__`: a special handler runs it with
    `sparse=False` (its lowering then computes the dense gradient).
  * `embedding_backward` is CompositeImplicitAutograd, so it would decompose into the sparse one above
    the device; `register` gives it a kernel at the AutogradPrivateUse1 key instead, which calls
    `embedding_dense_backward` (itself differentiable, so double backward still works).
"""

from __future__ import annotations

import torch

from xladev.runtime.graph import stack
from xladev.runtime.record.arguments import argument
from xladev.runtime.record.dispatch import handle_regular
from xladev.runtime.record.special_handlers import special

aten = torch.ops.aten

# PyTorch/XLA's words for embedding_bag (aten_xla_type.cpp, _embedding_bag_backward), so that a search
# for them finds both; the same for embedding.
_WARNINGS = {
    aten._embedding_bag.default: "XLA does not support EmbeddingBag sparse backward function. "
                                 "Falling back to the dense function.",
    aten.embedding.default: "XLA does not support Embedding sparse backward function. "
                            "Falling back to the dense function.",
}
_SPARSE_AT = {op: [a.name for a in op._schema.arguments].index("sparse")
              for op in (*_WARNINGS, aten._embedding_bag_backward.default)}


def _sparse(func, args, kwargs) -> bool:
    return bool(argument(args, kwargs, _SPARSE_AT[func], "sparse", False))


@special(*_WARNINGS)
def _warn_if_sparse(func, args, kwargs):
    """The forward op, recorded as usual; with `sparse=True` and a weight that wants a gradient, it first
    warns that the gradient will be dense."""
    if _sparse(func, args, kwargs) and args[0].requires_grad:
        stack.warn_at_user(_WARNINGS[func])
    return handle_regular(func, args, kwargs)


@special(aten._embedding_bag_backward.default)
def _embedding_bag_backward(func, args, kwargs):
    """`_embedding_bag_backward` with `sparse=False`, as PyTorch/XLA runs it."""
    if _sparse(func, args, kwargs):
        if "sparse" in kwargs:
            kwargs = {**kwargs, "sparse": False}
        else:
            at = _SPARSE_AT[func]
            args = (*args[:at], False, *args[at + 1:])
    return handle_regular(func, args, kwargs)


def embedding_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq, sparse):
    """The AutogradPrivateUse1 kernel of `aten::embedding_backward`: the dense gradient of the weight.

    Args:
      grad: the gradient of `embedding`'s output.
      indices: the looked-up rows.
      num_weights: the weight's row count.
      padding_idx: the row that gets no gradient (negative: none).
      scale_grad_by_freq: divide each row's gradient by its count in `indices`.
      sparse: what the forward asked for; the gradient is dense either way.

    Returns:
      The [num_weights, embedding_dim] gradient, eager's `embedding_backward(...).to_dense()`.
    """
    return aten.embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq)


def register(lib: torch.library.Library) -> None:
    """Gives `embedding_backward` its dense kernel for device tensors in `lib` (an `aten` IMPL library)."""
    lib.impl("embedding_backward", embedding_backward, "AutogradPrivateUse1")
