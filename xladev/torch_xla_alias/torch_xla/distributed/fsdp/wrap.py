"""`torch_xla.distributed.fsdp.wrap` on xladev: the auto-wrap policies."""

from __future__ import annotations

from xladev.runtime.parallel.fsdp.wrap import (  # noqa: F401
    always_wrap_policy, lambda_auto_wrap_policy, recursive_wrap, size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
