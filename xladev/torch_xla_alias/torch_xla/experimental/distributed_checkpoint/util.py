"""`torch_xla.experimental.distributed_checkpoint.util` on xladev."""

from __future__ import annotations

from xladev.runtime.parallel.dist_checkpoint.state import prime_optimizer  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
