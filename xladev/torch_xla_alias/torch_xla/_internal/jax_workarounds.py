"""`torch_xla._internal.jax_workarounds` on xladev: readying jax, which xladev's runtime already is.

PyTorch/XLA must claim its TPU before jax does (`jax_import_guard`) and hides a multi-host setting from jax
while it imports (`jax_env_context`); xladev compiles through jax itself, so these do nothing and jax is
always present.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from torch_xla import _xladev


def jax_import_guard() -> None:
    """Nothing to do: xladev's device is jax's own."""


def requires_jax(func: Callable) -> Callable:
    """PyTorch/XLA's decorator readying jax before `func` runs: here, `func` itself."""
    return func


@contextlib.contextmanager
def jax_env_context() -> Iterator[None]:
    """A block run as it is (PyTorch/XLA sets a TPU multi-host variable around jax's import)."""
    yield


def maybe_get_jax(log: bool = True):
    """The `jax` module."""
    import jax

    return jax


def maybe_get_torchax():
    """None: torchax is not provided (its 0.0.13 does not import with torch 2.13); xb.call_jax needs none."""
    return None


__getattr__ = _xladev.module_getattr(__name__)
