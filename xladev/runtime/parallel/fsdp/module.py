"""`XlaFullyShardedDataParallel` (FSDP): data parallel over the job's processes with each parameter sharded.

Each process keeps 1/N of every parameter (shards.py). The forward all-gathers the full parameters, runs the
module, and (for an inner FSDP, `reshard_after_forward`) frees them again; a hook on the outputs gathers them
again when the backward reaches the module; when autograd has accumulated a full parameter's gradient, a hook
reduce-scatters it onto the shard's gradient (the mean over the processes) and frees the full parameter. The
optimizer then steps the shards. Every collective is recorded into the step's graph, so XLA runs them inside the
step, as PyTorch/XLA does. PyTorch/XLA's names, arguments and checkpoint format are kept.
"""

from __future__ import annotations

import contextlib
import enum
import math
from typing import Any, Callable, Generator

import torch
import torch.nn as nn
from torch.utils._pytree import tree_leaves, tree_map_only

from xladev.runtime.distributed import collectives
from xladev.runtime.parallel.fsdp.setup import cast_buffers, check_shard_shapes, materialize, shard_parameters, user_name
from xladev.runtime.parallel.fsdp.shards import FullParam, XlaFlattenParamsWrapper
from xladev.runtime.parallel.fsdp.wrap import recursive_wrap
from xladev.runtime.graph.op_ledger import RECOMPUTE_SCOPE, recorder
from xladev.runtime.record.tensor import torch_device
from xladev.runtime.api.training import mark_step

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class TrainingState(enum.Enum):
    """Where an FSDP module is in the step (PyTorch/XLA's states)."""

    IDLE = enum.auto()
    FORWARD = enum.auto()
    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


def _recomputing() -> bool:
    """Whether a gradient checkpoint is recomputing its forward on this thread (its ops carry that IR scope)."""
    return RECOMPUTE_SCOPE in (getattr(recorder.scope_stack, "names", None) or ())


def _predivide_factor(world: int) -> float:
    # PyTorch/XLA's split of the mean's division: the largest power of two f with f * f <= world that divides
    # it before the sum (keeping low-precision sums in range), the rest after.
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return float(factor)


