"""`torch_xla.distributed.fsdp.state_dict_utils` on xladev: consolidating sharded checkpoints."""

from __future__ import annotations

from xladev.runtime.parallel.fsdp.state_dict_utils import (  # noqa: F401
    consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts,
)

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
