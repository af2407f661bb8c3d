"""`SPMDSavePlanner` and `SPMDLoadPlanner`: torch.distributed.checkpoint's planners for state dicts holding
sharded xla tensors (PyTorch/XLA's `torch_xla.experimental.distributed_checkpoint`).

    dist_cp.save(state_dict, storage_writer=dist_cp.FileSystemWriter(path), planner=SPMDSavePlanner())
    dist_cp.load(state_dict, storage_reader=dist_cp.FileSystemReader(path), planner=SPMDLoadPlanner())

Saving writes each distinct piece of a sharded tensor once, as a chunk at its place in the whole tensor (a
replicated copy of a piece is not written again); every other value goes through torch's default planning.
Loading reads, for every device's piece of each sharded tensor of the state dict, the parts of the saved
chunks that overlap it, whatever sharding (or none) wrote them, and writes the pieces into the device
buffers in place (`load_local_shards_`). So a checkpoint loads onto another mesh, another sharding or none.

Before anything is read, the load checks that the checkpoint fits: every value present with the same shape,
and written by a job of as many processes as the one loading it (see `check_world_size`). A misfit is a
`CheckpointError` naming each value and what differs.
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import Any

import torch
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint._dedup_save_plans import dedup_save_plans
from torch.distributed.checkpoint.default_planner import (
    create_default_global_load_plan, create_default_global_save_plan, create_default_local_load_plan,
    create_default_local_save_plan,
)
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata, Metadata, MetadataIndex, TensorProperties, TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadPlan, LoadPlanner, ReadItem, SavePlan, SavePlanner, TensorWriteData, WriteItem, WriteItemType,
)
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list
from torch.distributed.checkpoint.utils import find_state_dict_object

from xladev.runtime.parallel.dist_checkpoint.state import (
    CheckpointError, CpuShards, chunk, device_chunks, distinct_chunks, download_all, first_replicas,
    is_sharded, set_element, split,
)
from xladev.runtime.distributed.sharded_tensor import XLAShardedTensor, unwrap
from xladev.runtime.record.tensor import XlaTensor

# In a checkpoint's `Metadata.planner_data`, besides each value's path in the nested state dict: how many
# processes wrote it. torch's own loaders read only the paths of the values the checkpoint holds.
WORLD_SIZE_KEY = "xladev.world_size"
# The most misfits one error lists.
_MAX_LISTED = 12


class SPMDSavePlanner(SavePlanner):
    """Plans a checkpoint of a state dict with sharded xla tensors (or `CpuShards`): each distinct piece once.

    Attributes (PyTorch/XLA's):
      is_coordinator: whether this process writes the checkpoint's metadata.
      mappings: each flat key's path in the nested state dict.
      sharded_state_dict: the sharded values, by flat key.
      unsharded_state_dict: every other value, by flat key.
    """

    def __init__(self) -> None:
        self.is_coordinator = False
        self.mappings: dict | None = None
        self.sharded_state_dict: dict | None = None
        self.unsharded_state_dict: dict | None = None
        # A sharded value's CPU pieces, copied on the first write of one of them and each dropped once written.
        self._local_shards: dict[str, list] = {}

    def set_up_planner(self, state_dict: dict, storage_meta=None, is_coordinator: bool = False) -> None:
        """Takes the state dict to save (torch's planner protocol; PyTorch/XLA's `(state_dict, is_coordinator)`
        works too). Pending device values are computed now, in one graph."""
        if isinstance(storage_meta, bool):  # PyTorch/XLA's positional form
            storage_meta, is_coordinator = None, storage_meta
        self.is_coordinator = is_coordinator
        self.sharded_state_dict, self.unsharded_state_dict, self.mappings = split(state_dict)
        _compute_pending(self.sharded_state_dict, self.unsharded_state_dict)

    def create_local_plan(self) -> SavePlan:
        plan = create_default_local_save_plan(self.unsharded_state_dict, self.is_coordinator)
        items = [item for fqn, value in self.sharded_state_dict.items() for item in _write_items(fqn, value)]
        return dataclasses.replace(plan, items=plan.items + items, planner_data=self.mappings)

    def create_global_plan(self, all_plans: list[SavePlan]) -> tuple[list[SavePlan], Metadata]:
        # A value every process holds (a replicated piece, a plain tensor) is written by one of them.
        plans, metadata = create_default_global_save_plan(dedup_save_plans(all_plans), rewrite_index_hints=False)
        paths: dict = {}
        for plan in plans:
            paths.update(plan.planner_data or {})
        paths[WORLD_SIZE_KEY] = len(all_plans)
        return plans, dataclasses.replace(metadata, planner_data=paths)

    def finish_plan(self, new_plan: SavePlan) -> SavePlan:
        return new_plan

    def resolve_data(self, write_item: WriteItem) -> torch.Tensor | io.BytesIO:
        return self.transform_object(write_item, self.lookup_object(write_item.index))

    def lookup_object(self, index: MetadataIndex) -> Any:
        """The value (or the CPU piece of a sharded value) that `index` names."""
        if index.fqn in self.unsharded_state_dict:
            return self.unsharded_state_dict[index.fqn]
        pieces = self._local_shards.get(index.fqn)
        if pieces is None:
            value = self.sharded_state_dict[index.fqn]
            pieces = list(value.shards) if isinstance(value, CpuShards) else first_replicas(value)
            self._local_shards[index.fqn] = pieces
        piece, pieces[index.index] = pieces[index.index], None  # each piece is written once: drop the copy
        if piece is None:
            raise RuntimeError(f"the piece {index.index} of {index.fqn!r} was asked for twice")
        return piece.unpadded_data

    def transform_object(self, write_item: WriteItem, obj: Any):
        if write_item.type == WriteItemType.BYTE_IO:
            buffer = io.BytesIO()
            torch.save(obj, buffer)
            return buffer
        return obj


class SPMDLoadPlanner(LoadPlanner):
    """Plans loading a checkpoint into a state dict of xla tensors, sharded or not, in place.

    The state dict's tensors must already be on the device with the sharding wanted; the checkpoint may have
    been written with any other sharding.

    Attributes (PyTorch/XLA's):
      metadata: the checkpoint's metadata.
      is_coordinator: whether this process coordinates the load.
      original_state_dict: the state dict given, into which Python objects are loaded.
      mappings: each flat key's path in the nested state dict.
      sharded_state_dict: the sharded tensors (`XLAShardedTensor`), by flat key.
      unsharded_state_dict: every other value, by flat key.
    """

    def __init__(self) -> None:
        self.metadata: Metadata | None = None
        self.is_coordinator = False
        self.original_state_dict: dict | None = None
        self.mappings: dict | None = None
        self.sharded_state_dict: dict | None = None
        self.unsharded_state_dict: dict | None = None
        # A sharded tensor's CPU pieces while they are read into, and how many elements are still to come.
        self._local_shards: dict[str, list] = {}
        self._pending_elements: dict[str, int] = {}

    def set_up_planner(self, state_dict: dict, metadata: Metadata | None = None, is_coordinator: bool = False) -> None:
        """Takes the state dict to load into and the checkpoint's metadata (torch's planner protocol).

        Raises:
          CheckpointError: the checkpoint lacks a value of the state dict or holds it with another shape, or
            the state dict holds `CpuShards` (load into device tensors).
        """
        self.metadata = metadata
        self.is_coordinator = is_coordinator
        self.original_state_dict = state_dict
        self.sharded_state_dict, self.unsharded_state_dict, self.mappings = split(
            state_dict, sharded_test=lambda v: isinstance(v, XLAShardedTensor) and is_sharded(v))
        cpu = [k for k, v in self.unsharded_state_dict.items() if isinstance(v, CpuShards)]
        if cpu:
            raise CheckpointError(f"SPMDLoadPlanner loads into device tensors, not into CPU copies of shards "
                                  f"(CpuShards at {', '.join(cpu[:_MAX_LISTED])})")
        check_fits({**self.sharded_state_dict, **self.unsharded_state_dict}, metadata)
        _compute_pending(self.sharded_state_dict, self.unsharded_state_dict)

    def create_local_plan(self) -> LoadPlan:
        """Read items for the plain values, and for each device's piece of the sharded ones.

        Raises:
          CheckpointError: the checkpoint's chunks do not cover a piece (a checkpoint missing some of its data).
        """
        plan = create_default_local_load_plan(self.unsharded_state_dict, self.metadata)
        for fqn, t in self.sharded_state_dict.items():
            chunks = device_chunks(t)
            reads = create_read_items_for_chunk_list(fqn, self.metadata.state_dict_metadata[fqn], chunks)
            covered = sum(math.prod(r.lengths) for r in reads)
            wanted = sum(math.prod(c.sizes) for c in chunks)
            if covered != wanted:
                raise CheckpointError(f"{fqn}: the checkpoint's chunks hold {covered} of the {wanted} elements this "
                                      "process's devices need: the checkpoint is missing some of its data")
            plan.items.extend(reads)
        return plan

    def create_global_plan(self, global_plan: list[LoadPlan]) -> list[LoadPlan]:
        """Torch's default global plan, once the checkpoint's world size is checked (on the coordinator).

        Raises:
          CheckpointError: the checkpoint was written by a job of another number of processes.
        """
        check_world_size(self.metadata, len(global_plan))
        return create_default_global_load_plan(global_plan)

    def finish_plan(self, central_plan: LoadPlan) -> LoadPlan:
        return central_plan

    def load_bytes(self, read_item: ReadItem, value: io.BytesIO) -> None:
        set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn],
                    torch.load(value, weights_only=False))

    def resolve_tensor(self, read_item: ReadItem) -> torch.Tensor:
        return self.transform_tensor(read_item, self.lookup_tensor(read_item.dest_index))

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        """The tensor `index` names: a plain value, or the CPU copy of a device's piece of a sharded one."""
        if index.fqn in self.unsharded_state_dict:
            return find_state_dict_object(self.unsharded_state_dict, index)
        pieces = self._local_shards.get(index.fqn)
        if pieces is None:
            pieces = self.sharded_state_dict[index.fqn].local_shards
            self._local_shards[index.fqn] = pieces
            self._pending_elements[index.fqn] = sum(p.unpadded_data.numel() for p in pieces)  # padding is not read
        return pieces[index.index].data

    def transform_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> torch.Tensor:
        """The part of `tensor` that `read_item` fills (the storage reader copies into it)."""
        return narrow_tensor_by_index(tensor, read_item.dest_offsets, read_item.lengths)

    def commit_tensor(self, read_item: ReadItem, tensor: torch.Tensor) -> None:
        """Counts what was read into a sharded tensor's pieces; once all is read, writes them to the devices."""
        fqn = read_item.dest_index.fqn
        if fqn not in self.sharded_state_dict:
            return  # a plain tensor was copied into in place
        self._pending_elements[fqn] -= math.prod(read_item.lengths)
        if self._pending_elements[fqn] == 0:
            self.sharded_state_dict[fqn].load_local_shards_(self._local_shards.pop(fqn))


def check_fits(flat: dict, metadata: Metadata) -> None:
    """Checks that the checkpoint holds every value of the (flat) state dict, with the same shape.

    Raises:
      CheckpointError: naming each value that is missing or differs, and how.
    """
    saved = metadata.state_dict_metadata
    problems = []
    for fqn, value in flat.items():
        md = saved.get(fqn)
        tensor = isinstance(value, torch.Tensor)
        if md is None:
            problems.append(f"{fqn}: not in the checkpoint")
        elif tensor and isinstance(md, BytesStorageMetadata):
            problems.append(f"{fqn}: a tensor of shape {tuple(value.shape)} here, a Python object in the checkpoint")
        elif isinstance(md, TensorStorageMetadata) and not tensor:
            problems.append(f"{fqn}: a tensor of shape {tuple(md.size)} in the checkpoint, a "
                            f"{type(value).__name__} here (load into a tensor of that shape)")
        elif tensor and tuple(md.size) != tuple(value.shape):
            problems.append(f"{fqn}: shape {tuple(md.size)} in the checkpoint, {tuple(value.shape)} here")
    if problems:
        listed = problems[:_MAX_LISTED]
        more = f"\n  ... and {len(problems) - len(listed)} more" if len(problems) > len(listed) else ""
        missing = [p for p in problems if p.endswith("not in the checkpoint")]
        has = ""
        if missing:
            names = [k for k in saved if k not in flat][:_MAX_LISTED]
            has = f"\nthe checkpoint holds, besides: {', '.join(names) if names else '(nothing else)'}"
        raise CheckpointError("the checkpoint does not fit the state dict:\n  " + "\n  ".join(listed) + more + has)


def check_world_size(metadata: Metadata, world_size: int) -> None:
    """Checks that a job of `world_size` processes may load a checkpoint.

    A value each process saved under the same name (its own piece of optimizer state, its data position) is
    written once, by one process, like a value every process holds alike. So a checkpoint is loaded by a job
    of as many processes as wrote it: with another count, some process would get another's values. Shardings
    over a process's devices may differ freely.

    Raises:
      CheckpointError: the counts differ.
    """
    written_by = (metadata.planner_data or {}).get(WORLD_SIZE_KEY) if isinstance(metadata.planner_data, dict) else None
    if written_by is not None and written_by != world_size:
        raise CheckpointError(
            f"the checkpoint was written by a job of {_processes(written_by)} and is loaded by a job of "
            f"{_processes(world_size)}: a value each process saved under one name was written once, by one of "
            f"them, so a job of another size cannot get its own values back. Load it with {_processes(written_by)} "
            "(each may shard its tensors over its devices as it likes).")


def _processes(n: int) -> str:
    return f"{n} process" if n == 1 else f"{n} processes"


def _write_items(fqn: str, value) -> list[WriteItem]:
    """A shard write item for each distinct piece of a sharded value, in the order its pieces are copied."""
    if isinstance(value, CpuShards):
        chunks = [chunk(s.indices) for s in value.shards]
        dtype, size = value.shards[0].data.dtype, torch.Size(value.global_shape)
    else:
        chunks, dtype, size = distinct_chunks(value), value.dtype, value.size()
    properties = TensorProperties(dtype=dtype)
    return [WriteItem(index=MetadataIndex(fqn, c.offsets, i), type=WriteItemType.SHARD,
                      tensor_data=TensorWriteData(chunk=c, properties=properties, size=size))
            for i, c in enumerate(chunks)]


def _compute_pending(*flat_dicts: dict) -> None:
    """Computes every pending device value of the state dict in one graph, before pieces are read one by one."""
    tensors = [unwrap(v) for d in flat_dicts for v in d.values() if isinstance(unwrap(v), XlaTensor)]
    if tensors:
        download_all(tensors)
