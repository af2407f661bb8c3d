"""`torch_xla.distributed.spmd.api` on xladev: DTensor over SPMD (`xladev.runtime.distributed.dtensor_bridge`)."""

from __future__ import annotations

from xladev.runtime.distributed.dtensor_bridge import (  # noqa: F401
    auto_policy, convert_to_xla_mesh, convert_to_xla_partition_spec, xla_distribute_module, xla_distribute_tensor,
)

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
