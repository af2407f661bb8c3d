"""xladev: a lazy XLA device for PyTorch, and the debugging and profiling toolkit around it.

    import xladev
    device = xladev.device()
    model = model.to(device)
    ...
    loss.backward(); optimizer.step(); xladev.mark_step()

Importing the package is cheap: it loads neither torch nor jax. The runtime (the `xla` device, the
compiler, the sinks the flags ask for) starts on first use of a runtime name (`xladev.device()`,
`mark_step`...), or as soon as torch is imported, before or after xladev, so that
`torch.ones(2, device="xla")` works right after `import torch, xladev` or `import xladev, torch`.
The file readers (`xladev.report`, `xladev.schema`, the TUI) never start it.
"""

from __future__ import annotations

import os as _os
import sys as _sys
import threading as _threading
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# Public names served by the runtime, and the module that defines each (read by `__getattr__`).
_RUNTIME_NAMES = {
    "ConfigError": "xladev._flags", "config": "xladev._flags",
    "XladevError": "xladev.errors", "XladevWarning": "xladev.errors",
    "device": "xladev.runtime.device", "device_count": "xladev.runtime.device", "devices": "xladev.runtime.device",
    "XlaCompileError": "xladev.runtime.compile.compilation", "GraphGrowthWarning": "xladev.runtime.graph.op_ledger",
    "DeviceLoader": "xladev.runtime.api.training", "add_step_closure": "xladev.runtime.api.training",
    "initialize_cache": "xladev.runtime.compile.compilation", "manual_seed": "xladev.runtime.api.training",
    "mark_step": "xladev.runtime.api.training", "optimizer_step": "xladev.runtime.api.training",
    "sync": "xladev.runtime.api.training", "wait_device_ops": "xladev.runtime.api.training",
    "compile": "xladev.runtime.dynamo.compiled_region", "GraphLimitError": "xladev.runtime.dynamo.compiled_region",
    "launch": "xladev.runtime.distributed.launch", "LaunchError": "xladev.runtime.distributed.launch",
    "DistributedError": "xladev.runtime.graph.world", "AliasedInputsError": "xladev.runtime.dynamo.fx_program",
    "world_size": "xladev.runtime.distributed.collectives", "global_ordinal": "xladev.runtime.distributed.collectives",
    "local_ordinal": "xladev.runtime.distributed.collectives", "all_reduce": "xladev.runtime.distributed.collectives",
    "all_gather": "xladev.runtime.distributed.collectives", "reduce_scatter": "xladev.runtime.distributed.collectives",
    "broadcast": "xladev.runtime.distributed.collectives", "all_to_all": "xladev.runtime.distributed.collectives",
    "collective_permute": "xladev.runtime.distributed.collectives", "barrier": "xladev.runtime.distributed.collectives",
    "rendezvous": "xladev.runtime.distributed.collectives", "mesh_reduce": "xladev.runtime.distributed.collectives",
    "reduce_gradients": "xladev.runtime.distributed.collectives",
    "REDUCE_SUM": "xladev.runtime.distributed.collectives", "REDUCE_MUL": "xladev.runtime.distributed.collectives",
    "REDUCE_AND": "xladev.runtime.distributed.collectives", "REDUCE_OR": "xladev.runtime.distributed.collectives",
    "REDUCE_MIN": "xladev.runtime.distributed.collectives", "REDUCE_MAX": "xladev.runtime.distributed.collectives",
}

# Names whose modules are light (no torch, no jax): looking them up does not start the runtime.
_CHEAP_MODULES = ("xladev._flags", "xladev.errors")

__all__ = sorted([*_RUNTIME_NAMES, "debug"])

if TYPE_CHECKING:  # what static tools see; at run time `__getattr__` loads these on first use
    from xladev import debug
    from xladev._flags import ConfigError, config
    from xladev.errors import XladevError, XladevWarning
    from xladev.runtime.device import device, device_count, devices
    from xladev.runtime.compile.compilation import XlaCompileError, initialize_cache
    from xladev.runtime.dynamo.compiled_region import GraphLimitError, compile
    from xladev.runtime.graph.op_ledger import GraphGrowthWarning
    from xladev.runtime.api.training import (
        DeviceLoader, add_step_closure, manual_seed, mark_step, optimizer_step, sync, wait_device_ops,
    )
    from xladev.runtime.distributed.collectives import (
        REDUCE_AND, REDUCE_MAX, REDUCE_MIN, REDUCE_MUL, REDUCE_OR, REDUCE_SUM, all_gather, all_reduce, all_to_all,
        barrier, broadcast, collective_permute, global_ordinal, local_ordinal, mesh_reduce, reduce_gradients,
        reduce_scatter, rendezvous, world_size,
    )
    from xladev.runtime.distributed.launch import LaunchError, launch
    from xladev.runtime.graph.world import DistributedError
    from xladev.runtime.dynamo.fx_program import AliasedInputsError

_start_lock = _threading.RLock()
_started = False


def _load_runtime() -> None:
    """Registers the `xla` device with torch and starts the sinks the flags ask for. Idempotent.

    Raises:
      ConfigError: an environment variable has a bad value (the message names it).
    """
    global _started
    with _start_lock:
        if _started:
            return
        _StartWithTorch.remove()  # the start imports torch itself: the hook must not start it a second time
        from xladev import _startup

        _startup.load()
        _started = True


def __getattr__(name: str):
    module = _RUNTIME_NAMES.get(name)
    if module is None:
        if name == "debug":
            import importlib

            return importlib.import_module("xladev.debug")
        raise AttributeError(f"module 'xladev' has no attribute {name!r}")
    if module not in _CHEAP_MODULES:
        _load_runtime()
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _StartWithTorch:
    """An import hook: `import xladev, torch` starts the runtime once torch is imported, as `import torch, xladev`.

    Without it, `torch.ones(2, device="xla")` after that import order fails in torch's dispatcher with a
    message that does not name xladev. The hook finds nothing itself: it wraps the loader of the `torch` spec
    that the other finders return, and removes itself at its first use.
    """

    @classmethod
    def install(cls) -> None:
        if not any(isinstance(f, cls) for f in _sys.meta_path):
            _sys.meta_path.insert(0, cls())

    @classmethod
    def remove(cls) -> None:
        _sys.meta_path[:] = [f for f in _sys.meta_path if not isinstance(f, cls)]

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        self.remove()
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _ThenStart(spec.loader)
        return spec


class _ThenStart:
    """A loader running the wrapped one, then starting the runtime on the module it has just executed."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        # torch imported by one of xladev's own modules (`import xladev.runtime.x` first) is left to start on
        # first use, as before: starting now would import that half-initialised module again.
        if not any(name.startswith("xladev.") and getattr(getattr(m, "__spec__", None), "_initializing", False)
                   for name, m in list(_sys.modules.items())):
            _load_runtime()

    def __getattr__(self, name: str):  # get_resource_reader, is_package...: the wrapped loader's
        return getattr(self._loader, name)


if _os.environ.get("XLADEV_ATTACH"):
    pass  # this process observes a real torch_xla (`xladev.attach`): xladev's own runtime does not start with torch
elif "torch" in _sys.modules:
    _load_runtime()
else:
    _StartWithTorch.install()
