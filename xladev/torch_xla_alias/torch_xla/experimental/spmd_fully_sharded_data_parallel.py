"""`torch_xla.experimental.spmd_fully_sharded_data_parallel` on xladev: FSDPv2 (`xladev.runtime.parallel.spmd_fsdp`)."""

from __future__ import annotations

from xladev.runtime.parallel.spmd_fsdp import SpmdFullyShardedDataParallel  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
