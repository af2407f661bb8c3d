"""`torch_xla.distributed.fsdp.xla_flatten_params_wrapper` on xladev: the wrapper naming FSDP's parameters."""

from __future__ import annotations

from xladev.runtime.parallel.fsdp.shards import XlaFlattenParamsWrapper  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
