"""`torch_xla.distributed.xla_multiprocessing` (`xmp`) on xladev: one process, so `spawn` calls `fn(0, *args)` here.

PyTorch/XLA's `spawn(nprocs=1)` does the same (the function runs directly, in the calling process); its default
of one process per device becomes this one process, since xladev runs one replica.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from torch_xla import _xladev


class MultiProcessNotSupported(ValueError):
    """`spawn` asked for more than one process."""


def spawn(fn: Callable, args: tuple = (), nprocs: int | None = None, join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> Any:
    """Runs `fn(0, *args)` in this process.

    Args:
      fn: the per-process function; its first argument is the process index.
      args: the rest of its arguments.
      nprocs: None or 1.
      join, daemon, start_method: accepted for PyTorch/XLA's signature; no process is started.

    Returns:
      What `fn` returned.

    Raises:
      MultiProcessNotSupported (a ValueError, as PyTorch/XLA raises for an nprocs it cannot use): nprocs > 1.
    """
    if nprocs is not None and nprocs != 1:
        raise MultiProcessNotSupported(
            f"xmp.spawn(nprocs={nprocs}): xladev runs one process with one replica; multi-process training comes "
            "with xladev's distributed work. Use nprocs=None or nprocs=1 to run fn(0, *args) in this process.")
    return fn(0, *args)


class MpModelWrapper:
    """Holds a CPU model for `spawn(..., start_method='fork')` children; with one process, a plain holder.

    Args:
      model: the model, on the CPU.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        self._model = model

    def to(self, device: torch.device) -> torch.nn.Module:
        """The model moved to `device` (the same module object)."""
        return self._model.to(device)


class MpSerialExecutor:
    """Runs a function in one process at a time; with one process, runs it."""

    def run(self, fn: Callable[[], Any]) -> Any:
        """Returns `fn()`."""
        return fn()


__getattr__ = _xladev.module_getattr(__name__)
