"""Complex numbers: building, viewing and conjugating them.

How PyTorch's complex views map onto the device:

* `view_as_real` / `view_as_complex` are views that change the dtype: a complex tensor seen as its
  (real, imag) pairs in a trailing dim of 2, and back. On the device they are ordinary steps of a view
  chain (see runtime/lowering/views.py): reading one stacks or pairs the components of the base's current value,
  and writing through one maps the new value back with the inverse function, so
  `torch.view_as_real(z)[..., 0] = 1` changes `z`, as in eager PyTorch.
* `_conj` is, in eager PyTorch, a lazy view that only sets the conjugate bit. Device tensors never
  carry that bit: the `_conj` view's value is the conjugated value itself (a `jnp.conj` step in the
  chain), and a write through it stores the conjugate of what is written. Values, aliasing and
  gradients are those of eager PyTorch; the one visible difference is that `z.conj().is_conj()` is
  False on the device (so `resolve_conj` has nothing left to do, and `view_as_real(z.conj())`, which
  eager PyTorch refuses for an unresolved conjugate, returns the conjugate's components).
* `_neg_view` (the negative bit, set by `z.conj().imag` in eager PyTorch) is treated the same way.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.lowering.views import invertible_view

aten = torch.ops.aten


def _complex_dtype_of(real_dtype):
    return jnp.result_type(real_dtype, jnp.complex64)


def _real_dtype_of(complex_dtype):
    return jnp.finfo(complex_dtype).dtype


# ---- dtype-changing views -------------------------------------------------------------------------
@lowers(aten.view_as_real.default)
def _view_as_real(ctx, z):
    z = z.astype(_complex_dtype_of(ctx.out_dtype))
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1)


def _from_pairs(ctx, pairs):
    """The complex base value whose `view_as_real` is `pairs` (writing through the real view)."""
    return lax.complex(pairs[..., 0], pairs[..., 1]).astype(ctx.out_dtype)


@lowers(aten.view_as_complex.default)
def _view_as_complex(ctx, pairs):
    pairs = pairs.astype(_real_dtype_of(ctx.out_dtype))
    return lax.complex(pairs[..., 0], pairs[..., 1])


def _to_pairs(ctx, z):
    """The real base value whose `view_as_complex` is `z` (writing through the complex view)."""
    return jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1).astype(ctx.out_dtype)


# ---- conjugate and negative views, and their physical forms -------------------------------------------
@lowers(aten._conj.default, aten._conj_physical.default, aten._conj_copy.default)
def _conj(ctx, z):
    return jnp.conj(z)


def _conj_back(ctx, value):
    return jnp.conj(value).astype(ctx.out_dtype)


@lowers(aten._neg_view.default, aten._neg_view_copy.default)
def _neg_view(ctx, x):
    return jnp.negative(x)


def _neg_back(ctx, value):
    return jnp.negative(value).astype(ctx.out_dtype)


invertible_view("aten::view_as_real", _from_pairs)
invertible_view("aten::view_as_complex", _to_pairs)
invertible_view("aten::_conj", _conj_back)
invertible_view("aten::_neg_view", _neg_back)


# ---- building complex numbers ---------------------------------------------------------------------------
def _real_operands(ctx, *values) -> tuple:
    """The operands in the real dtype of the complex output, broadcast to its shape (lax.complex does
    not broadcast)."""
    real_dtype = _real_dtype_of(ctx.out_dtype)
    return tuple(jnp.broadcast_to(v.astype(real_dtype), ctx.out_shape) for v in values)


@lowers(aten.complex.default)
def _complex(ctx, real, imag):
    real, imag = _real_operands(ctx, real, imag)
    return lax.complex(real, imag)


@lowers(aten.polar.default)
def _polar(ctx, magnitude, angle):
    """abs·(cos θ + i sin θ), with the product taken in the real dtype as eager PyTorch does."""
    magnitude, angle = _real_operands(ctx, magnitude, angle)
    return lax.complex(magnitude * jnp.cos(angle), magnitude * jnp.sin(angle))
