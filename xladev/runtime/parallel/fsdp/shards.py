"""FSDP's parameters: each process's shard, the full tensor it stands for, and the wrapper that names them.

Sharding: a parameter (or several flattened into one vector, with `flatten_parameters`) is flattened, padded
with zeros to a multiple of `world_size * multiple` elements and cut into `world_size` equal pieces; process r
keeps piece r as a float32 `nn.Parameter` of the FSDP module, the one its optimizer sees. With
`shard_param_on_dim_0` the parameter keeps its shape and is cut along dimension 0 instead (padded to a multiple
of `world_size` rows). PyTorch/XLA cuts the same way, so a checkpoint's shards have the same shapes as its.

The full tensor is an autograd leaf that the module's code reads in place of the parameter (a plain attribute of
the submodule, as in PyTorch/XLA). Between its uses it is *freed*: its storage holds a placeholder that no
barrier computes, so it holds no device memory, and a graph that reads it fails naming it. `gather` gives it the
value of an all-gather of the shards; once autograd has accumulated its gradient, `reduce_gradient`
reduce-scatters that onto the shard's gradient. Views of the leaf (what autograd saves for the backward, the
views a flattened group hands the module) read its current value, so a leaf freed after the forward and
gathered again before the backward serves the backward with the same values.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from xladev.runtime.distributed import collectives
from xladev.runtime.execute.execution import lock as _execution_lock
from xladev.runtime.graph.ir import Meta, Node, OpDef
from xladev.runtime.record.opt_barrier import barrier_nodes
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor, new_tensor

# PyTorch/XLA's separator in a shard's parameter name (`_fsdp_shard` + the original name, dots replaced).
SEPARATOR = "_FSDP_SHARD_SEPARATOR_"


def _lower_freed(ctx, label: str):
    raise RuntimeError(f"the full parameter {label} is freed outside that module's forward and backward (each "
                       "process holds only its shard): read the model through its state_dict() and "
                       "consolidate_sharded_model_checkpoints, or call the FSDP module itself")


FREED = OpDef("xla::fsdp_freed_parameter", _lower_freed, params=("label",))


def padded_flat(t: torch.Tensor, multiple: int) -> torch.Tensor:
    """`t` flattened and padded with zeros to a multiple of `multiple` elements."""
    t = t.flatten()
    extra = -t.numel() % multiple
    return F.pad(t, [0, extra]) if extra else t


def padded_rows(t: torch.Tensor, multiple: int) -> torch.Tensor:
    """`t` padded with zero rows (dimension 0) to a multiple of `multiple` rows."""
    extra = -t.size(0) % multiple
    return F.pad(t, [0, 0] * (t.dim() - 1) + [0, extra]) if extra else t


class FullParam:
    """One shard of this process and the full tensor it stands for.

    Attributes:
      shard: this process's piece, a float32 `nn.Parameter` on the device (registered on the FSDP module).
      full: the full autograd leaf, in the compute dtype: the parameter's shape, or a vector for a flattened group.
      name: the shard's original name in the FSDP module (`_fsdp_wrapped_module._fpw_module.fc1.weight`).
      label: what an error calls the full parameter (`fc1.weight of the Net wrapped by FSDP`).
      on_dim_0: cut along dimension 0, not flattened.
      views: for a flattened group, (module, attribute, shape) of each parameter it holds, in order.
      gathered: the shard's (storage, version) when `full` was gathered; None while `full` is freed.
    """

    def __init__(self, shard: nn.Parameter, full_size: torch.Size, compute_dtype: torch.dtype, name: str,
                 label: str, on_dim_0: bool, requires_grad: bool):
        self.shard = shard
        self.name = name
        self.label = label
        self.on_dim_0 = on_dim_0
        self.views: list[tuple[nn.Module, str, torch.Size]] = []
        meta = Meta(tuple(full_size), compute_dtype)
        storage = Storage(self._placeholder(meta), shard._st.device_index)
        storage.release(storage.value)  # born freed: not a pending value for the next barrier to compute
        self.full = XlaTensor(storage, meta, requires_grad=requires_grad)
        self.gathered = None

    def _placeholder(self, meta: Meta) -> Node:
        return Node(FREED, (), ((self.label,), ()), meta)

    @property
    def has_full(self) -> bool:
        """`full` holds a value gathered from the shard as it is now (an optimizer step since makes it stale)."""
        storage = self.shard._st
        return self.gathered is not None and self.gathered[0] is storage and self.gathered[1] == storage.version

    def gather(self, groups, pin_layout: bool, after: Sequence[torch.Tensor] = ()) -> None:
        """Gives `full` the all-gather of every process's shard (recorded, not run).

        Args:
          groups: replica groups of the collective (None: every process).
          pin_layout: passed to the collective.
          after: tensors the gather must wait for (one optimization barrier with the shard): the inputs in the
            forward, the incoming gradient in the backward, so XLA neither gathers early nor merges two gathers.
        """
        dtype = self.full.dtype
        with torch.no_grad():
            piece = self.shard.detach()
            if piece.dtype != dtype:
                piece = piece.to(dtype)
            after = [t for t in after if isinstance(t, XlaTensor) and t._st.device_index == piece._st.device_index]
            if after:
                with _execution_lock:
                    nodes = barrier_nodes([piece._node()] + [t._node() for t in after])
                    piece = new_tensor(nodes[0], piece._st.device_index)
            whole = collectives.all_gather(piece, dim=0, groups=groups, pin_layout=pin_layout)
            size = self.full.shape
            whole = whole[:size[0]] if self.on_dim_0 else whole[:self.full.numel()].view(size)
            with _execution_lock:
                self.full._assign(whole._node())
        self.gathered = (self.shard._st, self.shard._st.version)

    def free(self) -> None:
        """Drops `full`'s value: it holds no memory until the next `gather`."""
        self.full._st.release(self._placeholder(Meta(tuple(self.full.shape), self.full.dtype)))
        self.gathered = None

    def reduce_gradient(self, grad: torch.Tensor, world: int, multiple: int, groups, pin_layout: bool,
                        predivide: float, scale: float, postdivide: float, fp32: bool) -> None:
        """Reduce-scatters the full gradient `grad` and adds this process's piece to the shard's gradient.

        Args:
          grad: the gradient of `full`.
          world: the processes sharing the parameter; multiple: the padding unit of a flattened shard.
          groups, pin_layout: passed to the collective.
          predivide, scale, postdivide: `grad / predivide`, summed times `scale`, then `/ postdivide` (the mean
            over the processes by default).
          fp32: reduce-scatter in float32 (`fp32_reduce_scatter`) when the compute dtype is lower.
        """
        with torch.no_grad():
            if predivide != 1.0:
                grad = grad / predivide
            flat = padded_rows(grad, world) if self.on_dim_0 else padded_flat(grad, world * multiple)
            if fp32 and flat.dtype != torch.float32:
                flat = flat.to(torch.float32)
            piece = collectives.reduce_scatter(collectives.REDUCE_SUM, flat, scale, 0, world, groups=groups,
                                               pin_layout=pin_layout)
            if piece.dtype != torch.float32:
                piece = piece.to(torch.float32)
            if postdivide != 1.0:
                piece = piece / postdivide
            if self.shard.grad is None:
                self.shard.grad = piece
            else:
                self.shard.grad += piece

    def set_views(self) -> None:
        """Points each parameter of a flattened group at its view of `full` (new autograd views each forward)."""
        if not self.views:
            return
        pieces = self.full.split([shape.numel() for _, _, shape in self.views])
        for (module, attr, shape), piece in zip(self.views, pieces):
            object.__setattr__(module, attr, piece.view(shape))


