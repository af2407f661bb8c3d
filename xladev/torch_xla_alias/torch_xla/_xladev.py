"""The alias's own plumbing: which torch_xla names xladev does not provide, and the errors that say so.

Every module of the alias ends with `__getattr__ = module_getattr(__name__, ...)`, and `torch_xla/__init__.py`
installs `_MissingSubmoduleFinder`, so a name the alias lacks fails with its full dotted name and advice:

    torch_xla.core.xla_model.all_to_all is not supported by xladev: ...

`UNSUPPORTED` is the one table of known names and their advice; a name not in it gets a generic message.
The errors subclass the built-in ones Python expects at each kind of use (AttributeError for `xm.foo` and
`hasattr`, ImportError for `from ... import foo`, ModuleNotFoundError for `import torch_xla.foo`), so code
that probes for a feature behaves as it would with an older torch_xla.
"""

from __future__ import annotations

import dis
import importlib
import sys
from typing import Callable, Iterable

from xladev.errors import XladevError

_DISTRIBUTED = ("xladev's jobs are data parallel over processes (xmp.spawn, torch_xla.launch, torchrun with the "
                "'xla' backend), one replica per process, with xm.all_reduce, all_gather, reduce_scatter, "
                "collective_broadcast, all_to_all and collective_permute (docs/distributed.md)")
_SPMD = "use torch_xla.distributed.spmd (xs.Mesh, xs.mark_sharding; docs/distributed.md)"
_CPP = ("PyTorch/XLA's C++ bindings do not exist here: of torch_xla._XLAC, xladev provides the debug getters "
        "(_get_xla_tensors_text, _get_xla_tensors_hlo, _get_xla_tensor_debug_info, _get_graph_hash, "
        "_get_xla_sharding_spec, _get_xla_sharding_type) and the runtime's plain answers (_xla_get_default_device, "
        "_xla_real_devices, "
        "_xla_get_rng_seed, _xla_memory_info, _xla_get_num_cached_compilation_graph, _get_executed_fallback_ops, "
        "_set_allow_execution, _xla_sync_multi, _xla_set_mat_mul_precision, _xla_tensors_from_aten, "
        "_get_xla_tensor_dimension_size, _get_xla_tensor_shape_type, _unsafe_buffer_pointer, _get_git_revs), what "
        "distributed checkpoints call (_get_local_shard_replica_and_indices, "
        "_get_local_shards, _global_tensor_from_cpu_shards, _xla_get_cpu_tensors, _ensure_xla_coordinator_initialized, "
        "_activate_preemption_sync_manager, _deactivate_preemption_sync_manager, _sync_point_reached), manual "
        "sharding's (_spmd_full_to_shard_shape, _spmd_shard_to_full_shape); use the "
        "public API for the rest: torch_xla.sync(), "
        "torch_xla.debug.metrics, xladev.debug")

_CHANNEL = ("XLA's Send/Recv with a channel id are not available: jax runs them (lax.psend/precv) on GPUs only, and "
            "a channel id names no peer; use dist.send/dist.recv on the 'xla' backend (a collective permute of the "
            "pair) or xm.collective_permute with every (source, target) pair")

# Full dotted name -> advice. An entry for a module also covers every name below it.
UNSUPPORTED: dict[str, str] = {
    "torch_xla._XLAC": _CPP,
    "torch_xla.experimental": ("the other experimental APIs are not available (eager mode, scan, scan_layers, "
                               "custom_kernel's make_kernel_from_pallas and flash_attention, FSDPv2 and "
                               "distributed_checkpoint are)"),
    "torch_xla.experimental.custom_kernel": ("PyTorch/XLA's TPU-only kernels (paged and ragged paged attention, "
                                             "gmm, quantized matmul) and its TPU custom call (trace_pallas) are "
                                             "not available; make_kernel_from_pallas runs any Pallas kernel, "
                                             "flash_attention runs attention"),
    "torch_xla.stablehlo": "StableHLO export is not available; xm.get_stablehlo(tensors) gives a graph's StableHLO text",
    "torch_xla.utils": ("of torch_xla.utils, xladev provides utils.utils (PyTorch/XLA's helpers), "
                        "serialization (save/load) and checkpoint (gradient checkpointing)"),
    "torch_xla.core.xla_builder": ("xb.Op builds a computation from XLA's operations inside a function that "
                                   "torch_xla.core.xla_op_registry.register runs; an XLA computation object of its "
                                   "own (create_computation, mkop, computation_from_module_proto, Op.build, an XLA "
                                   "computation handed to an op) is not available: a computation is a jax function "
                                   "here (xb.call_jax)"),
    "torch_xla.core.functions": ("of torch_xla.core.functions, xladev provides all_reduce and all_gather "
                                 "(differentiable); distributed_mm and SyncBatchNorm are not provided"),
    "torch_xla.distributed.data_parallel.DataParallel": ("PyTorch/XLA's deprecated multi-thread DataParallel is not "
                                                         "provided; run one process per device (torch_xla.launch, "
                                                         "xmp.spawn) or SPMD. " + _DISTRIBUTED),
    "torch_xla.distributed.xla_sharding": "the old path of the SPMD API: " + _SPMD,
    "torch_xla.distributed.fsdp": ("of torch_xla.distributed.fsdp, xladev provides XlaFullyShardedDataParallel, "
                                   "checkpoint_module, consolidate_sharded_model_checkpoints and "
                                   "consolidate_sharded_state_dicts, the wrap module's policies and "
                                   "XlaFlattenParamsWrapper (docs/distributed.md)"),
    "torch_xla.distributed.fsdp.utils": ("of fsdp.utils, xladev provides checkpoint_module and "
                                         "apply_xla_patch_to_nn_linear; PyTorch/XLA's bucketed reduce-scatter is "
                                         "internal to its FSDP (here each parameter has its own collective)"),
    "torch_xla.distributed.zero_redundancy_optimizer": ("of zero_redundancy_optimizer, xladev provides "
                                                        "ZeroRedundancyOptimizer"),
    "torch_xla.runtime.get_master_ip": ("there is no TPU metadata server to ask; the job's master is MASTER_ADDR "
                                        "(set by torchrun)"),
    "torch_xla.core.xla_model.world_size": "PyTorch/XLA has no xm.world_size; use torch_xla.runtime.world_size()",
    "torch_xla.core.xla_model.send": _CHANNEL,
    "torch_xla.core.xla_model.recv": _CHANNEL,
    "torch_xla.core.xla_model.all_reduce_bucketized_gradients": ("use xm.reduce_gradients(optimizer): xladev "
                                                                 "all-reduces every gradient in one collective"),
    "torch_xla.core.xla_model.set_replication": ("replication is set up by the job (xmp.spawn, torch_xla.launch, "
                                                 "torchrun); " + _DISTRIBUTED),
    "torch_xla.core.xla_model.xla_replication_devices": ("each process of a job is one replica on its xla:0; "
                                                         "use torch_xla.runtime.world_size()"),
    "torch_xla.core.xla_model.xla_device_kind": "use xm.xla_device_hw(device) (CPU or CUDA)",
    "torch_xla.core.xla_model.unlazy": "use torch_xla.sync(), which materialises every pending tensor",
    "torch_xla.core.xla_model.get_stablehlo_bytecode": "use xm.get_stablehlo(tensors) (text)",
    "torch_xla.core.xla_model.parse_xla_device": "use torch.device(name).index",
    "torch_xla.debug.metrics_compare_utils.compare_metrics": ("compare two runs' metrics with `xladev report A B`, "
                                                              "which says which differences matter"),
    "torch_xla.debug.profiler.set_tracer_marked_step": ("StepTrace and the loaders mark the step themselves "
                                                        "under xladev"),
    "torch_xla.debug.profiler.get_tracer_marked_step": "StepTrace and the loaders mark the step themselves under xladev",
}

