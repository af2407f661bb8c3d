"""FSDP over the processes of a job (PyTorch/XLA's `torch_xla.distributed.fsdp`): each process keeps 1/N of each
parameter, gathers whole parameters for the forward and the backward, and reduce-scatters the gradients, all
recorded into the step's graph as xladev's collectives.

- `shards.py`: a parameter's shard and the full tensor it stands for (`FullParam`), the module wrapper that
  names them as PyTorch/XLA does (`XlaFlattenParamsWrapper`);
- `module.py`: `XlaFullyShardedDataParallel`;
- `wrap.py`: the auto-wrap policies; `utils.py`: `checkpoint_module`;
- `state_dict_utils.py`: shard metadata and the consolidation of sharded checkpoints.
"""
