"""`torch_xla.experimental.distributed_checkpoint` on xladev: `xladev.distributed_checkpoint`.

`SPMDSavePlanner`/`SPMDLoadPlanner` for torch.distributed.checkpoint, `CheckpointManager` (a local directory;
checkpoints committed atomically; checkpoint on SIGTERM) and `prime_optimizer`.
"""

from __future__ import annotations

from xladev.distributed_checkpoint import (  # noqa: F401
    CheckpointManager, SPMDLoadPlanner, SPMDSavePlanner, prime_optimizer,
)

from torch_xla import _xladev

__all__ = ["CheckpointManager", "SPMDSavePlanner", "SPMDLoadPlanner", "prime_optimizer"]

__getattr__ = _xladev.module_getattr(__name__, submodules=("manager", "planners", "util", "_helpers"))
