"""`torch_xla._XLAC` on xladev: the debug getters PyTorch/XLA's docs and tests call, and nothing else.

PyTorch/XLA's `_XLAC` is its C++ extension. xladev has no such module, but some of its functions are the
documented way to look at a graph (`_get_xla_tensors_text`, `_get_xla_tensors_hlo`,
`_get_xla_tensor_debug_info`), to ask the runtime a plain question (default device, RNG seed, memory,
cached graphs), or to write a manual-sharding region (`_spmd_full_to_shard_shape`, `_spmd_shard_to_full_shape`). Those map onto xladev's public API here. Every other name is refused with the public way to
do it, by the alias's table (`_xladev.UNSUPPORTED['torch_xla._XLAC']`).
"""

from __future__ import annotations

import torch

import xladev
import xladev.debug
from xladev.debug import metrics as _met

from torch_xla import _xladev


def _get_xla_tensors_text(tensors: list[torch.Tensor]) -> str:
    """IR text of the graph computing `tensors`: `xladev.debug.get_tensors_text`. Nothing runs."""
    return xladev.debug.get_tensors_text(tensors)


def _get_xla_tensors_hlo(tensors: list[torch.Tensor]) -> str:
    """HLO text of the graph computing `tensors`: `xladev.debug.get_tensors_hlo`. Nothing runs."""
    return xladev.debug.get_tensors_hlo(tensors)


def _get_xla_tensors_dot(tensors: list[torch.Tensor]) -> str:
    """Graphviz text of the graph computing `tensors`: `xladev.debug.get_tensors_dot`."""
    return xladev.debug.get_tensors_dot(tensors)


def _get_xla_tensor_debug_info(tensor: torch.Tensor) -> str:
    """What a tensor holds now (`XLAData: None` while pending): `xladev.debug.get_tensor_debug_info`."""
    return xladev.debug.get_tensor_debug_info(tensor)


def _get_xla_tensor_shape_type(tensor: torch.Tensor) -> str:
    """The tensor's XLA element type name (`f32`, `f16`, `bf16`, `s64`...)."""
    from xladev.runtime.api.introspect import element_type

    return element_type(tensor)


def _unsafe_buffer_pointer(tensor: torch.Tensor) -> int:
    """The address of the tensor's device buffer (a pending value is computed first)."""
    from xladev.runtime.api.introspect import buffer_pointer

    return buffer_pointer(tensor)


def _get_git_revs() -> dict[str, str]:
    """The versions this runtime is built from: `xla` names xladev and the jaxlib it compiles with, `torch` is
    torch's git revision (PyTorch/XLA gives the git revisions of its own and torch's checkouts)."""
    import jaxlib

    return {"xla": f"xladev {xladev.__version__}, jaxlib {jaxlib.__version__}", "torch": torch.version.git_version}


def _get_graph_hash(tensors: list[torch.Tensor]) -> str:
    """The hash of the graph computing `tensors`: `xladev.debug.get_graph_hash`."""
    return xladev.debug.get_graph_hash(tensors)


def _get_xla_sharding_spec(tensor: torch.Tensor) -> str:
    """The tensor's sharding as HLO sharding text, '' when it has none."""
    from xladev.runtime.distributed.spmd_sharding import get_sharding_spec

    return get_sharding_spec(tensor)


def _get_xla_sharding_type(tensor: torch.Tensor) -> int | None:
    """The tensor's `ShardingType` number, None when it has no sharding of its own."""
    from xladev.runtime.distributed.sharded_tensor import sharding_type

    kind = sharding_type(tensor)
    return None if kind is None else int(kind)


def _xla_get_default_device() -> str:
    """The default device's name, `xla:0`."""
    return str(xladev.device())


def _xla_real_devices(devices: list | None = None) -> list[str]:
    """The runtime names of this process's devices (`CPU:0`...)."""
    from torch_xla.core import xla_model

    return xla_model.xla_real_devices(devices)


def _xla_get_rng_seed(device: str = "") -> int:
    """The device RNG's state as an integer: `xm.get_rng_state`."""
    from torch_xla.core import xla_model

    return xla_model.get_rng_state(device or None)


def _xla_set_rng_seed(seed: int, device: str = "") -> None:
    """Sets the device RNG's state: `xm.set_rng_state`."""
    from torch_xla.core import xla_model

    xla_model.set_rng_state(seed, device or None)


def _xla_memory_info(device: str = "") -> dict:
    """Device memory in bytes: `xm.get_memory_info`."""
    return xladev.debug.memory_info(device or None)


def _xla_get_num_cached_compilation_graph() -> int:
    """How many compiled graphs the in-memory cache holds."""
    return xladev.debug.num_cached_graphs()


def _get_executed_fallback_ops() -> list[str]:
    """The aten ops that ran on the CPU since the counters were last cleared: `met.executed_fallback_ops`."""
    return _met.executed_fallback_ops()


def _set_allow_execution(allowed: bool) -> None:
    """Forbids (False) or allows graph executions: `xladev.debug.allow_execution`."""
    xladev.debug.allow_execution(allowed)


def _xla_set_mat_mul_precision(precision: str) -> None:
    """Records the matmul precision level: `torch_xla.backends.set_mat_mul_precision`."""
    from torch_xla import backends

    backends.set_mat_mul_precision(precision)


def _xla_get_mat_mul_precision() -> str:
    """The matmul precision level last set: `torch_xla.backends.get_mat_mul_precision`."""
    from torch_xla import backends

    return backends.get_mat_mul_precision()