_GENERIC = ("xladev's torch_xla alias does not provide it. The alias covers PyTorch/XLA's everyday single-process "
            "API (docs/compat.md in xladev lists it); xladev's own API (`import xladev`) may have an equivalent")


def message(fullname: str) -> str:
    """The error text for a torch_xla name the alias does not provide.

    Args:
      fullname: the dotted name, e.g. `torch_xla.core.xla_model.foo`.

    Returns:
      One line naming it, with the table's advice (of the name or of its nearest listed parent), or the generic text.
    """
    parts = fullname.split(".")
    for end in range(len(parts), 0, -1):
        advice = UNSUPPORTED.get(".".join(parts[:end]))
        if advice is not None:
            return f"{fullname} is not supported by xladev: {advice}"
    return f"{fullname} is not available: {_GENERIC}"


class UnsupportedAttributeError(XladevError, AttributeError):
    """`module.name` for a torch_xla name the alias does not provide (so `hasattr` is False)."""


class UnsupportedImportError(XladevError, ImportError):
    """`from torch_xla... import name` for a name the alias does not provide."""


class UnsupportedModuleError(XladevError, ModuleNotFoundError):
    """`import torch_xla.x` for a module the alias does not provide."""


def _called_by_import_from() -> bool:
    # Python turns an AttributeError raised during `from m import name` into its own ImportError and drops
    # the message, so that case raises an ImportError directly. The frame two levels up is the one running
    # the statement: `__getattr__` is called from C, straight from its IMPORT_FROM instruction.
    try:
        frame = sys._getframe(2)
        return dis.opname[frame.f_code.co_code[frame.f_lasti]] == "IMPORT_FROM"
    except (AttributeError, IndexError, ValueError):  # another interpreter: fall back to AttributeError
        return False


def module_getattr(module_name: str, submodules: Iterable[str] = ()) -> Callable[[str], object]:
    """The `__getattr__` of an alias module: imports its listed submodules on first use, refuses the rest.

    Args:
      module_name: the module's `__name__`.
      submodules: names of the alias's own submodules of a package, imported when first accessed.

    Returns:
      A function for the module's `__getattr__`.
    """
    lazy = frozenset(submodules)

    def __getattr__(name: str):
        if name in lazy:
            return importlib.import_module(f"{module_name}.{name}")
        if name.startswith("__") and name.endswith("__"):
            # Dunder probes (`__path__`, `__file__`, `__wrapped__`...) by tools are not user names.
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        text = message(f"{module_name}.{name}")
        if _called_by_import_from():
            raise UnsupportedImportError(text, name=module_name)
        raise UnsupportedAttributeError(text, name=name, obj=sys.modules.get(module_name))

    return __getattr__


class _MissingSubmoduleFinder:
    """The last finder on `sys.meta_path`: a `torch_xla.*` module no other finder found gets the table's message."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        if not fullname.startswith("torch_xla."):
            return None
        # `name=fullname` lets `from torch_xla import foo` go on to the package's `__getattr__`, as Python
        # does for any missing submodule, so the statement raises UnsupportedImportError with the message.
        raise UnsupportedModuleError(message(fullname), name=fullname)


def install_finder() -> None:
    """Appends the missing-submodule finder to `sys.meta_path` once (at the end: real modules win)."""
    if not any(isinstance(f, _MissingSubmoduleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MissingSubmoduleFinder())
