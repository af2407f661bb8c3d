"""How far `xla` may be from eager CPU, derived from float32 rounding and the optimizer's step size.

Nothing here is tuned to one machine's results: two float32 backends (XLA's kernels and ATen's, on any
x86-64 CPU and BLAS) sum in different orders, so every bound starts from the unit roundoff.

Losses and gradients
  A value computed through a network is a sum of products; summing n terms in another order changes the
  result by at most about n·u times the sum of the terms' magnitudes (u = 2^-24). Gradients are compared
  against the model's own gradient scale G (the largest gradient magnitude over all parameters), never
  their own: a true zero (an attention key bias) carries rounding noise of that scale. We allow
  GRAD_REL = 2^10·u ≈ 6e-5 of G: the worst case n·u for the thousand-term reductions of these models
  (rounding errors of a longer sum mostly cancel, growing like √n·u).

Parameters after training with Adam(W)
  Each step moves a weight by lr·m̂/(√v̂+ε). A gradient error δ (at most GRAD_REL·G) changes that
  update by at most about 2δ/(√v̂+ε) (through m̂ and v̂ both), and never by more than 2 (the update's
  magnitude is at most 1 either way). So after T steps
      |θ_xla − θ_cpu| ≤ T·lr·min(2, 2·GRAD_REL·G/(√v̂+ε)) + T·PARAM_REL·|θ|
  where √v̂ is read from the CPU optimizer's state (its running RMS of that weight's gradient). A weight
  whose gradient is as small as rounding noise may flip sign every step and end up 2·T·lr away, as it
  would between any two float32 backends; a weight with a healthy gradient must match closely.
  PARAM_REL = 8u covers the rounding of the update itself (a few float32 operations per step).
"""

from __future__ import annotations

import math

import torch

from tests.models.tolerances import U as U32
from tests.models.tolerances import adam_reach_terms

GRAD_REL = 2.0 ** 10 * U32
PARAM_REL = 8 * U32


def loss_rtol(terms: int = 4096) -> float:
    """Relative tolerance for a loss: a mean of `terms` float32 values each carrying rounding from the network."""
    return max(terms * U32, GRAD_REL)


def gradient_scale(grads: dict[str, torch.Tensor]) -> float:
    """The model's gradient scale G: the largest gradient magnitude over all parameters."""
    return max((float(g.abs().max()) for g in grads.values() if g is not None and g.numel()), default=0.0)


def assert_gradients_close(xla: dict[str, torch.Tensor], cpu: dict[str, torch.Tensor], rel: float = GRAD_REL) -> None:
    """Each gradient within `rel` of the model's gradient scale (both dicts: name -> CPU tensor)."""
    assert xla.keys() == cpu.keys()
    scale = gradient_scale(cpu)
    for name, want in cpu.items():
        have = xla[name]
        if want is None:
            assert have is None, f"{name}: xla has a gradient where eager has none"
            continue
        torch.testing.assert_close(have.double(), want.double(), rtol=0, atol=rel * scale,
                                   msg=lambda m, n=name: f"{n}: gradient off by more than {rel:.1e} of the model's "
                                                         f"gradient scale {scale:.3g}\n{m}")


def adam_bound(param: torch.Tensor, exp_avg_sq: torch.Tensor, *, lr: float, steps: int, betas: tuple, eps: float,
               grad_scale: float) -> torch.Tensor:
    """Per-element bound on |θ_xla − θ_cpu| after `steps` Adam(W) steps (see the module docstring)."""
    v_hat = exp_avg_sq.double() / (1.0 - betas[1] ** steps)
    sensitivity = (2.0 * GRAD_REL * grad_scale) / (v_hat.sqrt() + eps)
    reach = 2.0 * sum(adam_reach_terms(steps, tuple(betas)))
    drift = lr * torch.clamp(steps * sensitivity, max=reach)
    return drift + steps * PARAM_REL * param.double().abs()


def adam_gradient_scale(optimizer: torch.optim.Optimizer, steps: int) -> float:
    """The model's gradient scale after `steps` Adam(W) steps: the largest running RMS of a weight's gradient
    (`exp_avg_sq`, bias-corrected) in the CPU run's optimizer."""
    v_correction = 1.0 - optimizer.param_groups[0]["betas"][1] ** steps
    return max(math.sqrt(float(s["exp_avg_sq"].max()) / v_correction) for s in optimizer.state.values())


def assert_adam_params_close(xla: dict[str, torch.Tensor], cpu: dict[str, torch.Tensor],
                             optimizer: torch.optim.Optimizer, names: dict[int, str], steps: int) -> None:
    """Checks trained weights against the bound, using the CPU Adam(W) optimizer's state.

    Args:
      xla, cpu: parameter name -> CPU tensor after training.
      optimizer: the CPU run's Adam or AdamW (its `exp_avg_sq` per parameter).
      names: id(parameter) -> name, for the optimizer's parameters.
      steps: optimizer steps taken.
    """
    group = optimizer.param_groups[0]
    lr, betas, eps = group["lr"], group["betas"], group["eps"]
    states = {names[id(p)]: optimizer.state[p] for p in optimizer.state}
    scale = adam_gradient_scale(optimizer, steps)
    for name, want in cpu.items():
        have = xla[name]
        if name not in states:  # buffers, frozen weights: only rounding
            torch.testing.assert_close(have, want, rtol=steps * PARAM_REL * 16, atol=0, msg=name)
            continue
        bound = adam_bound(want, states[name]["exp_avg_sq"], lr=lr, steps=steps, betas=betas, eps=eps,
                           grad_scale=scale)
        excess = (have.double() - want.double()).abs() - bound
        worst = int(excess.argmax())
        assert float(excess.max()) <= 0, (
            f"{name}: element {worst} is {float((have.double() - want.double()).abs().flatten()[worst]):.3g} off, "
            f"beyond the bound {float(bound.flatten()[worst]):.3g} that float32 rounding and "
            f"{steps} Adam steps of lr={lr} allow")


def assert_sgd_params_close(xla: dict[str, torch.Tensor], cpu: dict[str, torch.Tensor],
                            optimizer: torch.optim.Optimizer, grad_scale: float, steps: int) -> None:
    """Checks weights trained by SGD (with momentum μ) on `xla` against eager CPU.

    Each step's gradient error (at most GRAD_REL·G) moves a weight by at most lr·GRAD_REL·G/(1−μ) once
    momentum has accumulated it; a stable run (lr below 2/λ_max) does not amplify a weight difference,
    so T steps allow twice T times that, plus the rounding of the updates themselves.
    """
    group = optimizer.param_groups[0]
    lr, momentum = group["lr"], group.get("momentum", 0.0)
    drift = 2 * steps * lr * GRAD_REL * grad_scale / (1.0 - momentum)
    for name, want in cpu.items():
        have = xla[name]
        if not want.is_floating_point():
            torch.testing.assert_close(have, want, rtol=0, atol=0, msg=name)
            continue
        torch.testing.assert_close(have, want, rtol=steps * PARAM_REL, atol=drift, msg=name)
