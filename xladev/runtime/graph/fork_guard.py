"""Forked children: a clear error instead of a hang when a child of a device-using process touches `xla`.

jax and XLA are not fork-safe. A child forked after the PJRT client started inherits its locks and
queues but none of its threads, so the child's first compile, execution or wait on a running graph
blocks for ever (e.g. a DataLoader worker, started with the default fork method, whose dataset or
collate_fn makes device tensors). Right after such a fork this module marks the child `blocked`, and
every entry point to the device checks it and raises: an op on a device tensor (`XlaTensor`'s
dispatch), factories and copies (handlers), host->device copies (backend), value reads (transfers)
and graph runs (execution). The parent pays one flag test per op. PyTorch does the same for CUDA
(`torch.cuda._is_in_bad_fork`), and `torch.manual_seed` skips a device whose module says so.
"""

from __future__ import annotations

import os
from typing import Callable

FORK_ERROR = (
    "xladev: the xla device was initialised in the parent process and cannot be used in a forked child "
    "(a DataLoader worker?). Keep device work in the main process (DataLoader yields CPU tensors; "
    "DeviceLoader moves them), or use the 'spawn' start method."
)

# True in a forked child of a process that had started the device; read by every entry point.
blocked = False
_installed = False
_device_started: Callable[[], bool] | None = None


def install(device_started: Callable[[], bool]) -> None:
    """Arms the guard for every later `os.fork()` of this process (DataLoader workers included). Idempotent.

    Args:
      device_started: whether this process has started the device (`backend.initialised`), asked in
        the child. Handed in rather than imported: the backend itself checks this guard.
    """
    global _installed, _device_started
    _device_started = device_started
    if not _installed:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _installed = True


def in_bad_fork() -> bool:
    """Whether this process is a forked child of one that had started the device (`torch.xla._is_in_bad_fork`)."""
    return blocked


def check(what=None) -> None:
    """Raises in a forked child of a process that had started the device; does nothing anywhere else.

    Args:
      what: the op being run, named in the message.

    Raises:
      RuntimeError: FORK_ERROR.
    """
    if blocked:
        raise RuntimeError(FORK_ERROR if what is None else f"{FORK_ERROR} (while running {what})")


def _after_fork_in_child() -> None:
    # Runs in the child before anything else does; it takes no lock, which another thread of the
    # parent may have held at the fork, and imports nothing.
    global blocked
    if _device_started is not None and _device_started():
        blocked = True
