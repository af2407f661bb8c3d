"""Forked children: a clear error instead of a hang when a child of a device-using process touches `xla`.

jax and XLA are not fork-safe. A child forked after the PJRT client started inherits its locks and
queues but none of its threads, so the child's first compile, execution or wait on a running graph
blocks for ever (e.g. a DataLoader worker, started with the default fork method, whose dataset or
collate_fn makes device tensors). In such a child every entry point to the device is swapped for one
that raises, once, right after the fork: the parent pays nothing per op. PyTorch does the same for
CUDA (`torch.cuda._is_in_bad_fork`), and `torch.manual_seed` skips a device whose module says so.
"""

from __future__ import annotations

import os
import sys

FORK_ERROR = (
    "xladev: the xla device was initialised in the parent process and cannot be used in a forked child "
    "(a DataLoader worker?). Keep device work in the main process (DataLoader yields CPU tensors; "
    "DeviceLoader moves them), or use the 'spawn' start method."
)

_installed = False
_in_bad_fork = False


def install() -> None:
    """Arms the guard for every later `os.fork()` of this process (DataLoader workers included). Idempotent."""
    global _installed
    if not _installed:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _installed = True


def in_bad_fork() -> bool:
    """Whether this process is a forked child of one that had started the device (`torch.xla._is_in_bad_fork`)."""
    return _in_bad_fork


def _fail(*args, **kwargs):
    raise RuntimeError(FORK_ERROR)


def _fail_dispatch(cls, func, types, args=(), kwargs=None):
    raise RuntimeError(f"{FORK_ERROR} (while running {func})")


def _after_fork_in_child() -> None:
    # Runs in the child before anything else does; it takes no lock, which another thread of the
    # parent may have held at the fork, and imports nothing (modules are looked up in sys.modules).
    global _in_bad_fork
    backend = sys.modules.get("xladev.runtime.backend")
    if backend is None or not backend.initialised():
        return  # the device was never started: the child can start its own
    _in_bad_fork = True
    tensor = sys.modules.get("xladev.runtime.tensor")
    if tensor is not None:
        # Every op on an existing device tensor, and every read (.cpu(), .item(), .tolist()), dispatches here.
        tensor.XlaTensor.__torch_dispatch__ = classmethod(_fail_dispatch)
        tensor.XlaTensor.__repr__ = _fail  # printing downloads without dispatching
    handlers = sys.modules.get("xladev.runtime.handlers")
    if handlers is not None:
        handlers.create = _fail  # factories: torch.zeros(..., device="xla"), cpu_tensor.to("xla")
        handlers.copy_into = _fail  # copies below the Python key (`_copy_from`)
    backend.put = _fail  # host->device copies outside dispatch (seeding the device RNG)
    executor_module = sys.modules.get("xladev.runtime.executor")
    if executor_module is not None:
        executor = executor_module.executor
        executor.run = _fail  # compiling or running a graph: mark_step() with tensors pending from the parent
        # Graphs the parent dispatched are the parent's to announce; their watcher thread is not here,
        # and waiting on them (at the child's exit too) would never end.
        executor.in_flight._unannounced.clear()
