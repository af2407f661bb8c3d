"""The two aten ops of gradient scaling, recorded on the device instead of run on the CPU.

`torch.amp.GradScaler` calls `_amp_foreach_non_finite_check_and_unscale_` (unscale every gradient, note
whether any was inf or NaN) and `_amp_update_scale_` (grow or back off the scale). Without these handlers
both fell back to the CPU: every gradient copied to the host and back, every step. Here each becomes a few
lazy ops in the step's graph, with PyTorch/XLA's semantics (its `BuildAmpForeachNonFiniteCheckAndUnscale`
and `BuildAmpUpdateScale`): `found_inf` is 1.0 when it was nonzero or any gradient is not finite, the
gradients are multiplied by `inv_scale` in float32, and the scale update reads nothing back to the host.
"""

from __future__ import annotations

import torch

from xladev.runtime.record.decompositions import with_composites
from xladev.runtime.record.special_handlers import special

aten = torch.ops.aten


def _check_scalar(t, name: str, dtype=torch.float32, kind: str = "a float") -> None:
    # ATen's own checks (its CPU and CUDA kernels word them so).
    if t.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if t.dtype is not dtype:
        raise RuntimeError(f"{name} must be {kind} tensor.")


def check_and_unscale(grads, found_inf, inv_scale) -> tuple[list, torch.Tensor]:
    """The unscaled gradients and the new found_inf, as new device tensors (nothing written).

    Args:
      grads: floating-point device tensors.
      found_inf: one-element float32 tensor, nonzero if an earlier check found an inf or NaN.
      inv_scale: one-element float32 tensor, 1/scale.

    Returns:
      (each gradient times inv_scale, computed in float32 and kept in its dtype; 1.0 where found_inf was
      nonzero or any gradient holds an inf or NaN, else 0.0, shaped and typed as found_inf).

    Raises:
      RuntimeError: found_inf or inv_scale is not a one-element float32 tensor (ATen's wording).
    """
    _check_scalar(found_inf, "found_inf")
    _check_scalar(inv_scale, "inv_scale")
    found = found_inf != 0
    unscaled = []
    for g in grads:
        found = found | torch.logical_not(torch.isfinite(g).all())
        unscaled.append((g.float() * inv_scale).to(g.dtype))
    return unscaled, found.to(found_inf.dtype)


def update_scale(scale, growth_tracker, found_inf, growth_factor: float, backoff_factor: float,
                 growth_interval: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The new scale and growth tracker, as new device tensors (nothing written).

    Args:
      scale: one-element float32 tensor, the current scale.
      growth_tracker: one-element int32 tensor, the steps since the last inf or growth.
      found_inf: one-element float32 tensor, nonzero if this step found an inf or NaN.
      growth_factor, backoff_factor, growth_interval: as `torch.amp.GradScaler`'s.

    Returns:
      (scale × backoff_factor after an inf; scale × growth_factor when the tracker reaches growth_interval
      and the product is finite; else scale — and the tracker: 0 after an inf or a growth, else one more).

    Raises:
      RuntimeError: scale or found_inf is not a one-element float32 tensor, or growth_tracker not a one-element
        int32 tensor (ATen's wording).
    """
    _check_scalar(scale, "current_scale")
    _check_scalar(found_inf, "found_inf")
    _check_scalar(growth_tracker, "growth_tracker", torch.int32, "an int")
    found = found_inf != 0
    successful = growth_tracker + 1
    grow = successful == growth_interval
    grown = scale * growth_factor
    kept_or_grown = torch.where(grow & torch.isfinite(grown), grown, scale)
    new_scale = torch.where(found, scale * backoff_factor, kept_or_grown)
    new_tracker = torch.where(found | grow, torch.zeros_like(successful), successful)
    return new_scale, new_tracker


@special(aten._amp_foreach_non_finite_check_and_unscale_.default)
@with_composites  # below autograd, `.to` and `isfinite` would reach the device whole
def _check_and_unscale_in_place(func, args, kwargs):
    grads, found_inf, inv_scale = _bind(func, args, kwargs)
    unscaled, found = check_and_unscale(grads, found_inf, inv_scale)
    for g, new in zip(grads, unscaled):
        g.copy_(new)
    found_inf.copy_(found)


@special(aten._amp_foreach_non_finite_check_and_unscale.default)
@with_composites
def _check_and_unscale_functional(func, args, kwargs):
    return check_and_unscale(*_bind(func, args, kwargs))


@special(aten._amp_update_scale_.default)
@with_composites
def _update_scale_in_place(func, args, kwargs):
    scale, tracker, *rest = _bind(func, args, kwargs)
    new_scale, new_tracker = update_scale(scale, tracker, *rest)
    scale.copy_(new_scale)
    tracker.copy_(new_tracker)
    return scale


@special(aten._amp_update_scale.default)
@with_composites
def _update_scale_functional(func, args, kwargs):
    return update_scale(*_bind(func, args, kwargs))


def _bind(func, args, kwargs) -> list:
    names = [a.name for a in func._schema.arguments]
    values = dict(zip(names, args))
    values.update(kwargs)
    return [values[n] for n in names]
