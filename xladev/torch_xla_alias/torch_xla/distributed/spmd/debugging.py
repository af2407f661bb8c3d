"""`torch_xla.distributed.spmd.debugging` on xladev: the sharding visualizers (rich), xladev's own."""

from __future__ import annotations

from xladev.spmd import visualize_sharding, visualize_tensor_sharding  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