def _xla_tensors_from_aten(tensors: list[torch.Tensor], devices: list[str], shardings: list | None = None
                           ) -> list[torch.Tensor]:
    """Copies of CPU tensors on the xla devices named, each a new leaf keeping `requires_grad`.

    Raises:
      ValueError: `shardings` were given (mark the copies with `xs.mark_sharding` instead), or the lists differ
        in length.
    """
    if shardings and any(s is not None for s in shardings):
        raise ValueError("_xla_tensors_from_aten(shardings=...) is not supported by xladev: copy the tensors, then "
                         "xs.mark_sharding them")
    if len(tensors) != len(devices):
        raise ValueError(f"_xla_tensors_from_aten: {len(tensors)} tensors for {len(devices)} devices")
    from torch_xla.core import xla_model

    return [xla_model._tensors_to_device([t], d)[0] for t, d in zip(tensors, devices)]


def _get_xla_tensor_dimension_size(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """The size of dimension `dim` as an int32 tensor on the tensor's device (shapes are static here)."""
    return torch.tensor(tensor.size(dim), dtype=torch.int32, device=tensor.device)


def _xla_sync_multi(tensors: list[torch.Tensor], devices: list | None = None, wait: bool = True,
                    sync_xla_data: bool = True) -> None:
    """Computes pending tensors. xladev syncs everything pending, which includes `tensors`; the graph then
    holds the other pending tensors too (PyTorch/XLA's graph holds only these)."""
    xladev.sync(wait=wait)


def _get_local_shard_replica_and_indices(tensors: list[torch.Tensor]) -> list[list[tuple]]:
    """Per tensor, each device's (replica id, indices) of its piece, in device order; indices are a slice per
    dimension, or Ellipsis when replicated. No data is copied."""
    from xladev.runtime.distributed.sharded_tensor import shard_places

    return [[(replica, indices) for _, replica, indices in shard_places(t)] for t in tensors]


def _global_tensor_from_cpu_shards(shards: list[torch.Tensor], op_sharding, global_shape=None) -> torch.Tensor:
    """The device tensor made of these CPU pieces, one per device in device order, split as `op_sharding`
    (`mesh.get_op_sharding(partition_spec)`) says (`xladev.runtime.distributed.cpu_shards`)."""
    from xladev.runtime.distributed.cpu_shards import global_tensor_from_cpu_shards

    return global_tensor_from_cpu_shards(shards, op_sharding, global_shape)


def _get_local_shards(tensors: list[torch.Tensor]) -> list[list[tuple[torch.Tensor, str]]]:
    """Per tensor, each device's piece copied to the CPU with its device name (`xla:N`), in device order."""
    from xladev.runtime.distributed.sharded_tensor import XLAShardedTensor, unwrap

    return [[(s.data, s.shard_device) for s in XLAShardedTensor(unwrap(t)).local_shards] for t in tensors]


def _xla_get_cpu_tensors(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """CPU copies of device tensors, what is pending computed in one graph."""
    from xladev.runtime.execute.transfers import download

    return download(list(tensors), "_xla_get_cpu_tensors")


def _ensure_xla_coordinator_initialized(global_rank: int, world_size: int, master_addr: str = "",
                                        port: str | None = None) -> None:
    """Checks that this process is rank `global_rank` of `world_size`: xladev starts the job's coordinator
    (jax's) itself when the job starts; a lone process needs none.

    Raises:
      ValueError: the rank or world size differ from the job's.
    """
    from xladev.runtime.graph import world

    placement = world.placement()
    if (global_rank, world_size) != (placement.rank, placement.world_size):
        raise ValueError(f"_ensure_xla_coordinator_initialized: this process is rank {placement.rank} of "
                         f"{placement.world_size} (RANK, WORLD_SIZE), not rank {global_rank} of {world_size}")
    xladev.device()  # a process of a job joins it, and its coordinator, on first use of the device


def _activate_preemption_sync_manager() -> None:
    """Starts preemption detection: a SIGTERM is held back, and `_sync_point_reached` turns true at one step."""
    from xladev.runtime.parallel.dist_checkpoint import preemption

    preemption.activate()


def _deactivate_preemption_sync_manager() -> None:
    """Stops preemption detection; SIGTERM's previous handler is back."""
    from xladev.runtime.parallel.dist_checkpoint import preemption

    preemption.deactivate()


def _sync_point_reached(step: int) -> bool:
    """Whether `step` is the step every process checkpoints at after a preemption notice (SIGTERM)."""
    from xladev.runtime.parallel.dist_checkpoint import preemption

    return preemption.reached_sync_point(step)


def _spmd_full_to_shard_shape(tensor: torch.Tensor) -> torch.Tensor:
    """Starts a manual-sharding region: each device's piece of `tensor`, split as its own mark says
    (`xs.enable_manual_sharding` without the mark)."""
    from xladev.runtime.distributed.manual_sharding import full_to_shard_shape

    return full_to_shard_shape(tensor)


def _spmd_shard_to_full_shape(tensor: torch.Tensor, op_sharding, full_shape, dtype=None) -> torch.Tensor:
    """Ends a manual-sharding region: the pieces put back together as `op_sharding` (`mesh.get_op_sharding(spec)`)
    says, into `full_shape` (`xs.disable_manual_sharding`). `dtype` is the pieces' own."""
    from xladev.runtime.distributed.manual_sharding import shard_to_full_shape

    return shard_to_full_shape(tensor, op_sharding, full_shape)


__getattr__ = _xladev.module_getattr(__name__)
