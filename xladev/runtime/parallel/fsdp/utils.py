"""`checkpoint_module`: gradient checkpointing of a module's forward, for FSDP's `auto_wrapper_callable`
(PyTorch/XLA's `torch_xla.distributed.fsdp.checkpoint_module`)."""

from __future__ import annotations

from types import MethodType

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves

from xladev.runtime.record.checkpoint import checkpoint


def _forward_with_checkpoint(module: nn.Module, *args, **kwargs):
    # Reentrant checkpointing, as PyTorch/XLA's: it has a gradient to give only through inputs that require one,
    # so a call without such an input runs plainly (its weights still get gradients).
    if not any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves((args, kwargs))):
        return module._xla_checkpointed_forward_original(*args, **kwargs)
    count, keys = len(args), tuple(kwargs)

    def run(*packed):
        return module._xla_checkpointed_forward_original(*packed[:count], **dict(zip(keys, packed[count:])))

    return checkpoint(run, *args, *kwargs.values(), use_reentrant=True)


def checkpoint_module(module: nn.Module) -> nn.Module:
    """Makes `module`'s forward checkpointed: its activations are not kept, the backward computes them again
    (behind an optimization barrier, so XLA does not merge the two; runtime/record/checkpoint.py).

    Wrap with `checkpoint_module` first, then with FSDP: `FSDP(checkpoint_module(block))`.

    Args:
      module: the module; its `forward` is replaced (the original stays as `_xla_checkpointed_forward_original`).

    Returns:
      `module` itself.

    Raises:
      TypeError: `module` is not an nn.Module.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"checkpoint_module takes an nn.Module, got {type(module).__name__}")
    module._xla_checkpointed_forward_original = module.forward
    module.forward = MethodType(_forward_with_checkpoint, module)
    return module
