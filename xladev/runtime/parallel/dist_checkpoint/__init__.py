"""Distributed checkpoints of sharded state (PyTorch/XLA's `torch_xla.experimental.distributed_checkpoint`).

- `planners`: `SPMDSavePlanner` and `SPMDLoadPlanner` for `torch.distributed.checkpoint.save`/`load`.
- `state`: which values are sharded, their pieces, CPU copies (`sharded_cpu_state_dict`), `CheckpointError`.
- `manager`: `CheckpointManager` (steps, keep-last-N, asynchronous saves, checkpoint on preemption).
- `commit`: a checkpoint directory written under a temporary name and committed by an atomic rename.
- `preemption`: SIGTERM as a preemption notice, and the step at which every process checkpoints.
"""
