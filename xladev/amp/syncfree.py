"""Sync-free optimizers: SGD, Adam and AdamW whose `step(found_inf=...)` skips an update in the graph.

PyTorch/XLA's `torch_xla.amp.syncfree`, with its signatures: each is the torch.optim optimizer, and
`step(closure=None, found_inf=None)` takes a scalar tensor that is nonzero when the gradients hold an
inf or NaN (what `xladev.amp.GradScaler.step` passes). Then the step reads nothing back to the host:
each new value is computed and `torch.where(found_inf != 0, old, new)` keeps the old one on a skipped
step, so a step with and without an overflow is the same graph. `found_inf=None` is torch.optim's step.

The update is torch.optim's (SGD's momentum, dampening and Nesterov; Adam's and AdamW's weight decay
and AMSGrad; `maximize` negates the gradient first), as PyTorch/XLA's C++ kernels compute it. Each
parameter's state gains a `step` tensor (of found_inf's dtype, on its device) that counts the steps
taken, not the steps skipped: Adam's bias correction and SGD's first-step momentum read it.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SGD", "Adam", "AdamW"]


def _check(found_inf: Tensor) -> None:
    if not isinstance(found_inf, Tensor):
        raise TypeError(f"found_inf must be a scalar tensor (or None), got {type(found_inf).__name__}")
    if found_inf.shape:
        raise ValueError("The found_inf tensor has to be scalar type")  # PyTorch/XLA's wording


def _closure_loss(closure):
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _torch_step(optimizer_class, optimizer, closure):
    """torch.optim's own step of `optimizer_class`, without the step hooks: torch wraps every optimizer class's
    `step` in the hooks (the parent's too, once it has an instance), and this class's step already ran them."""
    step = optimizer_class.step
    if getattr(step, "hooked", False):
        step = step.__wrapped__
    return step(optimizer, closure=closure)


def _step_counter(state: dict, found_inf: Tensor) -> Tensor:
    if "step" not in state:
        state["step"] = torch.zeros_like(found_inf)
    return state["step"]


class SGD(torch.optim.SGD):
    """torch.optim.SGD whose `step` takes `found_inf` and then skips the update on device (module docstring)."""

    @torch.no_grad()
    def step(self, closure=None, found_inf: Tensor | None = None):
        """One optimization step, skipped in the graph when `found_inf` is nonzero.

        Args:
          closure: re-evaluates the model and returns the loss (optional).
          found_inf: a scalar tensor; nonzero skips this step. None: torch.optim.SGD's step.

        Returns:
          The closure's loss, or None.

        Raises:
          ValueError: found_inf is not a scalar (PyTorch/XLA's error).
        """
        if found_inf is None:
            return _torch_step(torch.optim.SGD, self, closure)
        _check(found_inf)
        loss = _closure_loss(closure)
        skip = found_inf != 0
        for group in self.param_groups:
            lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
            weight_decay, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                step = _step_counter(state, found_inf)
                d_p = -p.grad if maximize else p.grad
                if weight_decay != 0:
                    d_p = d_p + weight_decay * p
                if momentum != 0:
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        # Its content is never read: the first step taken (step == 0) starts from d_p.
                        buf = state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    new_buf = torch.where(step != 0, buf * momentum + d_p * (1 - dampening), d_p)
                    d_p = d_p + momentum * new_buf if nesterov else new_buf
                    buf.copy_(torch.where(skip, buf, new_buf))
                p.copy_(torch.where(skip, p, p - lr * d_p))
                step.add_(torch.logical_not(skip).to(step.dtype))
        return loss


def _adam_step(group: dict, state: dict, p: Tensor, found_inf: Tensor, skip: Tensor, decoupled: bool) -> None:
    beta1, beta2 = group["betas"]
    lr, eps, weight_decay = group["lr"], group["eps"], group["weight_decay"]
    amsgrad = group["amsgrad"]
    if "exp_avg" not in state:
        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if amsgrad:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
    step = _step_counter(state, found_inf)
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    grad = -p.grad if group["maximize"] else p.grad
    new_step = step + torch.logical_not(skip).to(step.dtype)
    param = p
    if weight_decay != 0:
        if decoupled:
            param = p * (1 - lr * weight_decay)
        else:
            grad = grad + weight_decay * p
    new_exp_avg = exp_avg.lerp(grad, 1 - beta1)
    new_exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
    bias_correction1 = 1 - torch.pow(beta1, new_step)
    bias_correction2 = 1 - torch.pow(beta2, new_step)
    second = new_exp_avg_sq
    if amsgrad:
        max_exp_avg_sq = state["max_exp_avg_sq"]
        second = torch.maximum(max_exp_avg_sq, new_exp_avg_sq)
        max_exp_avg_sq.copy_(torch.where(skip, max_exp_avg_sq, second))
    denom = second.sqrt() / bias_correction2.sqrt() + eps
    # On a skipped first step the bias corrections are 0 and the new value NaN: torch.where drops it.
    new_param = param - (lr / bias_correction1) * (new_exp_avg / denom)
    p.copy_(torch.where(skip, p, new_param))
    exp_avg.copy_(torch.where(skip, exp_avg, new_exp_avg))
    exp_avg_sq.copy_(torch.where(skip, exp_avg_sq, new_exp_avg_sq))
    step.copy_(new_step)


def _adam_family_step(optimizer, base_class, closure, found_inf, decoupled_default: bool):
    if found_inf is None:
        return _torch_step(base_class, optimizer, closure)
    _check(found_inf)
    loss = _closure_loss(closure)
    skip = found_inf != 0
    for group in optimizer.param_groups:
        decoupled = group.get("decoupled_weight_decay", decoupled_default)
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients, please consider SparseAdam instead")
            _adam_step(group, optimizer.state[p], p, found_inf, skip, decoupled)
    return loss


_STEP_DOC = """One optimization step, skipped in the graph when `found_inf` is nonzero.

        Args:
          closure: re-evaluates the model and returns the loss (optional).
          found_inf: a scalar tensor; nonzero skips this step. None: torch.optim's step.

        Returns:
          The closure's loss, or None.

        Raises:
          ValueError: found_inf is not a scalar (PyTorch/XLA's error).
          RuntimeError: a gradient is sparse (as torch.optim.Adam).
        """


class Adam(torch.optim.Adam):
    """torch.optim.Adam whose `step` takes `found_inf` and then skips the update on device (module docstring)."""

    @torch.no_grad()
    def step(self, closure=None, found_inf: Tensor | None = None):
        return _adam_family_step(self, torch.optim.Adam, closure, found_inf, decoupled_default=False)

    step.__doc__ = _STEP_DOC


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW whose `step` takes `found_inf` and then skips the update on device (module docstring)."""

    @torch.no_grad()
    def step(self, closure=None, found_inf: Tensor | None = None):
        return _adam_family_step(self, torch.optim.AdamW, closure, found_inf, decoupled_default=True)

    step.__doc__ = _STEP_DOC
