"""`torch_xla.distributed.fsdp.utils` on xladev: `checkpoint_module`."""

from __future__ import annotations

from xladev.runtime.parallel.fsdp.utils import checkpoint_module  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
