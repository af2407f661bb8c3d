"""`torch_xla.experimental.distributed_checkpoint.manager` on xladev."""

from __future__ import annotations

from xladev.runtime.parallel.dist_checkpoint.manager import CheckpointManager  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
