"""torch's fused optimizer kernels (`Adam`, `AdamW`, `SGD` with `fused=True`) on device tensors.

torch lists the PrivateUse1 device (`xla`) among the devices with fused optimizer kernels, so `fused=True` is
accepted and calls `_fused_adam_`/`_fused_adamw_`/`_fused_sgd_`. They are computed here as the same arithmetic in foreach ops
(each one recorded op over the whole list, foreach.py), with the bias corrections computed on the device from
the step counts (a fused optimizer keeps them there), so the step stays in the graph. With a GradScaler's
`grad_scale`/`found_inf` the kernel still runs on the CPU (a fallback, correct but with transfers).
"""

from __future__ import annotations

import torch

from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.record.special_handlers import special

aten = torch.ops.aten


@special(aten._fused_adam_.default, aten._fused_adam_.tensor_lr, aten._fused_adamw_.default,
         aten._fused_adamw_.tensor_lr)
def _fused_adam(func, args, kwargs):
    """One fused Adam(W) step over the lists, in place, as ATen's fused kernel computes it."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if bound.get("grad_scale") is not None or bound.get("found_inf") is not None:
        return run_on_cpu(func, args, kwargs)
    params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = (list(bound[n]) for n in names[:6])
    if not params:
        return None
    lr, beta1, beta2, weight_decay, eps = (bound[n] for n in ("lr", "beta1", "beta2", "weight_decay", "eps"))
    if bound["maximize"]:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        if func._schema.name == "aten::_fused_adamw_":
            torch._foreach_mul_(params, 1 - lr * weight_decay)
        else:
            grads = torch._foreach_add(grads, params, alpha=weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    # The bias corrections of every parameter's step count, as one vector: a handful of ops, not a few per parameter.
    step = torch.stack(steps)  # float32: a fused optimizer keeps its step counts so
    step_size = torch.neg(lr / (1 - torch.pow(beta1, step)))
    correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
    if bound["amsgrad"]:
        torch._foreach_maximum_(max_exp_avg_sqs, exp_avg_sqs)
        denom = torch._foreach_sqrt(max_exp_avg_sqs)
    else:
        denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, list(correction2_sqrt.unbind()))
    torch._foreach_add_(denom, eps)
    update = torch._foreach_div(exp_avgs, denom)
    torch._foreach_mul_(update, list(step_size.unbind()))
    torch._foreach_add_(params, update)
    return None


@special(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def _fused_sgd(func, args, kwargs):
    """One fused SGD step over the lists, in place, as ATen's fused kernel computes it."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if bound.get("grad_scale") is not None or bound.get("found_inf") is not None:
        return run_on_cpu(func, args, kwargs)
    params, grads, buffers = (list(bound[n]) for n in names[:3])
    if not params:
        return None
    momentum, weight_decay, lr = bound["momentum"], bound["weight_decay"], bound["lr"]
    if bound["maximize"]:
        grads = torch._foreach_neg(grads)
    if weight_decay != 0:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    if momentum != 0:
        if bound["is_first_step"]:  # torch made the buffers with empty_like: the first gradient is their value
            torch._foreach_copy_(buffers, grads)
        else:
            torch._foreach_mul_(buffers, momentum)
            torch._foreach_add_(buffers, grads, alpha=1 - bound["dampening"])
        grads = torch._foreach_add(grads, buffers, alpha=momentum) if bound["nesterov"] else buffers
    if isinstance(lr, torch.Tensor):
        torch._foreach_sub_(params, torch._foreach_mul(grads, lr))
    else:
        torch._foreach_add_(params, grads, alpha=-lr)
    return None
