"""An xla tensor's value as a jax array, and a jax array as an xla tensor: what DLPack exchange
(`torch_xla.utils.dlpack`) is built on.

A tensor's array is its computed buffer (pending work runs first, as a read does); a view gives the array of its own
values (a copy of the viewed part). An array becomes a tensor's buffer without a copy when it is on the tensor's jax
device already.
"""

from __future__ import annotations

import torch

from xladev.runtime.execute.transfers import arrays_of, current_cause, reading
from xladev.runtime.graph import backend
from xladev.runtime.graph.ir import DataNode, Meta
from xladev.runtime.record.tensor import XlaTensor, new_tensor


def to_jax(t: torch.Tensor, what: str = "to_jax"):
    """The jax array holding an xla tensor's value.

    Args:
      t: an xla tensor.
      what: the caller's name, for errors and the read's cause.

    Returns:
      A `jax.Array` on the tensor's device.

    Raises:
      TypeError: `t` is not an xla tensor.
    """
    if not isinstance(t, XlaTensor):
        raise TypeError(f"{what} needs a tensor on an xla device, got one on {t.device}")
    if t._chain is not None:
        t = t.clone()  # a view's own values, as a base of their own
    with reading(what):
        return arrays_of([t], current_cause(what))[0]


def from_jax(array, device_index: int = 0) -> XlaTensor:
    """An xla tensor holding a jax array's value (the array itself when it is on that device already).

    Args:
      array: a `jax.Array` (or anything `jax.device_put` takes).
      device_index: the xla device's index.

    Returns:
      The tensor, with no pending work.
    """
    import jax

    device = backend.jax_devices()[backend.check_index(device_index)]
    placed = jax.device_put(array, device)
    meta = Meta(tuple(placed.shape), backend.to_torch_dtype(placed.dtype))
    return new_tensor(DataNode(placed, meta), device_index)
