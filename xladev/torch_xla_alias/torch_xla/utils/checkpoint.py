"""`torch_xla.utils.checkpoint` on xladev: PyTorch/XLA's gradient checkpointing, as xladev's (runtime/record/checkpoint.py).

The backward computes the region again from the outputs of one optimization barrier over its inputs, the
gradients arriving at its outputs and its module's weights, so XLA can neither merge the recomputation with
the forward nor run it early. The device's random numbers are replayed without reading them back.
"""

from __future__ import annotations

from typing import Any, Callable

from torch_xla import _xladev
from xladev.runtime.record import checkpoint as _checkpoint

__all__ = ["checkpoint"]


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


__getattr__ = _xladev.module_getattr(__name__)
