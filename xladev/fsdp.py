"""FSDP and ZeRO-1 over the processes of a job: `xladev.fsdp` (PyTorch/XLA's `torch_xla.distributed.fsdp` and
`torch_xla.distributed.zero_redundancy_optimizer`).

    import xladev.fsdp as fsdp
    model = fsdp.FSDP(model, auto_wrap_policy=functools.partial(fsdp.transformer_auto_wrap_policy,
                                                                transformer_layer_cls={Block}))
    optimizer = torch.optim.AdamW(model.parameters())   # the shards: 1/N of the model per process

See docs/distributed.md.
"""

from __future__ import annotations

import xladev

xladev._load_runtime()

from xladev.runtime.parallel.fsdp.module import TrainingState, XlaFullyShardedDataParallel  # noqa: E402
from xladev.runtime.parallel.fsdp.state_dict_utils import (  # noqa: E402
    ShardedCheckpointError, consolidate_sharded_model_checkpoints, consolidate_sharded_state_dicts,
)
from xladev.runtime.parallel.fsdp.utils import checkpoint_module  # noqa: E402
from xladev.runtime.parallel.fsdp.wrap import (  # noqa: E402
    always_wrap_policy, lambda_auto_wrap_policy, recursive_wrap, size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from xladev.runtime.parallel.zero1 import ShardedStateError, ZeroRedundancyOptimizer  # noqa: E402

FSDP = XlaFullyShardedDataParallel

__all__ = ["FSDP", "ShardedCheckpointError", "ShardedStateError", "TrainingState", "XlaFullyShardedDataParallel",
           "ZeroRedundancyOptimizer", "always_wrap_policy", "checkpoint_module", "consolidate_sharded_model_checkpoints",
           "consolidate_sharded_state_dicts", "lambda_auto_wrap_policy", "recursive_wrap",
           "size_based_auto_wrap_policy", "transformer_auto_wrap_policy"]
