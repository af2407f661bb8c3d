"""SPMD sharding over this process's devices: `xladev.spmd` (PyTorch/XLA's `torch_xla.distributed.spmd`).

    import xladev.spmd as xs
    xs.use_spmd()
    mesh = xs.Mesh(range(4), (2, 2), ("data", "model"))
    xst = xs.mark_sharding(x, mesh, ("data", None))   # x is sharded; xst wraps it (XLAShardedTensor)
    xs.visualize_tensor_sharding(x)

See `xladev.runtime.distributed.spmd_sharding` for what a mark does, and docs/distributed.md.
"""

from __future__ import annotations

import xladev

xladev._load_runtime()

from xladev.debug.sharding_view import visualize_sharding, visualize_tensor_sharding  # noqa: E402
from xladev.runtime.distributed.sharded_tensor import (  # noqa: E402
    ShardingType, XLAShard, XLAShardedTensor, annotate_custom_sharding, clear_sharding, mark_sharding, sharding_type,
)
from xladev.runtime.distributed.input_sharding import ShardingSpec  # noqa: E402
from xladev.runtime.distributed.manual_sharding import (  # noqa: E402
    ManualShardingError, disable_manual_sharding, enable_manual_sharding,
)
from xladev.runtime.distributed.spmd_autograd import (  # noqa: E402
    XLAPatchedLinear, mark_sharding_with_gradients, xla_patched_nn_linear_forward,
)
from xladev.runtime.distributed.spmd_sharding import (  # noqa: E402
    HybridMesh, Mesh, get_sharding_spec, is_spmd, use_spmd,
)

__all__ = ["HybridMesh", "ManualShardingError", "Mesh", "ShardingSpec", "ShardingType", "XLAPatchedLinear", "XLAShard",
           "XLAShardedTensor", "annotate_custom_sharding", "clear_sharding", "disable_manual_sharding", "enable_manual_sharding",
           "get_sharding_spec", "is_spmd", "mark_sharding", "mark_sharding_with_gradients", "sharding_type", "use_spmd",
           "visualize_sharding", "visualize_tensor_sharding", "xla_patched_nn_linear_forward"]
