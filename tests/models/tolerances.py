"""Tolerances of the model zoo, derived from float32 rounding and the optimizer's step, never measured.

Notation: u = 2⁻²⁴ (float32 unit roundoff). A training step is a chain of layers; layer l sums n_l
terms per output in the forward pass (a Linear's fan-in, a convolution's C_in/groups·k·k, a norm's
normalised elements, an attention's head size plus key length, a recurrence's (input + hidden)·length)
and m_l terms in the backward pass (its fan-out for the input gradient, plus the positions a weight
gradient sums over). `profile` measures n_l and m_l with forward hooks on one CPU forward, so the
bounds follow a case's configuration instead of being tuned to it.

1. Forward. A float32 sum of n terms, in any order (blocked, pairwise, fused multiply-add, any SIMD
   width: whatever the BLAS or XLA's code generator picks on a given x86-64 CPU), is within
   γ_n = n·u/(1 − n·u) ≈ n·u of the exact sum, relative to the sum of the terms' magnitudes (Higham,
   *Accuracy and Stability of Numerical Algorithms*, §3.1). To first order the errors of successive
   layers add, each magnified by the condition of what follows; with κ = 4 for the normalised,
   O(1)-logit layers of a model at random initialisation, one float32 implementation's loss obeys
       |L32 − L| ≤ ε_fwd·|L|,        ε_fwd = κ·u·(Σ_l n_l + n_loss),
   n_loss = the elements of the model's largest output (a loss reduces at most all of them).
2. Backward. A gradient combines the forward activations with the backward chain's sums:
       |g32 − g| ≤ ε_bwd·S,          ε_bwd = κ·u·(Σ_l n_l + Σ_l m_l + 2·n_loss),
   relative to the step's gradient scale S = max|g| over the whole model, because the rounding of a
   gradient element is bounded by the magnitudes of its terms, not by its value (the attention key
   bias's gradient cancels to ~0, its rounding does not).
3. The float64 oracle. κ is an assumption; where a step is ill-conditioned (BatchNorm over 16
   values, a deep CNN after some AdamW steps) float32 eager is itself far from the truth. So every
   check compares with a float64 run of the same steps and lets xla be ORACLE = 4 times as far from it
   as float32 eager is, with the derived bound as the floor:
       |X − X64| ≤ 4·|X32 − X64| + bound.
   For a well-conditioned step eager's own error is negligible and this is the derived bound; for an
   ill-conditioned one it says xla is no worse than eager PyTorch.
4. The optimizer. A gradient element is known within b = 4·|g32 − g64| + ε_bwd·S (rules 2 and 3).
   AdamW moves an element by lr·m̂_t/(√v̂_t + eps); by Cauchy–Schwarz |m̂_t/√v̂_t| ≤ c_t =
   √(Σ_i a_i²/b_i), with a_i and b_i the bias-corrected weights of g_i in m̂_t and v̂_t (c_1 = 1,
   c_5 = 1.011). So however the gradients differ, two runs end at most 2·lr·Σ_t c_t apart per element
   (the reach: an element whose gradient is rounding noise may step either way each step).
   - After the first step (m̂ = g, √v̂ = |g|) an element with |g| > b keeps its sign, so θ1 differs
     by lr·eps·b/(|g| − b + eps)² only; one with |g| ≤ b may differ by 2·lr.
   - Over t steps a relative gradient perturbation r_s = b_s/|g_s| changes m̂ and √v̂ by at most r_s
     each, so the update by at most 2·c_s·r_s, capped by the reach:
         drift ≤ lr·Σ_s 2·c_s·min(1, 2·b_s/|g_s|)
     per element; its RMS over a tensor bounds the tensor's RMS drift.
   - One step from a common state (the same weights, moments and step count on every side: the check
     resumes eager from xla's mid-training state) is bounded exactly: with the new moments m̂, v̂ and
     s = √v̂, a gradient error b changes m̂ by Δm = (1 − β1)·b/(1 − β1^t) and v̂ by
     Δv = (1 − β2)·(2·|g|·b + b²)/(1 − β2^t), so s by Δs ≤ s − √(max(v̂ − Δv, 0)), and the update
     m̂/(s + eps) by at most (Δm·(s + eps) + |m̂|·Δs)/((s − Δs + eps)·(s + eps)), capped by 2·c_t.
   - SGD with momentum μ moves by lr·Σ_{s≤t} μ^(t−s)·g_s: its drift is lr·Σ_t Σ_{s≤t} μ^(t−s)·b_s,
     and one step's is lr·b.
5. BatchNorm's running statistics are blends (1 − m)·r + m·(batch statistic). A batch mean is rounded
   relative to the magnitude of the activations it averages, √(var + mean²), not to its own value
   (~0 after a normalised layer), and a batch variance relative to var + mean²; so one step changes
   them by at most ε_fwd·((1 − m)·|r| + m·scale), the floor of their oracle comparison. Across several
   steps they follow the weights' drift, which has no bound of this kind: they are compared after the
   first step and after the resumed step, and num_batches_tracked exactly.
6. An update rounds too. AdamW's step passes through at most 16 roundings (the constants 1 − β,
   lr/(1 − β1^t) and √(1 − β2^t), the moment updates, the square, the square root, the sums and the
   division), each relative to the step (≤ c_t·lr), and the weight through 4 (the decay factor, the
   product, the subtraction and its result), each relative to |θ|: after t steps rounding alone accounts
   for u·t·(16·lr + 4·|θ|) (for SGD, lr·|buffer| in place of lr), in the floor of every weight comparison.

Left out, as second order: an element that steps the other way has |g| ≤ b, so it changes the loss by
at most 2·b·lr, and the other gradients by a product of two small quantities; the losses of later
steps are compared with rule 1's bound.

For scale: GPT-2's step sums Σ n_l = 898 terms forward and Σ m_l = 1712 backward, and its output has
2048 elements, so ε_fwd = 7.0e-4 and ε_bwd = 1.6e-3; the first update's rounding is a few 1e-10.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn

U = 2.0 ** -24
KAPPA = 4.0
ORACLE = 4.0


@dataclasses.dataclass
class Profile:
    """Sums of reduction lengths over a step, as measured by `profile`.

    Attributes:
      forward: Σ_l n_l.
      backward: Σ_l m_l.
      loss: n_loss, the number of elements of the model's largest output.
      layers: how many layer calls were counted.
    """

    forward: int = 0
    backward: int = 0
    loss: int = 0
    layers: int = 0

    @property
    def eps_forward(self) -> float:
        return KAPPA * U * (self.forward + self.loss)

    @property
    def eps_backward(self) -> float:
        return KAPPA * U * (self.forward + self.backward + 2 * self.loss)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, nn.utils.rnn.PackedSequence):
        return [value.data]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _is_attention(module: nn.Module) -> bool:
    return isinstance(module, nn.MultiheadAttention) or type(module).__name__.endswith(("Attention", "SelfAttention"))


def layer_reductions(module: nn.Module, args: tuple, kwargs: dict, output) -> tuple[int, int] | None:
    """(n_l, m_l) of one call of `module`, or None for a layer that sums nothing.

    Args:
      module: a leaf module, or an attention module (its matmuls are not modules).
      args, kwargs: the call's inputs.
      output: the call's output.
    """
    inputs = _tensors(args) + _tensors(kwargs)
    if not inputs:
        return None
    x = inputs[0]
    if _is_attention(module):
        # Q·Kᵀ sums over the head size (≤ the embedding width), softmax·V over the key length.
        width = max((t.shape[-1] for t in inputs if t.dim() >= 3), default=x.shape[-1])
        keys = max((t.shape[-2] for t in inputs if t.dim() >= 3), default=1)
        n = width + keys
        if isinstance(module, nn.MultiheadAttention):  # its projections are not modules of their own
            n += max(module.embed_dim, module.kdim, module.vdim) + module.embed_dim
        return n, 2 * n + x.numel() // x.shape[-1]
    if isinstance(module, nn.Linear):
        positions = x.numel() // module.in_features
        return module.in_features, module.out_features + positions
    if isinstance(module, nn.modules.conv._ConvNd):
        window = math.prod(module.kernel_size)
        out = _tensors(output)[0]
        positions = out.numel() // module.out_channels
        fan_out = module.out_channels // module.groups * window
        return module.in_channels // module.groups * window, fan_out + positions
    if type(module).__name__ == "Conv1D" and hasattr(module, "nf"):  # transformers' transposed Linear
        fan_in = module.weight.shape[0]
        positions = x.numel() // fan_in
        return fan_in, module.nf + positions
    if isinstance(module, nn.Embedding):
        return 1, x.numel()  # a gather forward; the weight gradient adds up every position
    if isinstance(module, nn.RNNBase):
        packed = isinstance(args[0], nn.utils.rnn.PackedSequence)
        length = len(args[0].batch_sizes) if packed else (x.shape[1] if module.batch_first else x.shape[0])
        positions = x.shape[0] if packed else x.shape[0] * x.shape[1]
        directions = 2 if module.bidirectional else 1
        widths = [module.input_size] + [directions * module.hidden_size] * (module.num_layers - 1)
        chain = sum(length * (width + module.hidden_size) for width in widths)
        return chain, chain + positions
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        per_channel = x.numel() // x.shape[1]
        return 2 * per_channel, 2 * per_channel
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 1:  # LayerNorm, RMSNorm and their kin
        width = weight.numel()
        return 2 * width, 2 * width + x.numel() // width
    if isinstance(module, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AvgPool1d, nn.AvgPool2d)):
        out = _tensors(output)[0]
        return max(1, x.numel() // out.numel()), 0
    return None


def profile(model: nn.Module, run_forward) -> Profile:
    """Measures a step's reduction lengths with hooks on one forward of `model`.

    Args:
      model: the float32 CPU model (it is not changed).
      run_forward: called with no arguments; runs one forward of the model and the loss.

    Returns:
      The Profile of that forward; the loss term is the largest output of the model, since a loss
      reduces at most every element of it.
    """
    prof = Profile()

    def layer(module, args, kwargs, output):
        found = layer_reductions(module, args, kwargs, output)
        if found is not None:
            prof.forward += found[0]
            prof.backward += found[1]
            prof.layers += 1

    def top(module, args, kwargs, output):
        prof.loss = max([prof.loss] + [t.numel() for t in _tensors(output)])

    handles = [mod.register_forward_hook(layer, with_kwargs=True) for mod in model.modules()
               if not any(True for _ in mod.children()) or _is_attention(mod)]
    handles.append(model.register_forward_hook(top, with_kwargs=True))
    try:
        with torch.no_grad():
            run_forward()
    finally:
        for h in handles:
            h.remove()
    return prof


def adam_reach_terms(steps: int, betas=(0.9, 0.999)) -> list[float]:
    """c_t for t = 1..steps: the largest |m̂_t/√v̂_t| any gradient sequence can give (Cauchy–Schwarz)."""
    b1, b2 = betas
    out = []
    for t in range(1, steps + 1):
        a = [(1 - b1) * b1 ** (t - i) / (1 - b1 ** t) for i in range(1, t + 1)]
        b = [(1 - b2) * b2 ** (t - i) / (1 - b2 ** t) for i in range(1, t + 1)]
        out.append(math.sqrt(sum(x * x / y for x, y in zip(a, b))))
    return out


def update_rounding(theta, step, steps: int):
    """Rule 6: what rounding alone may change a weight by over `steps` updates of size ≤ `step`.

    Args:
      theta: the weight (a float or a tensor).
      step: the size of one update: lr for AdamW, lr·|momentum buffer| for SGD (float or tensor).
      steps: how many updates.
    """
    return U * steps * (16 * step + 4 * abs(theta))


def rms(t: torch.Tensor) -> float:
    return t.double().square().mean().sqrt().item() if t.numel() else 0.0


def maxabs(t: torch.Tensor) -> float:
    return t.double().abs().max().item() if t.numel() else 0.0


def first_step_allowance(optimizer: str, settings: dict, theta: torch.Tensor, g: torch.Tensor,
                         b: torch.Tensor) -> torch.Tensor:
    """Rule 4 at the first update: what each element of θ1 may differ by, given its gradient bound b.

    Args:
      optimizer: "adamw" or "sgd".
      settings: the optimizer's settings (lr, eps, momentum...).
      theta: the float64 weights after the step.
      g: the float64 gradient.
      b: the elementwise bound on the gradient's error.
    """
    lr = settings["lr"]
    if optimizer == "sgd":  # the momentum buffer starts as the gradient
        return lr * b + update_rounding(theta, lr * g.abs(), 1)
    eps, g = settings["eps"], g.abs()
    keeps_sign = lr * eps * b / (g - b + eps).clamp_min(eps).square()
    return torch.where(g > b, keeps_sign, torch.full_like(g, 2 * lr)) + update_rounding(theta, lr, 1)


def resumed_step_allowance(optimizer: str, settings: dict, theta: torch.Tensor, g: torch.Tensor,
                           b: torch.Tensor, moments: dict) -> torch.Tensor:
    """Rule 4 for one step from a common state: what each element of the new θ may differ by.

    Args:
      optimizer: "adamw" or "sgd".
      settings: the optimizer's settings.
      theta: the float64 weights after the step.
      g: the float64 gradient of the step.
      b: the elementwise bound on the gradient's error.
      moments: the float64 optimizer state after the step (exp_avg, exp_avg_sq and step, or momentum_buffer).
    """
    lr = settings["lr"]
    if optimizer == "sgd":
        return lr * b + update_rounding(theta, lr * moments["momentum_buffer"].abs(), 1)
    (b1, b2), eps = settings["betas"], settings["eps"]
    t = int(moments["step"])
    m = moments["exp_avg"] / (1 - b1 ** t)
    v = moments["exp_avg_sq"] / (1 - b2 ** t)
    dm = (1 - b1) * b / (1 - b1 ** t)
    dv = (1 - b2) * (2 * g.abs() * b + b * b) / (1 - b2 ** t)
    s = v.sqrt()
    ds = s - (v - dv).clamp_min(0).sqrt()
    du = (dm * (s + eps) + m.abs() * ds) / ((s - ds + eps) * (s + eps))
    reach = 2 * adam_reach_terms(t, settings["betas"])[-1]
    return lr * du.clamp(max=reach) + update_rounding(theta, lr, 1)


def drift_floor(optimizer: str, settings: dict, theta: torch.Tensor, grads: list[torch.Tensor],
                bounds: list[torch.Tensor]) -> tuple[float, float]:
    """Rules 4 and 6 over a run: (the bound on a tensor's RMS drift, the per-element reach).

    Args:
      optimizer: "adamw" or "sgd".
      settings: the optimizer's settings.
      theta: the float64 weights after the last step.
      grads: the float64 gradient of each step.
      bounds: the elementwise bound on each step's gradient error.

    Returns:
      (RMS floor, reach); the reach is infinite for SGD, whose steps have no size limit.
    """
    lr, steps = settings["lr"], len(grads)
    if optimizer == "sgd":
        mu = settings["momentum"]
        drift = lr * sum(mu ** (t - j) * rms(bounds[j]) for t in range(steps) for j in range(t + 1))
        buffer = max(sum(mu ** (t - j) * rms(grads[j]) for j in range(t + 1)) for t in range(steps))
        return drift + update_rounding(rms(theta), lr * buffer, steps), math.inf
    c = adam_reach_terms(steps, settings["betas"])
    drift = sum(lr * 2 * c[t] * rms((2 * bounds[t] / grads[t].abs().clamp_min(1e-300)).clamp(max=1.0))
                for t in range(steps))
    return drift + update_rounding(rms(theta), lr, steps), 2 * lr * sum(c)


def running_stat_floors(momentum: float, mean: tuple, var: tuple, eps_forward: float) -> tuple:
    """Rule 5: the per-element floors of running_mean and running_var after one step.

    Args:
      momentum: the BatchNorm's momentum m.
      mean: (running_mean before the step, after it), float64.
      var: (running_var before, after), float64 (the batch variance is recovered from the blend).
      eps_forward: rule 1's ε_fwd.

    Returns:
      (floor of running_mean, floor of running_var).
    """
    batch_mean = (mean[1] - (1 - momentum) * mean[0]) / momentum
    batch_var = ((var[1] - (1 - momentum) * var[0]) / momentum).clamp_min(0)
    square = batch_var + batch_mean.square()
    return (eps_forward * ((1 - momentum) * mean[0].abs() + momentum * square.sqrt()),
            eps_forward * ((1 - momentum) * var[0].abs() + momentum * square))
