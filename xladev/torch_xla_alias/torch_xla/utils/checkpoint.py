"""`torch_xla.utils.checkpoint` on xladev: PyTorch/XLA's gradient checkpointing, as xladev's (runtime/record/checkpoint.py).

The backward computes the region again from the outputs of one optimization barrier over its inputs, the
gradients arriving at its outputs and its module's weights, so XLA can neither merge the recomputation with
the forward nor run it early. The device's random numbers are replayed without reading them back.
"""

from __future__ import annotations

from typing import Any, Callable

import torch.utils.checkpoint as _torch_checkpoint

from torch_xla import _xladev
from xladev.runtime.record import checkpoint as _checkpoint

__all__ = ["CheckpointFunction", "checkpoint"]


def checkpoint(function: Callable, *args, use_reentrant: bool = True, **kwargs) -> Any:
    """Runs `function(*args)` without keeping its activations; the backward computes them again.

    Args:
      function: the checkpointed region (a module, its method, or any function of tensors).
      *args: its arguments.
      use_reentrant: True only, as PyTorch/XLA's.
      **kwargs: `preserve_rng_state` (default True) only.

    Returns:
      What `function(*args)` returns.

    Raises:
      ValueError: `use_reentrant=False`, or another keyword argument (PyTorch/XLA's errors).
    """
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(arg for arg in kwargs))
    if not use_reentrant:
        raise ValueError("XLA currently does not support use_reentrant==False")
    return _checkpoint.checkpoint(function, *args, use_reentrant=True, preserve_rng_state=preserve)



class CheckpointFunction(_torch_checkpoint.CheckpointFunction):
    """PyTorch/XLA's reentrant checkpoint as an autograd Function, for code that calls it directly.

    `CheckpointFunction.apply(run_function, preserve_rng_state, *args)` is `checkpoint(run_function, *args,
    preserve_rng_state=...)`: the same recomputation behind an optimization barrier (torch's own reentrant
    Function, which it subclasses, does the autograd work underneath).
    """

    @classmethod
    def apply(cls, run_function: Callable, preserve_rng_state: bool, *args) -> Any:
        """Runs `run_function(*args)` without keeping its activations; the backward computes them again.

        Args:
          run_function: the checkpointed region.
          preserve_rng_state: replay the region's random numbers in the recomputation.
          *args: its arguments.

        Returns:
          What `run_function(*args)` returns.
        """
        return _checkpoint.checkpoint(run_function, *args, use_reentrant=True,
                                      preserve_rng_state=bool(preserve_rng_state))


__getattr__ = _xladev.module_getattr(__name__)
