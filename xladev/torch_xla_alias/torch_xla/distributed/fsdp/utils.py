"""`torch_xla.distributed.fsdp.utils` on xladev: `checkpoint_module` and `apply_xla_patch_to_nn_linear`.

`apply_xla_patch_to_nn_linear(module, patched_function=xla_patched_nn_linear_forward)` gives every `nn.Linear` in
`module` (itself included) the patched forward, whose backward computes the weight's gradient with an einsum over
the saved input (PyTorch/XLA's fix for FSDP's gathered weights). A Linear whose forward is already its own (not
`nn.Linear.forward`) is left alone; one wrapped by `checkpoint_module` gets the patch inside the checkpoint.
"""

from __future__ import annotations

import types

import torch

from xladev.runtime.distributed.spmd_autograd import xla_patched_nn_linear_forward
from xladev.runtime.parallel.fsdp.utils import checkpoint_module  # noqa: F401

from torch_xla import _xladev

__all__ = ["apply_xla_patch_to_nn_linear", "checkpoint_module"]


def _patch(module: torch.nn.Module, attribute: str, patched_function) -> None:
    forward = module.__dict__.get(attribute) if attribute != "forward" else getattr(module, attribute, None)
    if forward is None or getattr(forward, "__func__", None) is not torch.nn.Linear.forward:
        return
    module._nn_linear_forward_original = forward
    setattr(module, attribute, types.MethodType(patched_function, module))


def apply_xla_patch_to_nn_linear(module: torch.nn.Module, patched_function=xla_patched_nn_linear_forward):
    """Gives each `nn.Linear` of `module` the patched forward (see the module's docstring).

    Args:
      module: the model (or one layer).
      patched_function: the forward to use, a function of (linear, input).

    Returns:
      `module`, patched in place.
    """
    for sub in module.modules():
        if isinstance(sub, torch.nn.Linear):
            _patch(sub, "forward", patched_function)
            _patch(sub, "_xla_checkpointed_forward_original", patched_function)
    return module


__getattr__ = _xladev.module_getattr(__name__)
