"""Setting an FSDP module up: its parameters replaced by this process's shards, its buffers moved and cast, a
module on the meta device initialised, and the check that a loaded sharded state_dict fits (module.py)."""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn as nn

from xladev.runtime.parallel.fsdp.shards import SEPARATOR, FullParam, local_piece
from xladev.runtime.parallel.fsdp.state_dict_utils import ShardedCheckpointError


def shard_parameters(fsdp) -> None:
    """Replaces the parameters inside `fsdp` (an XlaFullyShardedDataParallel), but those an inner FSDP holds, by
    this process's shards, registered on `fsdp`; each parameter becomes its full leaf (or a view of a flattened
    group's leaf) on the modules that held it. Appends the `FullParam`s to `fsdp._handles`.

    Raises:
      TypeError: a parameter is not float32.
    """
    slots: dict[int, list[tuple[str, nn.Module, str]]] = {}
    params: list[nn.Parameter] = []
    for module_name, sub in fsdp.named_modules(remove_duplicate=False):
        for attr, param in list(sub._parameters.items()):
            if param is None or hasattr(param, "_is_sharded"):
                continue  # the shards of an inner FSDP
            if param.dtype != torch.float32:
                raise TypeError(f"FSDP: only float32 parameters are supported; "
                                f"{user_name(f'{module_name}.{attr}')} is {param.dtype}")
            if id(param) not in slots:
                slots[id(param)] = []
                params.append(param)
            slots[id(param)].append((module_name, sub, attr))
    if fsdp.flatten_parameters:
        groups = [g for g in ([p for p in params if p.requires_grad], [p for p in params if not p.requires_grad])
                  if g]
        for index, group in enumerate(groups):
            _flat_group(fsdp, index, group, slots)
    else:
        for param in params:
            module_name, _, attr = slots[id(param)][0]
            handle = _new_handle(fsdp, param.detach().cpu(), f"{module_name}.{attr}", param.requires_grad)
            for _, sub, name in slots[id(param)]:
                del sub._parameters[name]
                object.__setattr__(sub, name, handle.full)


def _flat_group(fsdp, index: int, group: list[nn.Parameter], slots: dict) -> None:
    """Shards `group` as one vector (`flatten_parameters`); its parameters become views of the full vector."""
    wrapper = fsdp._fsdp_wrapped_module
    prefix = "_fsdp_wrapped_module._fpw_module."
    flat_name = f"flat_param_{index}"
    wrapper.flat_param_names.append(flat_name)
    names = []
    for p in group:  # named as inside the wrapped module, as its state_dict names them
        module_name, _, attr = slots[id(p)][0]
        inner = module_name[len(prefix):] if module_name.startswith(prefix) else ""
        names.append(f"{inner}.{attr}" if inner else attr)
    wrapper._flat_metadata.append((names, [p.shape for p in group], [p.numel() for p in group]))
    value = torch.cat([p.detach().cpu().flatten() for p in group])
    handle = _new_handle(fsdp, value, f"_fsdp_wrapped_module.{flat_name}", group[0].requires_grad)
    for p in group:
        for _, sub, name in slots[id(p)]:
            del sub._parameters[name]
            handle.views.append((sub, name, p.shape))
    handle.set_views()


def _new_handle(fsdp, value: torch.Tensor, name: str, requires_grad: bool) -> FullParam:
    """Registers this process's shard of `value` (a CPU tensor) as a parameter of `fsdp`, under PyTorch/XLA's name."""
    piece = local_piece(value, fsdp.rank, fsdp.world_size, fsdp._shard_size_multiple, fsdp._shard_param_on_dim_0)
    shard = nn.Parameter(piece.to(fsdp.xla_device), requires_grad=requires_grad)
    shard._is_sharded = True
    shard._orig_size = value.size()
    shard._orig_name = name
    shard._name = f"_fsdp_shard.{name}".replace(".", SEPARATOR)
    fsdp.register_parameter(shard._name, shard)
    label = f"{user_name(name)} of the {type(fsdp._fsdp_wrapped_module.module).__name__} wrapped by FSDP"
    handle = FullParam(shard, value.size(), fsdp.compute_dtype, name, label, fsdp._shard_param_on_dim_0,
                       requires_grad)
    handle.full._sharded_param = shard
    if requires_grad:
        handle.full.register_post_accumulate_grad_hook(functools.partial(fsdp._post_backward_hook, handle))
    fsdp._handles.append(handle)
    return handle


@torch.no_grad()
def cast_buffers(fsdp) -> None:
    """Moves the buffers of `fsdp`'s modules (but those of an inner FSDP, which did its own) to the device, floating
    ones in `buffer_dtype` (the original dtype kept as `_orig_dtype`, for the consolidation)."""
    inner = [m for m in fsdp.modules() if isinstance(m, type(fsdp)) and m is not fsdp]
    skip = {id(sub) for m in inner for sub in m.modules()}
    for sub in fsdp.modules():
        if id(sub) in skip:
            continue
        for name, buf in list(sub._buffers.items()):
            if buf is None:
                continue
            new = buf
            if torch.is_floating_point(buf) and buf.dtype != fsdp.buffer_dtype:
                new = buf.to(fsdp.buffer_dtype)
                new._orig_dtype = buf.dtype
            if new.device != fsdp.xla_device:
                orig = getattr(new, "_orig_dtype", None)
                new = new.to(fsdp.xla_device)
                if orig is not None:
                    new._orig_dtype = orig
            sub._buffers[name] = new


def user_name(name: str) -> str:
    """A name inside an FSDP module as the wrapped module names it (`_fsdp_wrapped_module._fpw_module.fc1.weight`
    is `fc1.weight`), as PyTorch/XLA's consolidation renames them."""
    return name.replace("_fsdp_wrapped_module.", "").replace("_fpw_module.", "")


def materialize(module: nn.Module, param_init_fn: Callable | None) -> None:
    """Initialises a module whose parameters are on the meta device: `param_init_fn(module)`, else each submodule's
    `reset_parameters()` on fresh CPU memory."""
    if not any(t.is_meta for t in list(module.parameters()) + list(module.buffers())):
        return
    if param_init_fn is not None:
        param_init_fn(module)
        return
    module.to_empty(device="cpu")
    for sub in module.modules():
        if callable(getattr(sub, "reset_parameters", None)):
            sub.reset_parameters()


def check_shard_shapes(module, state_dict, prefix, local_metadata, strict,
                        missing_keys, unexpected_keys, error_msgs) -> None:
    """An FSDP module's load_state_dict pre-hook (torch's signature): a sharded checkpoint holds each process's
    piece, so from a job of another size (or other sharding options) the pieces differ in size.

    Raises:
      ShardedCheckpointError (a ValueError): a shard of `state_dict` does not have this process's shape.
    """
    for h in module._handles:
        saved = state_dict.get(prefix + h.shard._name)
        if isinstance(saved, torch.Tensor) and tuple(saved.shape) != tuple(h.shard.shape):
            raise ShardedCheckpointError(
                f"{prefix}{h.shard._name}: the checkpoint's shard has shape {list(saved.shape)}, this process's "
                f"{list(h.shard.shape)} (rank {module.rank} of {module.world_size}): the checkpoint was saved by a "
                "job of another world size or with other FSDP options. Consolidate it "
                "(consolidate_sharded_model_checkpoints) and load the full state_dict into the unwrapped model")
