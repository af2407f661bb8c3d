"""`torch_xla.distributed.fsdp` on xladev: FSDP over the processes of a job (`xladev.fsdp`)."""

from __future__ import annotations

from xladev.fsdp import (  # noqa: F401
    XlaFullyShardedDataParallel, checkpoint_module, consolidate_sharded_model_checkpoints,
    consolidate_sharded_state_dicts,
)

from torch_xla import _xladev

__all__ = ["XlaFullyShardedDataParallel", "consolidate_sharded_state_dicts", "consolidate_sharded_model_checkpoints",
           "checkpoint_module"]

__getattr__ = _xladev.module_getattr(__name__, submodules=(
    "consolidate_sharded_ckpts", "state_dict_utils", "utils", "wrap", "xla_flatten_params_wrapper",
    "xla_fully_sharded_data_parallel"))
