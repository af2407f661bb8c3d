"""Consolidating sharded FSDP checkpoints into the unwrapped model's state_dict (PyTorch/XLA's
`consolidate_sharded_state_dicts` and `consolidate_sharded_model_checkpoints`, same file format).

Each rank saves `{'model': model.state_dict(), 'shard_metadata': model.get_shard_metadata(), ...}`. A shard's
key holds a part starting `_fsdp_shard` (the FSDP module's own parameter); the metadata gives, per FSDP module,
each shard's original name and size, and for flattened groups (`flat_param_<i>`) their parameters' names and
shapes. Buffers are taken from rank 0.
"""

from __future__ import annotations

import glob
import math
from collections import OrderedDict

import torch

from xladev.errors import XladevError


class ShardedCheckpointError(XladevError, ValueError):
    """Sharded checkpoints that do not make one model: missing ranks, another world size, foreign files."""


def _shard_full(name: str, shards: list[torch.Tensor], metadata: dict) -> tuple[torch.Tensor, str]:
    """The full parameter (and its full name) from every rank's shard of state_dict entry `name`."""
    parts = name.split(".")
    at = next(i for i, part in enumerate(parts) if part.startswith("_fsdp_shard"))
    prefix, key = ".".join(parts[:at]), ".".join(parts[at:])
    try:
        info = metadata["shard_info"][prefix][key]
    except KeyError:
        raise ShardedCheckpointError(f"{name}: the shard metadata has no entry for it (shard_info[{prefix!r}]"
                                     f"[{key!r}]): the metadata comes from another model") from None
    size = torch.Size(info["_orig_size"])
    whole = torch.cat(shards, dim=0)
    if whole.dim() == 1 and whole.numel() >= math.prod(size):
        full = whole[:math.prod(size)].view(size)  # flattened and padded
    else:
        full = whole[:size[0]]  # cut along dimension 0 (shard_param_on_dim_0)
    if tuple(full.shape) != tuple(size):
        raise ShardedCheckpointError(f"{name}: the shards make a tensor of {list(whole.shape)}, which cannot hold "
                                     f"the parameter's {list(size)}")
    return full, f"{prefix}.{info['_orig_name']}" if prefix else info["_orig_name"]


def consolidate_sharded_state_dicts(state_dict_list: list[dict], shard_metadata: dict) -> "OrderedDict[str, torch.Tensor]":
    """The unwrapped model's state_dict from every rank's FSDP state_dict.

    Args:
      state_dict_list: each rank's `model.state_dict()`, in rank order.
      shard_metadata: `model.get_shard_metadata()` of any rank.

    Returns:
      The full state_dict, under the names of the module FSDP wrapped (buffers from rank 0, in their original dtype).

    Raises:
      ShardedCheckpointError (a ValueError): the list's length is not the metadata's world size, a shard is missing
        from a rank's state_dict, or the metadata does not describe these shards.
    """
    world = shard_metadata.get("world_size")
    if world != len(state_dict_list):
        raise ShardedCheckpointError(f"{len(state_dict_list)} state_dicts given, but the shard metadata says the "
                                     f"model was sharded over {world} processes: pass every rank's, in rank order")
    buffer_info = shard_metadata.get("buffer_info", {})
    full: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name, value in state_dict_list[0].items():
        if any(part.startswith("_fsdp_shard") for part in name.split(".")):
            shards = []
            for rank, state_dict in enumerate(state_dict_list):
                if name not in state_dict:
                    raise ShardedCheckpointError(f"rank {rank}'s state_dict has no {name}: the checkpoints come from "
                                                 "different models")
                shards.append(state_dict[name])
            tensor, full_name = _shard_full(name, shards, shard_metadata)
        else:
            tensor, full_name = value, name
            if name in buffer_info:
                tensor = tensor.to(buffer_info[name]["_orig_dtype"])
        full[full_name] = tensor
    flatten_info = shard_metadata.get("flatten_info", {})
    for name in [n for n in full if "_fsdp_wrapped_module.flat_param_" in n]:
        flat = full.pop(name)
        if name not in flatten_info:
            raise ShardedCheckpointError(f"{name}: the shard metadata has no flatten_info for it")
        names, shapes, numels = flatten_info[name]
        prefix = name.rsplit(".", 1)[0]
        for piece, shape, sub in zip(flat.split(list(numels)), shapes, names):
            full[f"{prefix}.{sub}"] = piece.view(shape)
    return OrderedDict((key.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", ""), value)
                       for key, value in full.items())


def consolidate_sharded_model_checkpoints(ckpt_prefix: str, ckpt_suffix: str = "*.pth", save_path: str = "",
                                          save_model: bool = True) -> tuple[dict, str | None]:
    """Reads every rank's checkpoint file `ckpt_prefix + ckpt_suffix` (a glob) and builds the full model's
    state_dict; saves it as `{'model': state_dict}`.

    Args:
      ckpt_prefix: the files' common start, e.g. `/tmp/ckpt`.
      ckpt_suffix: the glob for the rest, e.g. `_rank-*-of-*.pth`.
      save_path: where to save it (default `ckpt_prefix + "_consolidated.pth"`).
      save_model: save it at all.

    Returns:
      (the full state_dict, the path it was saved to or None).

    Raises:
      FileNotFoundError: no file matches.
      ShardedCheckpointError (a ValueError): a file is not an FSDP checkpoint, files from several jobs, a rank
        missing or twice, or another world size than the files' count.
    """
    pattern = ckpt_prefix + ckpt_suffix
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise FileNotFoundError(f"no checkpoint file matches {pattern}")
    print(f"found {len(paths)} checkpoint files in {pattern}")
    checkpoints = []
    for path in paths:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(ckpt, dict) or "model" not in ckpt or "shard_metadata" not in ckpt:
            raise ShardedCheckpointError(f"{path} is not an FSDP checkpoint: it needs the keys 'model' "
                                         "(model.state_dict()) and 'shard_metadata' (model.get_shard_metadata())")
        checkpoints.append((ckpt["shard_metadata"]["rank"], path, ckpt))
    checkpoints.sort(key=lambda c: c[0])
    for index, (rank, path, ckpt) in enumerate(checkpoints):
        world = ckpt["shard_metadata"]["world_size"]
        if world != len(checkpoints):
            raise ShardedCheckpointError(f"{path} was saved by rank {rank} of {world} processes, but {pattern} "
                                         f"matches {len(checkpoints)} files: remove the files of other jobs, or "
                                         "add the missing ranks' files")
        if rank != index:
            raise ShardedCheckpointError(f"the files matching {pattern} hold ranks "
                                         f"{[c[0] for c in checkpoints]}, not 0..{world - 1} once each")
    full = consolidate_sharded_state_dicts([c[2]["model"] for c in checkpoints], checkpoints[0][2]["shard_metadata"])
    saved = None
    if save_model:
        saved = save_path or ckpt_prefix + "_consolidated.pth"
        torch.save({"model": full}, saved)
        print(f"saved consolidated model to {saved}")
    return full, saved
