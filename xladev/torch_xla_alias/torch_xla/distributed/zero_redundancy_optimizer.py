"""`torch_xla.distributed.zero_redundancy_optimizer` on xladev: ZeRO-1 (`xladev.runtime.parallel.zero1`)."""

from __future__ import annotations

from xladev.runtime.parallel.zero1 import ZeroRedundancyOptimizer  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
