"""`torch_xla.distributed.xla_multiprocessing` (`xmp`) on xladev: `spawn` starts the job's processes.

Each process is one replica on its `xla:0`, started by `xladev.launch` (Python's `spawn` method, torchrun's
environment). As in PyTorch/XLA, `nprocs=None` means one replica per device: CPU_NUM_DEVICES processes on the
CPU (1 when unset), and `nprocs=1` runs `fn(0, *args)` in this process. xladev also takes `nprocs=N` for N
processes, which PyTorch/XLA refuses.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import xladev

from torch_xla import _xladev


def spawn(fn: Callable, args: tuple = (), nprocs: int | None = None, join: bool = True, daemon: bool = False,
          start_method: str = "spawn") -> Any:
    """Runs `fn(index, *args)` in each process of a new job, `index` being the process's ordinal.

    Args:
      fn: the per-process function (module-level: it is pickled).
      args: the rest of its arguments.
      nprocs: None (one process per device: CPU_NUM_DEVICES), 1 (this process), or a number of processes.
      join, daemon: accepted for PyTorch/XLA's signature: spawn always waits for its processes.
      start_method: 'spawn' (jax's runtime cannot be forked; 'fork' is refused).

    Returns:
      What `fn` returned, when it ran in this process (nprocs=1); else None, as PyTorch/XLA.

    Raises:
      xladev.LaunchError: a process failed; the message names its rank and error.
    """
    if nprocs == 1:
        return fn(0, *args)
    results = xladev.launch(fn, args=args, nprocs=nprocs, start_method=start_method)
    return results[0] if len(results) == 1 else None


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
