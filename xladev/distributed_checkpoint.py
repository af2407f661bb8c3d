"""Distributed checkpoints of sharded state: `xladev.distributed_checkpoint` (PyTorch/XLA's
`torch_xla.experimental.distributed_checkpoint`).

    import torch.distributed.checkpoint as dist_cp
    import xladev.distributed_checkpoint as xc

    dist_cp.save(state_dict, storage_writer=dist_cp.FileSystemWriter(path), planner=xc.SPMDSavePlanner())
    dist_cp.load(state_dict, storage_reader=dist_cp.FileSystemReader(path), planner=xc.SPMDLoadPlanner())

    mgr = xc.CheckpointManager(path, save_interval=100, max_to_keep=3)   # steps, async saves, preemption

See `xladev.runtime.parallel.dist_checkpoint` and docs/distributed.md.
"""

from __future__ import annotations

import xladev

xladev._load_runtime()

from xladev.runtime.parallel.dist_checkpoint.manager import CheckpointManager  # noqa: E402
from xladev.runtime.parallel.dist_checkpoint.planners import SPMDLoadPlanner, SPMDSavePlanner  # noqa: E402
from xladev.runtime.parallel.dist_checkpoint.preemption import PreemptionError  # noqa: E402
from xladev.runtime.parallel.dist_checkpoint.state import (  # noqa: E402
    CheckpointError, CpuShards, prime_optimizer, sharded_cpu_state_dict,
)

__all__ = ["CheckpointError", "CheckpointManager", "CpuShards", "PreemptionError", "SPMDLoadPlanner",
           "SPMDSavePlanner", "prime_optimizer", "sharded_cpu_state_dict"]
