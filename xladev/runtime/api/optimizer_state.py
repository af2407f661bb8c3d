"""SGD's momentum buffers exist before its first step on the device, so the second step compiles nothing new.

torch's SGD makes each momentum buffer inside its first step as a copy of the gradient (`buf = grad.clone()`) and
from the second step on updates it (`buf.mul_(momentum).add_(grad, alpha=1 - dampening)`): two programs, so the
second step compiled a graph of its own. Without dampening, that update of a zero buffer is the gradient itself,
exactly (0·m is 0 and 0 + g is g in floating point), so a zero buffer made before the first step gives the first
step the program of every later step, and the same values. The zeros become device data before the first graph, as
any state created as a constant does (`xladev.runtime.execute.seeds`). With dampening the first step's value
differs, and torch's own first step is kept. Adam's, RMSprop's and the others' state starts from constants
already, and needs nothing here.
"""

from __future__ import annotations

import torch

_installed = False


def _add_buffers(optimizer, group) -> None:
    """Zero momentum buffers for the group's device parameters that have a (dense) gradient and no buffer yet."""
    if group.get("momentum", 0) == 0 or group.get("dampening", 0) != 0:
        return
    state = optimizer.state
    for param in group["params"]:
        grad = param.grad
        # As torch's first step: only parameters with a dense gradient get a buffer.
        if grad is None or grad.is_sparse or param.device.type != "xla":
            continue
        held = state.get(param)
        if held is None or held.get("momentum_buffer") is None:
            state[param]["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)


def install() -> None:
    """Wraps `torch.optim.SGD._init_group` (`device.register`). Idempotent.

    `_init_group` gathers each step's parameters, gradients and buffers; the buffers are made just before it.
    TorchDynamo runs `_init_group` itself rather than tracing it, so a compiled optimizer step gets the buffers
    the same way, with no graph break (a global step hook would be a call into xladev's code, which TorchDynamo
    does not trace).
    """
    global _installed
    if _installed:
        return
    from torch.optim import SGD

    init_group = SGD._init_group

    def _init_group(self, group, params, grads, momentum_buffer_list):
        _add_buffers(self, group)
        return init_group(self, group, params, grads, momentum_buffer_list)

    _init_group.__wrapped__ = init_group
    SGD._init_group = _init_group
    _installed = True
