"""`torch_xla.distributed.spmd` (`xs`) on xladev: `xladev.spmd` under PyTorch/XLA's names.

`mark_sharding` shards the tensor in place and returns it wrapped in an `XLAShardedTensor`, as PyTorch/XLA does.
"""

from __future__ import annotations

import xladev.spmd as _spmd
from xladev.spmd import (  # noqa: F401
    HybridMesh, Mesh, ShardingSpec, ShardingType, XLAPatchedLinear, XLAShard, XLAShardedTensor, annotate_custom_sharding,
    clear_sharding, mark_sharding,
    mark_sharding_with_gradients, xla_patched_nn_linear_forward, enable_manual_sharding, disable_manual_sharding,
)
from xladev.runtime.distributed.sharded_tensor import unwrap as unwrap_sharded_tensor  # noqa: F401
from xladev.runtime.distributed.manual_sharding import mark_manual as _mark_manual_sharding  # noqa: F401
from xladev.runtime.graph.spmd_mesh import get_global_mesh, set_global_mesh  # noqa: F401
from xladev.runtime.distributed.sharded_tensor import wrap as wrap_as_sharded_tensor  # noqa: F401
from xladev.runtime.distributed.sharded_tensor import wrap_if_sharded  # noqa: F401

from xladev.runtime.distributed.dtensor_bridge import (  # noqa: F401  (torch's distribute_tensor/module on xla)
    auto_policy, convert_to_xla_mesh, convert_to_xla_partition_spec, xla_distribute_module, xla_distribute_tensor,
)

from torch_xla import _xladev


def get_1d_mesh(axis_name: str | None = None) -> Mesh:
    """A mesh of every device along one axis (named `axis_name`, or numbered when None)."""
    import xladev

    count = xladev.device_count()
    return Mesh(range(count), (count,), (axis_name,) if axis_name else None)


def is_spmd() -> bool:
    """Whether SPMD mode is on (`torch_xla.runtime.use_spmd()`)."""
    return _spmd.is_spmd()


__getattr__ = _xladev.module_getattr(__name__, submodules=("api", "debugging", "xla_sharding"))
