"""ZeRO-1 over the processes of a job (PyTorch/XLA's `torch_xla.distributed.zero_redundancy_optimizer`).

Every process keeps the whole model, but the optimizer only a 1/N slice of it: each parameter is padded to a
multiple of N rows and cut along dimension 0, and process r's wrapped optimizer (`base_optimizer`) steps piece
r, a float32 master copy, so its state (momentum, Adam's moments) is 1/N of the usual. A step reduce-scatters
each gradient (the mean over the processes) onto the pieces, clips by the whole gradient's norm, steps the
pieces, and all-gathers them back into the parameters. The collectives are recorded into the step's graph.
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable, Iterable

import torch
import torch.nn as nn
from torch.optim import Optimizer

from xladev.errors import XladevError
from xladev.runtime.distributed import collectives
from xladev.runtime.parallel.fsdp.shards import padded_rows
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.api.training import mark_step

logger = logging.getLogger(__name__)


class ShardedStateError(XladevError, ValueError):
    """A ZeRO-1 state_dict that does not fit this job's shards (saved by a job of another world size)."""


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(1) if t.dim() == 0 else t  # a scalar parameter is cut as one row


class ZeroRedundancyOptimizer(Optimizer):
    """Wraps `optimizer_class` so that each process keeps the state of 1/N of the parameters (ZeRO-1).

    Args:
      params: the model's parameters (or parameter groups), all on the xla device.
      optimizer_class: the optimizer run on the pieces, e.g. `torch.optim.AdamW`.
      optimizer_dtype: dtype of the pieces and the optimizer's state (default float32).
      grad_clipping: clip by the whole gradient's 2-norm before stepping (default True, as PyTorch/XLA).
      max_norm: the clipping norm (default 1.0).
      pin_layout: passed to the collectives.
      sharding_groups: replica groups sharing one set of pieces (default: every process).
      grad_norm_groups: more groups the gradient norm is summed over (model parallel groups).
      lazy_init: shard later, in `init_zero()`.
      bucket_cap_mb_all_gather, bucket_cap_mb_reduce_scatter: accepted; each parameter has its own collective.
      use_grad_acc_hook: accumulate gradients into a `main_grad` in optimizer_dtype, through autograd hooks.
      save_master_weights: put the pieces in `state_dict()` (to resume exactly).
      higher_cc_precision: reduce-scatter in optimizer_dtype.
      **defaults: the wrapped optimizer's arguments (lr, momentum...).

    Raises:
      ValueError: this rank is in none of `sharding_groups`, or a parameter is not on the xla device.
    """

    def __init__(self, params: Iterable, optimizer_class: type[Optimizer], optimizer_dtype: torch.dtype | None = None,
                 grad_clipping: bool = True, max_norm: float | None = None, pin_layout: bool = True,
                 sharding_groups: list | None = None, grad_norm_groups: list | None = None, lazy_init: bool = False,
                 bucket_cap_mb_all_gather: int = 0, bucket_cap_mb_reduce_scatter: int = 0,
                 use_grad_acc_hook: bool = False, save_master_weights: bool = False,
                 higher_cc_precision: bool = False, **defaults: Any) -> None:
        if not save_master_weights:
            logger.warning("Not saving master weights may have accuracy issues when resuming training!")
        super().__init__(params, defaults)
        self.global_world_size = collectives.world_size()
        self.global_rank = collectives.global_ordinal()
        self._sharding_groups = [list(range(self.global_world_size))] if sharding_groups is None else sharding_groups
        self._grad_norm_groups = grad_norm_groups
        self.optimizer_class = optimizer_class
        self.defaults = defaults
        self.optimizer_dtype = optimizer_dtype if optimizer_dtype is not None else torch.float32
        self.grad_clipping = grad_clipping
        self.max_norm = max_norm if max_norm is not None else 1.0
        self.pin_layout = pin_layout
        self.bucket_cap_mb_all_gather = bucket_cap_mb_all_gather
        self.bucket_cap_mb_reduce_scatter = bucket_cap_mb_reduce_scatter
        self.save_master_weights = save_master_weights
        self.higher_cc_precision = higher_cc_precision
        self.use_grad_acc_hook = use_grad_acc_hook
        self.grad_acc_hooks: list = []
        self._grad_norm = None
        self.inited = False
        if not lazy_init:
            self.init_zero()

    @property
    def grad_norm(self) -> torch.Tensor | None:
        """The whole gradient's norm at the last clipping step."""
        return self._grad_norm

    @property
    def sharding_groups(self) -> list:
        """The replica groups sharing one set of pieces."""
        return self._sharding_groups

    @sharding_groups.setter
    def sharding_groups(self, groups: list) -> None:
        if self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer: sharding_groups cannot change after init_zero()")
        self._sharding_groups = groups

    def _groups(self):
        # None for the one group of every process: the collectives' native form.
        groups = self._sharding_groups
        return None if len(groups) == 1 else groups

    def init_zero(self) -> None:
        """Cuts the parameters into this process's pieces and creates `base_optimizer` over them.

        Raises:
          ValueError: this rank is in none of the sharding groups, or a parameter is not on the xla device.
        """
        self.remove_hooks()
        self.local_world_size = len(self._sharding_groups[0])
        self.local_rank = next((list(g).index(self.global_rank) for g in self._sharding_groups
                                if self.global_rank in g), None)
        if self.local_rank is None:
            raise ValueError(f"Current rank {self.global_rank} is missing from the sharding_groups "
                             f"{self._sharding_groups}")
        self.base_optimizer = self.optimizer_class(self._shard_parameters(), **self.defaults)
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        self.inited = True

    @staticmethod
    def _sync_param_groups(source: list[dict], target: list[dict]) -> None:
        """Copies every setting but the parameters (lr, momentum, a scheduler's changes) group by group."""
        if len(source) != len(target):
            raise ValueError(f"{len(source)} parameter groups against {len(target)}")
        for src, dst in zip(source, target):
            for key, value in src.items():
                if key != "params":
                    dst[key] = value

    def _pieces(self):
        """(parameter, its piece) of every parameter, group by group."""
        for group, base in zip(self.param_groups, self.base_optimizer.param_groups):
            yield from zip(group["params"], base["params"])

    @torch.no_grad()
    def _shard_parameters(self) -> list[dict]:
        self.device = None
        for group in self.param_groups:
            for param in group["params"]:
                if not isinstance(param, XlaTensor):
                    raise ValueError(f"ZeroRedundancyOptimizer: a parameter is on {param.device}; move the model "
                                     "to the xla device (torch_xla.device()) before creating the optimizer")
                self.device = self.device or param.device
        groups = []
        for group in self.param_groups:
            pieces = []
            for param in group["params"]:
                # Through the CPU, as PyTorch/XLA: the cut differs by rank, and a recorded slice would make the
                # next step's graph (which holds collectives) differ between the ranks.
                rows = padded_rows(_rows(param.detach().cpu()), self.local_world_size)
                size = rows.size(0) // self.local_world_size
                piece = rows[self.local_rank * size:(self.local_rank + 1) * size].to(self.optimizer_dtype)
                shard = nn.Parameter(piece.to(self.device), requires_grad=param.requires_grad)
                if self.use_grad_acc_hook and param.requires_grad:
                    self.grad_acc_hooks.append(param.register_post_accumulate_grad_hook(self._accumulate(shard)))
                pieces.append(shard)
            groups.append({**group, "params": pieces})
        return groups

    def _accumulate(self, shard: nn.Parameter) -> Callable:
        def hook(param: torch.Tensor) -> None:
            if param.grad is None:
                return
            if not hasattr(shard, "main_grad"):
                shard.main_grad = torch.zeros(param.shape, dtype=self.optimizer_dtype, device=self.device)
                param.main_grad = shard.main_grad
            with torch.no_grad():
                shard.main_grad.add_(param.grad.to(self.optimizer_dtype))
            param.grad = None

        return hook

    def remove_hooks(self) -> None:
        """Removes the gradient accumulation hooks (`use_grad_acc_hook`)."""
        for handle in self.grad_acc_hooks:
            handle.remove()
        self.grad_acc_hooks = []

    def _has_gradient(self, param, shard) -> bool:
        return param.grad is not None or (self.use_grad_acc_hook and hasattr(shard, "main_grad"))

    def _scheme(self, kwargs: dict) -> list[dict]:
        return kwargs.pop("sharding_scheme", None) or [
            {"scale_factor": 1.0, "sharding_group": self._groups(), "group_size": self.local_world_size}]

    def _reduce_gradients(self, scheme: list[dict]) -> None:
        self._sync_param_groups(self.param_groups, self.base_optimizer.param_groups)
        for param, shard in self._pieces():
            if not self._has_gradient(param, shard):
                continue
            grad = padded_rows(_rows(shard.main_grad if self.use_grad_acc_hook else param.grad), self.local_world_size)
            if self.higher_cc_precision:
                grad = grad.to(self.optimizer_dtype)
            for step in scheme:
                grad = collectives.reduce_scatter(collectives.REDUCE_SUM, grad, step["scale_factor"] / step["group_size"],
                                                  0, step["group_size"], groups=step["sharding_group"],
                                                  pin_layout=self.pin_layout)
            shard.grad = grad.to(self.optimizer_dtype)

    def _clip_grad_norm(self, max_norm: float) -> None:
        grads = [p.grad for group in self.base_optimizer.param_groups for p in group["params"] if p.grad is not None]
        total = torch.zeros((), dtype=self.optimizer_dtype, device=self.device)
        for g in grads:
            total += (g * g).sum()
        total = collectives.all_reduce(collectives.REDUCE_SUM, total, groups=self._groups(), pin_layout=self.pin_layout)
        if self._grad_norm_groups is not None:
            total = collectives.all_reduce(collectives.REDUCE_SUM, total, groups=self._grad_norm_groups,
                                           pin_layout=self.pin_layout)
        self._grad_norm = total.sqrt()
        coef = torch.clamp(max_norm / (self._grad_norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)

    @torch.no_grad()
    def step(self, closure: Callable | None = None, **kwargs: Any):
        """Reduce-scatters the gradients, clips them, steps the pieces and gathers them into the parameters.

        Args:
          closure: recomputes the loss (run first, with gradients enabled).
          **kwargs: passed to the wrapped optimizer's step (`sharding_scheme` is this class's).

        Returns:
          The closure's loss, or None.
        """
        if not self.inited:
            raise RuntimeError("ZeroRedundancyOptimizer: call init_zero() first (it was created with lazy_init=True)")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        scheme = self._scheme(kwargs)
        self._reduce_gradients(scheme)
        if self.grad_clipping:
            self._clip_grad_norm(self.max_norm)
        self.base_optimizer.step(closure=None, **kwargs)
        self.base_optimizer.zero_grad(set_to_none=True)
        self.allgather_weights_and_update_full_parameter(scheme)
        self._sync_param_groups(self.base_optimizer.param_groups, self.param_groups)
        return loss

    @torch.no_grad()
    def allgather_weights_and_update_full_parameter(self, sharding_scheme: list[dict] | None = None,
                                                    every_parameter: bool = False) -> None:
        """Writes the all-gathered pieces into the parameters (those with a gradient, or every one)."""
        scheme = sharding_scheme or self._scheme({})
        for param, shard in self._pieces():
            if not (every_parameter or self._has_gradient(param, shard)):
                continue
            whole = shard.detach().to(param.dtype)
            for step in reversed(scheme):
                whole = collectives.all_gather(whole, dim=0, groups=step["sharding_group"], pin_layout=self.pin_layout)
            param.copy_(whole[:_rows(param).size(0)].view(param.shape))

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Clears the parameters' gradients (and the `main_grad`s)."""
        super().zero_grad(set_to_none=set_to_none)
        if self.use_grad_acc_hook:
            for group in self.base_optimizer.param_groups:
                for shard in group["params"]:
                    if hasattr(shard, "main_grad"):
                        shard.main_grad.zero_()

    def get_shape_info(self) -> dict[int, torch.Size]:
        """Each parameter's shape, by its index in the state_dict."""
        return {i: p.shape for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def state_dict(self) -> dict:
        """The optimizer's state_dict, with `base_state` (this process's pieces' state), `shape_info` and, with
        `save_master_weights`, `sharded_master_weights` (the pieces)."""
        state = super().state_dict()
        state["base_state"] = self.base_optimizer.state_dict()["state"]
        state["shape_info"] = self.get_shape_info()
        if self.save_master_weights:
            shards = [s for g in self.base_optimizer.param_groups for s in g["params"]]
            state["sharded_master_weights"] = {i: s.data for i, s in enumerate(shards)}
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads a state_dict saved by this rank (of a job of the same world size).

        Raises:
          ShardedStateError (a ValueError): the saved pieces do not have this process's shapes.
        """
        state_dict = copy.deepcopy(state_dict)
        base_state = state_dict.pop("base_state")
        super().load_state_dict(state_dict)
        self.init_zero()
        shards = [s for g in self.base_optimizer.param_groups for s in g["params"]]
        masters = state_dict.get("sharded_master_weights", {})
        for index, shard in enumerate(shards):
            for what, value in [*((f"state {k!r}", v) for k, v in base_state.get(index, {}).items()),
                                *((("master weight", masters[index]),) if index in masters else ())]:
                if isinstance(value, torch.Tensor) and value.dim() and tuple(value.shape) != tuple(shard.shape):
                    raise ShardedStateError(
                        f"ZeroRedundancyOptimizer.load_state_dict: the {what} of parameter {index} has shape "
                        f"{list(value.shape)}, this process's piece {list(shard.shape)} (rank {self.local_rank} of "
                        f"{self.local_world_size}): the state_dict was saved by a job of another world size")
        base = self.base_optimizer.state_dict()
        base["state"], base["param_groups"] = base_state, state_dict["param_groups"]
        self.base_optimizer.load_state_dict(base)
        if masters:
            with torch.no_grad():
                for index, shard in enumerate(shards):
                    shard.copy_(masters[index])
            self.allgather_weights_and_update_full_parameter(every_parameter=True)
            mark_step()  # as PyTorch/XLA: the loaded weights are computed now, in a graph of their own
