"""`torch_xla.utils.dlpack` on xladev: an xla tensor's buffer shared with another framework through DLPack, and back.

`to_dlpack(xla_tensor)` gives a DLPack capsule of the tensor's computed buffer (pending work runs first; a view
gives a buffer of its own values), from the jax array that holds it. `from_dlpack(ext)` takes a capsule or any
object with `__dlpack__` (a CPU torch tensor, a numpy array, a jax array) and gives an xla tensor on the default
device: the same buffer where jax can keep it on that device, else a copy.
"""

from __future__ import annotations

from typing import Any

from xladev.runtime.api.jax_arrays import from_jax, to_jax

from torch_xla import _xladev

__all__ = ["from_dlpack", "to_dlpack"]


def to_dlpack(xla_tensor: Any):
    """A DLPack capsule of an xla tensor's buffer."""
    return to_jax(xla_tensor, "to_dlpack").__dlpack__()


def from_dlpack(ext_tensor: Any):
    """An xla tensor of a DLPack capsule's, or a `__dlpack__` object's, value."""
    import jax

    return from_jax(jax.dlpack.from_dlpack(ext_tensor))


__getattr__ = _xladev.module_getattr(__name__)
