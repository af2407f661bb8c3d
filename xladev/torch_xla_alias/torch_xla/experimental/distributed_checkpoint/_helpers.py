"""`torch_xla.experimental.distributed_checkpoint._helpers` on xladev: the helpers PyTorch/XLA's tests import."""

from __future__ import annotations

from torch.distributed.checkpoint._traverse import set_element  # noqa: F401
from torch.distributed._shard._utils import narrow_tensor_by_index  # noqa: F401

from xladev.runtime.parallel.dist_checkpoint.state import CpuShards as _CpuShards  # noqa: F401
from xladev.runtime.parallel.dist_checkpoint.state import flatten as flatten_state_dict  # noqa: F401
from xladev.runtime.parallel.dist_checkpoint.state import is_sharded as _is_sharded_tensor  # noqa: F401
from xladev.runtime.parallel.dist_checkpoint.state import sharded_cpu_state_dict as _sharded_cpu_state_dict  # noqa: F401
from xladev.runtime.distributed.sharded_tensor import unwrap as _unwrap_xla_sharded_tensor  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
