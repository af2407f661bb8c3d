"""`torch_xla.experimental` on xladev: eager mode (xladev's eager debug mode, `XLA_USE_EAGER_DEBUG_MODE`),
`scan` and `scan_layers`, `custom_kernel`, FSDPv2 (`spmd_fully_sharded_data_parallel`) and
`distributed_checkpoint`.

In eager mode each op runs as its own small graph as soon as it is recorded; `torch_xla.compile` regions
still trace one graph. The submodules are their own modules; the other experimental APIs are not provided.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import xladev
from torch_xla import _xladev

__all__ = ["eager_mode", "is_eager_mode", "eager_mode_context"]


def eager_mode(enable: bool) -> None:
    """Turns eager mode on or off for the process: `xladev.config.update("eager_debug_mode", enable)`."""
    xladev.config.update("eager_debug_mode", bool(enable))


def is_eager_mode() -> bool:
    """Whether eager mode is on (`xladev.config.eager_debug_mode`)."""
    return bool(xladev.config.eager_debug_mode)


@contextlib.contextmanager
def eager_mode_context(enable: bool) -> Iterator[bool]:
    """Eager mode on or off for the block; yields the previous setting, which is restored after."""
    saved = is_eager_mode()
    eager_mode(enable)
    try:
        yield saved
    finally:
        eager_mode(saved)


__getattr__ = _xladev.module_getattr(__name__, submodules=("custom_kernel", "distributed_checkpoint", "scan",
                                                         "scan_layers", "spmd_fully_sharded_data_parallel"))
