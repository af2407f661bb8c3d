"""`torch_xla.distributed.fsdp.xla_fully_sharded_data_parallel` on xladev (`xladev.runtime.parallel.fsdp.module`)."""

from __future__ import annotations

from xladev.runtime.parallel.fsdp.module import FLOAT_DTYPES, TrainingState, XlaFullyShardedDataParallel  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
