"""`torch_xla` on xladev: PyTorch/XLA's top-level API as renames of, and thin adapters onto, xladev's.

This package exists only inside `xladev run script.py` (and `python -m xladev.run`), which puts its folder
on `sys.path`, so that a PyTorch/XLA training script runs unchanged on xladev's `xla` device. It holds no
runtime of its own: every call lands in `xladev`. A torch_xla name the alias lacks raises an error naming it
and saying what to use instead (docs/compat.md lists both).

Like PyTorch/XLA, importing it registers the `xla` device with torch.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import xladev
from xladev.events import bus as _bus

# This script uses PyTorch/XLA's names, and a report's advice should too: said before the runtime starts (if it has
# not: `xladev run` says it first), so its outputs carry it (the event log's header, the PT_XLA_DEBUG summary).
_bus.api = "torch_xla"
from xladev import device as _xladev_device  # noqa: E402  starts xladev's runtime: `device='xla'` works after it
from xladev.analysis import ALIAS_COUNTER as _ALIAS_COUNTER  # noqa: E402
from xladev.sinks.metrics_registry import registry as _registry  # noqa: E402

# As PyTorch/XLA counts its import (registering the xla device): its metrics report shows this run used its names.
_registry.increment(_ALIAS_COUNTER)

from xladev.debug import _profiler_scopes
from torch_xla import _xladev

_xladev.install_finder()
# torch.compile(backend="openxla") is PyTorch/XLA's dynamo backend: here, xladev's (which torch's own `openxla`
# would also reach, through torch_xla.core.dynamo_bridge, without the graph breaks and recompiles it reports).
from xladev.runtime.dynamo import dynamo_backend as _dynamo_backend  # noqa: E402

_dynamo_backend.use_for("openxla")

# torch_xla releases follow torch's version; the local part says this is xladev's alias, not PyTorch/XLA.
__version__ = f"{torch.__version__.split('+')[0]}+xladev.{xladev.__version__}"


def device(index: int | None = None) -> torch.device:
    """The xla device `xla:index` (`xla:0` when None): `xladev.device`.

    Raises:
      ValueError: this process has no such device.
    """
    return _xladev_device(index)


def devices() -> list[torch.device]:
    """Every xla device of this process: `xladev.devices`."""
    return xladev.devices()


def device_count() -> int:
    """The number of xla devices of this process: `xladev.device_count`."""
    return xladev.device_count()


def real_devices() -> list[str]:
    """The runtime names of this process's devices (`['CPU:0']`, `['CUDA:0', ...]`): `xm.xla_real_devices`."""
    from torch_xla.core import xla_model

    return xla_model.xla_real_devices()


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    """Ends the step: compiles (or reuses) and starts the pending graph; `xladev.sync`.

    Args:
      wait: block until the graph has run.
      reset_scope: as PyTorch/XLA's: True (default) refuses to sync inside an open `xp.Trace` region;
        False syncs there anyway.

    Raises:
      TraceScopeError: (a RuntimeError) `reset_scope` is True and an `xp.Trace` region is open; nothing was synced.
    """
    if reset_scope:
        xladev.sync(wait=wait)
        return
    with _profiler_scopes.allow_barrier_in_scope():
        xladev.sync(wait=wait)


def compile(f: Callable | None = None, full_graph: bool | None = False, name: str | None = None,
            max_different_graphs: int | None = None, custom_compile_options: dict[str, Any] | None = None):
    """Runs `f` (or the `with` block) as one named graph: `xladev.compile`.

    Args:
      f: the function to wrap; None returns a context manager (also usable as a decorator).
      full_graph: any execution inside the region raises, naming its cause and line.
      name: the graph name in the debug analysis (default: `f`'s name).
      max_different_graphs: raise once `f` would run more different graphs than this.
      custom_compile_options: accepted for PyTorch/XLA's signature; XLA's CPU and CUDA compilers here take
        none of its TPU options.

    Returns:
      The wrapped function, or the context manager when `f` is None.
    """
    return xladev.compile(f, full_graph=bool(full_graph), name=name, max_different_graphs=max_different_graphs)


def step():
    """`with torch_xla.step():` marks a training step: syncs before the block and after it.

    Returns:
      The context manager of `compile()`.
    """
    return compile()


def manual_seed(seed: int, device: torch.device | None = None) -> None:
    """Seeds the device RNG: `xladev.manual_seed`."""
    xladev.manual_seed(seed, device)


def launch(fn: Callable, args: tuple = (), start_method: str = "spawn", debug_single_process: bool = False):
    """Runs `fn(index, *args)` in one process per device (`xmp.spawn` with `nprocs=None`), or in this process only
    with `debug_single_process`.

    Args:
      fn: the per-process function; its first argument is the process's ordinal.
      args: the rest of its arguments.
      start_method: 'spawn' (jax's runtime cannot be forked).
      debug_single_process: run `fn(0, *args)` here, as one replica.

    Returns:
      What `fn` returned when it ran in this process; else None.
    """
    from torch_xla.distributed import xla_multiprocessing

    return xla_multiprocessing.spawn(fn, args=args, nprocs=1 if debug_single_process else None,
                                     start_method=start_method)


# PyTorch/XLA imports these with the package; here they load on first use.
__getattr__ = _xladev.module_getattr(__name__, submodules=("_XLAC", "_dynamo", "amp", "backends", "core", "debug",
                                                         "distributed", "experimental", "runtime", "utils"))

from torch_xla import runtime  # noqa: E402  (as PyTorch/XLA: `torch_xla.runtime` right after `import torch_xla`)
from torch_xla.core import xla_model  # noqa: E402,F401  (binds torch_xla.core.xla_model)
# PyTorch/XLA's package namespace carries `xm` too (its tests call `torch_xla.xm.fork_rng()`).
xm = xla_model
