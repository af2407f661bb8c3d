"""`torch_xla.distributed.spmd.xla_sharding` on xladev: the module PyTorch/XLA defines `xs`'s names in."""

from __future__ import annotations

from torch_xla.distributed.spmd import *  # noqa: F401,F403
from torch_xla.distributed.spmd import (  # noqa: F401
    HybridMesh, Mesh, ShardingSpec, ShardingType, XLAPatchedLinear, clear_sharding, get_1d_mesh, get_global_mesh, mark_sharding,
    mark_sharding_with_gradients, set_global_mesh, unwrap_sharded_tensor, wrap_as_sharded_tensor,
    xla_patched_nn_linear_forward,
)
from xladev.runtime.distributed.spmd_autograd import (  # noqa: F401
    MarkShardingFunction, apply_backward_optimization_barrier,
)

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