def local_piece(value: torch.Tensor, rank: int, world: int, multiple: int, on_dim_0: bool) -> torch.Tensor:
    """Process `rank`'s piece of `value` (a CPU tensor), padded and cut as the module docstring says."""
    padded = padded_rows(value, world) if on_dim_0 else padded_flat(value, world * multiple)
    size = padded.size(0) // world
    return padded[rank * size:(rank + 1) * size].clone()


class XlaFlattenParamsWrapper(nn.Module):
    """Holds the wrapped module as `_fpw_module` and the flattened groups' metadata, named as PyTorch/XLA names
    them (its checkpoints and `get_shard_metadata` carry these names). Its state_dict drops `_fpw_module.` from
    the keys, and load_state_dict puts it back.

    Args:
      module: the module FSDP wraps.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._fpw_module = module
        self.flat_param_names: list[str] = []
        self._flat_metadata: list[tuple[list[str], list[torch.Size], list[int]]] = []
        self.register_state_dict_post_hook(_strip_fpw_prefix)
        self.register_load_state_dict_pre_hook(_add_fpw_prefix)

    @property
    def module(self) -> nn.Module:
        """The wrapped module."""
        return self._fpw_module

    def metadata(self, index: int) -> tuple[list[str], list[torch.Size], list[int]]:
        """(names, shapes, numels) of the parameters in flattened group `index` (`flat_param_<index>`)."""
        return self._flat_metadata[index]

    def forward(self, *args, **kwargs):
        return self._fpw_module(*args, **kwargs)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_fpw_module":
                raise
            return getattr(self._fpw_module, name)

    def __getitem__(self, key):
        return self._fpw_module.__getitem__(key)


def _strip_fpw_prefix(module, state_dict, prefix, local_metadata) -> None:
    inner = prefix + "_fpw_module."
    for key in [k for k in state_dict if k.startswith(inner)]:
        state_dict[prefix + key[len(inner):]] = state_dict.pop(key)


def _add_fpw_prefix(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                    error_msgs) -> None:
    inner = prefix + "_fpw_module."
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(inner)]:
        state_dict[inner + key[len(prefix):]] = state_dict.pop(key)