class XlaFullyShardedDataParallel(nn.Module):
    """Wraps `module` so that each process of the job holds 1/N of its parameters (PyTorch/XLA's FSDP).

    Create the optimizer after wrapping (it must see the shards: `model.parameters()`), and step it with
    `optimizer.step()`, not `xm.optimizer_step` (the gradients are already reduced). Wrap inner modules first,
    or pass `auto_wrap_policy`. Save per rank `model.state_dict()` with `model.get_shard_metadata()`; build the
    full model's state_dict with `consolidate_sharded_model_checkpoints`.

    Args:
      module: the module; its parameters (on the CPU, or on the device) must be float32.
      reshard_after_forward: free an inner module's full parameters after its forward, and gather them again
        in its backward (less memory). The root keeps them until its backward while `disable_reshard_on_root`.
      flatten_parameters: shard all of the module's parameters as one vector (one shard per module).
      execute_sharding_on_init: run a step barrier after sharding (`torch_xla.sync()`).
      optimization_barrier_in_forward: the forward's gathers wait for the module's inputs.
      optimization_barrier_in_backward: the backward's gathers wait for the gradient reaching the module.
      sync_on_finalization: run a step barrier at the end of the backward.
      disable_reshard_on_root: the root FSDP does not reshard after its forward.
      compute_dtype: dtype of the gathered parameters, the inputs and the gradients (float32, bfloat16 or
        float16); the shards stay float32.
      buffer_dtype: dtype of the buffers (default: compute_dtype).
      fp32_reduce_scatter: reduce-scatter gradients in float32 under a lower compute_dtype.
      sharding_groups, sharding_rank, sharding_world_size: shard over replica groups (all three together).
      shard_param_on_dim_0: cut each parameter along dimension 0 instead of flattening it.
      pin_layout_in_collective_ops: passed to the collectives.
      reduce_scatter_bucket_size_mb, coalesce_all_gather_ops: accepted; each parameter has its own collective.
      auto_wrap_policy: wraps submodules in FSDP first (`torch_xla.distributed.fsdp.wrap`).
      auto_wrapper_callable: what wraps them (default this class), e.g. with `checkpoint_module`.
      param_init_fn: initialises modules whose parameters are on the meta device.
      _shard_size_multiple: a flattened shard is padded to a multiple of this (PyTorch/XLA's 128).
      _use_xla_patched_linear: accepted (autograd's saved views read the gathered value here).
      _debug_msg, _debug_print: a name printed with the wrapping's summary on rank 0.

    Raises:
      RuntimeError: `module` is already FSDP, or has no forward of its own (a ModuleList).
      ValueError: a bad dtype, `sharding_groups` without rank and size, a submodule already FSDP under
        auto-wrapping, or a `_debug_dummy_*` option (not supported).
      TypeError: a parameter that is not float32.
    """

    def __init__(self, module: nn.Module, reshard_after_forward: bool = True, flatten_parameters: bool = False,
                 execute_sharding_on_init: bool = True, optimization_barrier_in_forward: bool = True,
                 optimization_barrier_in_backward: bool = True, sync_on_finalization: bool = False,
                 disable_reshard_on_root: bool = True, compute_dtype: torch.dtype | None = None,
                 buffer_dtype: torch.dtype | None = None, fp32_reduce_scatter: bool = False,
                 sharding_groups: list | None = None, sharding_rank: int | None = None,
                 sharding_world_size: int | None = None, shard_param_on_dim_0: bool = False,
                 pin_layout_in_collective_ops: bool = True, reduce_scatter_bucket_size_mb: int | None = 0,
                 coalesce_all_gather_ops: bool = False, auto_wrap_policy: Callable | None = None,
                 auto_wrapper_callable: Callable | None = None, param_init_fn: Callable | None = None,
                 _shard_size_multiple: int = 128, _use_xla_patched_linear: bool = True,
                 _debug_dummy_forward_pass: bool = False, _debug_msg: str = "xla_fsdp", _debug_print: bool = False,
                 _debug_dummy_all_gather_op: bool = False, _debug_dummy_all_reduce_op: bool = False,
                 _debug_dummy_reduce_scatter_op: bool = False,
                 _debug_dummy_optimization_barrier_op: bool = False) -> None:
        if isinstance(module, XlaFullyShardedDataParallel):
            raise RuntimeError("Cannot wrap a module that is already wrapped with FSDP. For nested FSDP, first wrap "
                               "the inner child modules before wrapping the outer parent module.")
        forward = getattr(getattr(module, "forward", None), "__func__", None)
        if forward is None or forward is nn.Module.forward:
            raise RuntimeError(f"The module wrapped by FSDP must define a `forward` method: {type(module).__name__} "
                               "has none (do not wrap an nn.ModuleList or nn.ModuleDict; wrap its modules)")
        dummies = [n for n, on in (("_debug_dummy_forward_pass", _debug_dummy_forward_pass),
                                   ("_debug_dummy_all_gather_op", _debug_dummy_all_gather_op),
                                   ("_debug_dummy_all_reduce_op", _debug_dummy_all_reduce_op),
                                   ("_debug_dummy_reduce_scatter_op", _debug_dummy_reduce_scatter_op),
                                   ("_debug_dummy_optimization_barrier_op", _debug_dummy_optimization_barrier_op))
                   if on]
        if dummies:
            raise ValueError(f"FSDP: {', '.join(dummies)} is not supported by xladev (the collectives always run)")
        for what, dtype in (("compute_dtype", compute_dtype), ("buffer_dtype", buffer_dtype)):
            if dtype is not None and dtype not in FLOAT_DTYPES:
                raise ValueError(f"{what} must be one of {list(FLOAT_DTYPES)}, not {dtype}")
        if sharding_groups is not None and (sharding_rank is None or sharding_world_size is None):
            raise ValueError("sharding_rank and sharding_world_size must be provided when sharding_groups is "
                             "specified")
        super().__init__()
        fsdp_kwargs = dict(
            reshard_after_forward=reshard_after_forward, flatten_parameters=flatten_parameters,
            execute_sharding_on_init=execute_sharding_on_init,
            optimization_barrier_in_forward=optimization_barrier_in_forward,
            optimization_barrier_in_backward=optimization_barrier_in_backward,
            sync_on_finalization=sync_on_finalization, disable_reshard_on_root=disable_reshard_on_root,
            compute_dtype=compute_dtype, buffer_dtype=buffer_dtype, fp32_reduce_scatter=fp32_reduce_scatter,
            sharding_groups=sharding_groups, sharding_rank=sharding_rank, sharding_world_size=sharding_world_size,
            shard_param_on_dim_0=shard_param_on_dim_0, pin_layout_in_collective_ops=pin_layout_in_collective_ops,
            param_init_fn=param_init_fn, _shard_size_multiple=_shard_size_multiple,
            _use_xla_patched_linear=_use_xla_patched_linear, _debug_msg=_debug_msg, _debug_print=_debug_print)
        if auto_wrap_policy is not None:
            for name, sub in module.named_modules():
                if isinstance(sub, XlaFullyShardedDataParallel):
                    raise ValueError(f"Expected {name} to NOT be FullyShardedDataParallel if using an "
                                     "`auto_wrap_policy`: wrap by hand or by policy, not both")
            recursive_wrap(module, auto_wrap_policy, auto_wrapper_callable or XlaFullyShardedDataParallel,
                           only_wrap_children=True, **fsdp_kwargs)

        self.reshard_after_forward = self._orig_reshard_after_forward = reshard_after_forward
        self.disable_reshard_on_root = disable_reshard_on_root
        self.flatten_parameters = flatten_parameters
        self.optimization_barrier_in_forward = optimization_barrier_in_forward
        self.optimization_barrier_in_backward = optimization_barrier_in_backward
        self.sync_on_finalization = sync_on_finalization
        self.compute_dtype = compute_dtype or torch.float32
        self.buffer_dtype = buffer_dtype or self.compute_dtype
        self.fp32_reduce_scatter = fp32_reduce_scatter
        self._shard_param_on_dim_0 = shard_param_on_dim_0 and not flatten_parameters
        self._shard_size_multiple = 1 if self._shard_param_on_dim_0 else int(_shard_size_multiple)
        self.sharding_groups = sharding_groups
        if sharding_groups is None:
            self.rank, self.world_size = collectives.global_ordinal(), collectives.world_size()
        else:
            self.rank, self.world_size = int(sharding_rank), int(sharding_world_size)
        self.pin_layout = pin_layout_in_collective_ops
        self._debug_msg, self._debug_print = _debug_msg, _debug_print
        self.gradient_predivide_factor = _predivide_factor(self.world_size)
        self.gradient_postdivide_factor = self.world_size / self.gradient_predivide_factor
        self._reduce_scale = 1.0
        self.xla_device = torch_device(0)  # xla:0, the process's device (as xm.xla_device())

        materialize(module, param_init_fn)
        self._fsdp_wrapped_module = XlaFlattenParamsWrapper(module)
        self._handles: list[FullParam] = []
        shard_parameters(self)
        cast_buffers(self)
        self.register_load_state_dict_pre_hook(check_shard_shapes)

        self._is_root: bool | None = None
        self._require_backward_grad_sync = True
        self.training_state = TrainingState.IDLE
        self._post_backward_callback_queued = False
        if _debug_print and self.rank == 0:
            print(f"FSDP ({_debug_msg}): {len(self._handles)} shard(s) of "
                  f"{sum(h.full.numel() for h in self._handles)} parameter(s) over {self.world_size} process(es)")
        if execute_sharding_on_init:
            mark_step()

    # ---- what PyTorch/XLA's FSDP exposes ---------------------------------------------------------------
    @property
    def module(self) -> XlaFlattenParamsWrapper:
        """The wrapped module (inside its `XlaFlattenParamsWrapper`, as PyTorch/XLA's)."""
        return self._fsdp_wrapped_module

    @property
    def sharded_params(self) -> list[nn.Parameter]:
        """This module's own shards, in order."""
        return [h.shard for h in self._handles]

    @property
    def full_params(self) -> list[torch.Tensor]:
        """The full parameters' leaves (freed outside the forward and backward)."""
        return [h.full for h in self._handles]

    @property
    def params_with_grad(self) -> list[nn.Parameter]:
        """The shards (of this module and inner ones) that have a gradient."""
        return [p for p in self.parameters() if p.grad is not None]

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_fsdp_wrapped_module":
                raise
            return getattr(self._fsdp_wrapped_module, name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module.__getitem__(key)

    def extra_repr(self) -> str:
        return (f"world_size={self.world_size}, rank={self.rank}, compute_dtype={self.compute_dtype}, "
                f"buffer_dtype={self.buffer_dtype}, flatten_parameters={self.flatten_parameters}, "
                f"reshard_after_forward={self.reshard_after_forward}, sharding_groups={self.sharding_groups}")

    def assert_state(self, state) -> None:
        """Raises ValueError unless the module is in `state` (a TrainingState or a list of them)."""
        states = [state] if isinstance(state, TrainingState) else list(state)
        if self.training_state not in states:
            raise ValueError(f"expected to be in states {states} but current state is {self.training_state}")

    def set_gradient_divide_factors(self, pre: float, post: float, recursive: bool) -> None:
        """Divides gradients by `pre` before the reduce-scatter's sum and by `post` after (PyTorch/XLA's); with
        (1, 1) the sum is scaled by 1/world_size instead."""
        self.assert_state(TrainingState.IDLE)
        if recursive:
            for m in self.modules():
                if isinstance(m, XlaFullyShardedDataParallel) and m is not self:
                    m.set_gradient_divide_factors(pre, post, False)
        self.gradient_predivide_factor, self.gradient_postdivide_factor = float(pre), float(post)
        self._reduce_scale = 1.0 / self.world_size if (pre, post) == (1, 1) else 1.0

    def get_shard_metadata(self) -> dict:
        """What `consolidate_sharded_model_checkpoints` needs besides the shards: save it with the state_dict.

        Returns:
          `{'shard_info', 'flatten_info', 'buffer_info', 'world_size', 'rank'}` in PyTorch/XLA's format.
        """
        shard_info, flatten_info = {}, {}
        for module_name, m in self.named_modules(remove_duplicate=False):
            module_name = module_name.replace("_fpw_module.", "")
            if isinstance(m, XlaFullyShardedDataParallel):
                shard_info[module_name] = {h.shard._name: {"_orig_size": h.shard._orig_size,
                                                           "_orig_name": h.shard._orig_name} for h in m._handles}
            if isinstance(m, XlaFlattenParamsWrapper):
                for i, flat_name in enumerate(m.flat_param_names):
                    flatten_info[f"{module_name}.{flat_name}" if module_name else flat_name] = m.metadata(i)
        buffer_info = {name.replace("_fpw_module.", ""): {"_orig_dtype": buf._orig_dtype}
                       for name, buf in self.named_buffers() if hasattr(buf, "_orig_dtype")}
        return {"shard_info": shard_info, "flatten_info": flatten_info, "buffer_info": buffer_info,
                "world_size": self.world_size, "rank": self.rank}

    def get_original_names_and_sharded_parameters(self) -> list[tuple[str, nn.Parameter]]:
        """(original name, shard) of every shard, as `named_parameters` would name the unwrapped model's."""
        found = []
        for module_name, m in self.named_modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                prefix = f"{module_name}." if module_name else ""
                for h in m._handles:
                    found.append((user_name(prefix + h.shard._orig_name), h.shard))
        return found

    @contextlib.contextmanager
    def no_sync(self) -> Generator[None, None, None]:
        """Inside, backward passes accumulate the full gradients without reducing them (more memory); the first
        backward after it reduce-scatters the sum."""
        self._lazy_init()
        if not self._is_root:
            raise RuntimeError("no_sync is for the root FSDP module, not an inner one")
        self.assert_state(TrainingState.IDLE)
        flags = [(m, m._require_backward_grad_sync) for m in self.modules()
                 if isinstance(m, XlaFullyShardedDataParallel)]
        for m, _ in flags:
            m._require_backward_grad_sync = False
        try:
            yield
        finally:
            for m, old in flags:
                m._require_backward_grad_sync = old

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0, groups: list | None = None) -> torch.Tensor:
        """Scales every shard's gradient so that the norm of the whole model's gradient is at most `max_norm`.

        Args:
          max_norm: the largest norm allowed.
          norm_type: the p of the p-norm (`math.inf` for the largest magnitude).
          groups: replica groups of the norm's all-reduce.

        Returns:
          The whole gradient's norm before clipping (a device tensor).

        Raises:
          RuntimeError: called on an inner FSDP module.
        """
        self._lazy_init()
        if not self._is_root:
            raise RuntimeError("clip_grad_norm_ should only be called on the root (outermost) FSDP module")
        self.assert_state(TrainingState.IDLE)
        max_norm, norm_type = float(max_norm), float(norm_type)
        grads = [p.grad.detach() for p in self.params_with_grad]
        if not grads:
            return torch.zeros((), device=self.xla_device)
        if norm_type == math.inf:
            local = torch.stack([g.abs().max() for g in grads]).max()
            total = collectives.all_reduce(collectives.REDUCE_MAX, local, groups=groups, pin_layout=self.pin_layout)
        else:
            local = torch.stack([g.abs().pow(norm_type).sum() for g in grads]).sum()
            total = collectives.all_reduce(collectives.REDUCE_SUM, local, groups=groups, pin_layout=self.pin_layout)
            total = total ** (1.0 / norm_type)
        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
        return total

    # ---- the step ----------------------------------------------------------------------------------------
    def _lazy_init(self) -> None:
        if self._is_root is None:
            self._is_root = True
            for name, m in self.named_modules():
                if name and isinstance(m, XlaFullyShardedDataParallel) and m._is_root is None:
                    m._is_root = False
        if self._is_root and self.disable_reshard_on_root:
            self.reshard_after_forward = False

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._lazy_init()
        self.training_state = TrainingState.FORWARD
        if self.compute_dtype != torch.float32:
            args, kwargs = tree_map_only(
                torch.Tensor, lambda t: t.to(self.compute_dtype) if torch.is_floating_point(t) else t, (args, kwargs))
        inputs = tree_leaves((args, kwargs)) if self.optimization_barrier_in_forward else []
        self._rebuild_full_params([t for t in inputs if isinstance(t, torch.Tensor)])
        for handle in self._handles:
            handle.set_views()
        outputs = self.module(*args, **kwargs)
        grad_enabled = torch.is_grad_enabled()
        if not grad_enabled or (self.reshard_after_forward and not _recomputing()):
            # Without autograd no backward will come to free them; a checkpoint's recomputation is followed at
            # once by its backward, which would gather them again (PyTorch/XLA keeps them too).
            self._free_full_params()
        if grad_enabled:
            for t in tree_leaves(outputs):
                if isinstance(t, torch.Tensor) and t.requires_grad:
                    t.register_hook(self._pre_backward_hook)
        self.training_state = TrainingState.IDLE
        return outputs

    def _rebuild_full_params(self, after: list[torch.Tensor]) -> None:
        for handle in self._handles:
            if not handle.has_full:
                handle.gather(self.sharding_groups, self.pin_layout, after)

    def _free_full_params(self) -> None:
        for handle in self._handles:
            handle.free()

    def _pre_backward_hook(self, grad: torch.Tensor) -> None:
        """The backward reached one of this module's outputs: its full parameters must be there."""
        if self._is_root and not self._post_backward_callback_queued:
            self._post_backward_callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._rebuild_full_params([grad] if self.optimization_barrier_in_backward else [])
        if self.training_state == TrainingState.IDLE:
            self.training_state = TrainingState.BACKWARD_PRE

    def _post_backward_hook(self, handle: FullParam, full: torch.Tensor) -> None:
        """Autograd has accumulated the gradient of a full parameter: reduce-scatter it onto the shard."""
        self.training_state = TrainingState.BACKWARD_POST
        if full.grad is None or not self._require_backward_grad_sync:
            return  # inside no_sync the full gradient keeps accumulating, and the parameter stays gathered
        grad, full.grad = full.grad, None
        handle.free()
        handle.reduce_gradient(grad, self.world_size, self._shard_size_multiple, self.sharding_groups, self.pin_layout,
                               self.gradient_predivide_factor, self._reduce_scale, self.gradient_postdivide_factor,
                               self.fp32_reduce_scatter)

    def _finish_backward(self) -> None:
        """At the end of the backward (the root's autograd callback): every FSDP module frees what it gathered."""
        for m in self.modules():
            if isinstance(m, XlaFullyShardedDataParallel):
                if m._require_backward_grad_sync:
                    m._free_full_params()  # frozen parameters, and modules the backward did not reach
                m.training_state = TrainingState.IDLE
        self._post_backward_callback_queued = False
        if self.sync_on_finalization:
            mark_step()
