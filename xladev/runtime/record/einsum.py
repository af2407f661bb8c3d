"""`torch.einsum` on xla tensors as one contraction, as PyTorch/XLA lowers it.

PyTorch decomposes `einsum` before any backend sees it (permutes, reshapes and a `bmm`); XLA's `dot_general`
contracts any dimensions directly, so the decomposition only adds reshapes and transposes to the graph (and to its
HLO, which PyTorch/XLA's users read). A kernel at the AutogradPrivateUse1 key runs `jnp.einsum` on the operands
as one node of the graph (`call_jax`, differentiable through jax's vjp), at the precision of xladev's other matmuls.
What it does not take (the sublist form, operands that are not all xla tensors of one floating dtype, an equation
jax refuses) goes to PyTorch's decomposition, as before.
"""

from __future__ import annotations

import functools

import torch

from xladev.runtime.record.jax_call import CallJaxError, call_jax
from xladev.runtime.record.tensor import XlaTensor

aten = torch.ops.aten
_FLOATING = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16))


@functools.lru_cache(maxsize=256)
def _contraction(equation: str):
    """The jax function of one equation (cached, so its traces are reused step after step)."""
    import jax.numpy as jnp
    from jax import lax

    def einsum(*operands):
        return jnp.einsum(equation, *operands, precision=lax.Precision.HIGHEST)

    einsum.__name__ = "einsum"
    return einsum


def _einsum_autograd(equation, tensors, *, path=None):
    operands = list(tensors)
    if (isinstance(equation, str) and operands and all(isinstance(t, XlaTensor) for t in operands)
            and len({t.dtype for t in operands}) == 1 and operands[0].dtype in _FLOATING
            and len({t.device for t in operands}) == 1):
        try:
            return call_jax(_contraction(equation.replace(" ", "")), tuple(operands), name="einsum")
        except CallJaxError:
            pass  # an equation jax reads otherwise than torch: torch's own decomposition says what is wrong
    return aten.einsum.default.decompose(equation, tensors, path=path)


# Kept alive for the life of the process: dropping the library would drop the registration.
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("einsum", _einsum_autograd, "AutogradPrivateUse1")
