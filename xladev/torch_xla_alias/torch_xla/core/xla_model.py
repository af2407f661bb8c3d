"""`torch_xla.core.xla_model` (`xm`) on xladev: renames of, and thin adapters onto, xladev's API.

Each process of a job (`xmp.spawn`, `torch_xla.launch` or `torchrun`) is one replica on its `xla:0`: the
ordinals and world size are the job's, and the collectives (`all_reduce`, `all_gather`, `reduce_scatter`,
`collective_broadcast`, `all_to_all`, `collective_permute`) are xladev's, recorded into the step's graph as
XLA collectives. A lone process is one replica, as in PyTorch/XLA without replication: ordinal 0, world
size 1, `all_reduce` a copy.
"""

from __future__ import annotations

import contextlib
import copy
import sys
from typing import Any, Callable, Iterator, TextIO, TypedDict

import torch

import xladev
import xladev.debug
from xladev.runtime.distributed.collectives import fetch_gradients as _fetch_gradients  # noqa: F401  (PyTorch/XLA's AMP scripts)
from xladev.runtime.distributed.input_sharding import check_input_sharding, shard_inputs

import torch_xla
from torch_xla import _xladev
from torch_xla.core._rate_tracker import RateTracker  # noqa: F401  (PyTorch/XLA's name for it: xm.RateTracker)

REDUCE_SUM, REDUCE_MUL, REDUCE_AND = xladev.REDUCE_SUM, xladev.REDUCE_MUL, xladev.REDUCE_AND
REDUCE_OR, REDUCE_MIN, REDUCE_MAX = xladev.REDUCE_OR, xladev.REDUCE_MIN, xladev.REDUCE_MAX

# Straight renames: same arguments, same behaviour (xladev's were written to PyTorch/XLA's signatures).
add_step_closure = xladev.add_step_closure


def is_xla_tensor(tensor: torch.Tensor) -> bool:
    """Whether `tensor` lives on an xla device."""
    return tensor.device.type == "xla"


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    """The xla device `xla:n` (`xla:0` when None): `xladev.device`.

    Args:
      n: the device index.
      devkind: accepted and ignored, as in PyTorch/XLA 2.x.

    Raises:
      ValueError: this process has no such device.
    """
    return xladev.device(n)


def get_xla_supported_devices(devkind: str | None = None, max_devices: int | None = None) -> list[str]:
    """The xla devices of this process as strings (`['xla:0', ...]`).

    Args:
      devkind: ignored; an int here is taken as `max_devices` (newer PyTorch/XLA dropped `devkind`).
      max_devices: return at most this many.

    Returns:
      Device names.
    """
    if isinstance(devkind, int) and max_devices is None:
        max_devices = devkind
    names = [str(d) for d in xladev.devices()]
    return names[:max_devices] if max_devices else names


def _hardware() -> str:
    return xladev.config.pjrt_device


def xla_device_hw(device: str | torch.device) -> str:
    """The hardware behind an xla device: `CPU` or `CUDA` (xladev's `PJRT_DEVICE`).

    Raises:
      ValueError: not an xla device of this process.
    """
    xladev.device(_index_of(device))
    return _hardware()


def xla_real_devices(devices: list | None = None) -> list[str]:
    """The runtime names (`CPU:0`...) of xla devices; all of this process's when None."""
    indices = [_index_of(d) for d in devices] if devices else range(xladev.device_count())
    return [f"{_hardware()}:{i}" for i in indices]


def _index_of(device: str | torch.device) -> int:
    parsed = torch.device(device)
    if parsed.type != "xla":
        raise ValueError(f"{device} is not an xla device")
    return parsed.index or 0


def get_ordinal(defval: int = 0) -> int:
    """This process's replica ordinal in the job (PyTorch/XLA now spells it `torch_xla.runtime.global_ordinal()`)."""
    return xladev.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    """This process's replica ordinal on its host."""
    return xladev.local_ordinal()


def is_master_ordinal(local: bool = True) -> bool:
    """Whether this process is replica 0, of its host (`local=True`) or of the job."""
    return (xladev.local_ordinal() if local else xladev.global_ordinal()) == 0


def xrt_world_size(defval: int = 1) -> int:
    """The replicas taking part (PyTorch/XLA now spells it `torch_xla.runtime.world_size()`)."""
    return xladev.world_size()


def master_print(*args: Any, fd: TextIO | None = None, local: bool = False, flush: bool = False) -> None:
    """`print` on the master ordinal only (of the host with `local=True`, else of the job).

    Args:
      fd: the stream; the current `sys.stdout` when None.
      local: master of this host rather than of the job.
      flush: flush the stream.
    """
    if is_master_ordinal(local=local):
        print(*args, file=sys.stdout if fd is None else fd, flush=flush)


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    """Ends the step: `xladev.mark_step`.

    Args:
      wait: block until the step's graph has run.
      reset_scope: as PyTorch/XLA's: True (default) refuses to mark the step inside an open `xp.Trace`
        region; False marks it there anyway.

    Raises:
      TraceScopeError: (a RuntimeError) `reset_scope` is True and an `xp.Trace` region is open; nothing was synced.
    """
    torch_xla.sync(wait=wait, reset_scope=reset_scope)  # one barrier under two names, as in PyTorch/XLA


def wait_device_ops(devices: list | None = None) -> None:
    """Blocks until pending executions and asynchronous step closures are done: `xladev.wait_device_ops`.

    Args:
      devices: accepted; xladev waits for all of this process's devices.
    """
    xladev.wait_device_ops()


def reduce_gradients(optimizer: torch.optim.Optimizer, groups: list | None = None, pin_layout: bool = True) -> None:
    """Averages the optimizer's gradients across the replicas in one all-reduce: `xladev.reduce_gradients`."""
    xladev.reduce_gradients(optimizer, groups=groups, pin_layout=pin_layout)


def optimizer_step(optimizer: torch.optim.Optimizer, barrier: bool = False, optimizer_args: dict | None = None,
                   groups: list | None = None, pin_layout: bool = True) -> Any:
    """Averages the gradients across the replicas, runs `optimizer.step(**optimizer_args)`, then a barrier if
    asked: `xladev.optimizer_step`.

    Args:
      optimizer: the optimizer.
      barrier: mark the step after it (not needed under `MpDeviceLoader`, which marks each step).
      optimizer_args: keyword arguments of `optimizer.step`.
      groups: replica groups of the gradient all-reduce.
      pin_layout: as PyTorch/XLA's.

    Returns:
      What `optimizer.step` returned.
    """
    return xladev.optimizer_step(optimizer, barrier=barrier, optimizer_args=optimizer_args, groups=groups,
                                 pin_layout=pin_layout)


def set_rng_state(seed: int, device: str | torch.device | None = None) -> None:
    """Sets the device RNG's state to `seed` (the default device's when None), as `get_rng_state` returns it.

    Args:
      seed: the state, an integer (taken modulo 2**64).
      device: the xla device.
    """
    xladev.manual_seed(seed, torch.device(device) if device else xladev.device())


def get_rng_state(device: str | torch.device | None = None) -> int:
    """The device RNG's state as an integer: the seed after `set_rng_state(seed)`, advanced by each random op.

    Args:
      device: the xla device (the default one when None).

    Returns:
      The state; `set_rng_state` of it restores the generator exactly.
    """
    from xladev.runtime.record import rng

    return rng.seed_of(_index_of(device) if device else 0)


@contextlib.contextmanager
def fork_rng(device: str | torch.device | None = None, enabled: bool = True) -> Iterator[None]:
    """Restores the device RNG's state on the way out of the block.

    Args:
      device: the xla device (the default one when None).
      enabled: False makes the block a no-op.
    """
    if not enabled:
        yield
        return
    state = get_rng_state(device)
    try:
        yield
    finally:
        set_rng_state(state, device)


class MemoryInfo(TypedDict):
    """`get_memory_info()`'s answer, in bytes."""

    bytes_used: int
    bytes_limit: int
    peak_bytes_used: int


def get_memory_info(device: str | torch.device | None = None) -> MemoryInfo:
    """Device memory in use, the limit and the peak: `xladev.debug.memory_info`.

    On the CPU backend, the use is the live device buffers and the limit the host's memory; on a GPU, the
    allocator's own statistics.

    Args:
      device: the xla device (the default one when None).

    Raises:
      ValueError: not an xla device of this process.
    """
    return MemoryInfo(**xladev.debug.memory_info(xladev.device(_index_of(device)) if device else None))


def get_stablehlo(tensors: list[torch.Tensor] | None = None) -> str:
    """StableHLO text of the graph computing `tensors` (of everything pending when None): `xladev.debug.get_stablehlo`."""
    return xladev.debug.get_stablehlo(tensors)


# The collectives: xladev's, which follow PyTorch/XLA's signatures and its world-size-1 behaviour (`all_reduce`
# returns a copy without applying `scale`).
all_reduce = xladev.all_reduce
all_gather = xladev.all_gather
reduce_scatter = xladev.reduce_scatter
all_to_all = xladev.all_to_all
collective_permute = xladev.collective_permute
rendezvous = xladev.rendezvous
mesh_reduce = xladev.mesh_reduce


def xla_rendezvous(payload: bytes = b"", ordinals: list[int] | None = None, tag: str | None = None) -> list[bytes]:
    """Shares `payload` with the replicas in `ordinals` (every replica when None): `xladev.rendezvous`.

    Returns:
      The payloads, by rank (of `ordinals[i]` at position i when given).
    """
    return xladev.rendezvous(tag or "", payload, ordinals)


def reduce_scatter_bucketized(reduce_type: str, input_list: list[torch.Tensor], scale: float, scatter_dim: int,
                              shard_count: int, groups: list | None = None, output: list[torch.Tensor] | None = None,
                              pin_layout: bool = False, bucket_cap_mb: int = 160) -> list[torch.Tensor]:
    """`xm.reduce_scatter` of a list, one collective per bucket of at most `bucket_cap_mb` MB of inputs.

    Returns:
      Each input's slice, in order (`output` when given, written).
    """
    from xladev.runtime.distributed.collective_lists import bucketized

    return bucketized(lambda ins, outs: reduce_scatter(reduce_type, ins, scale, scatter_dim, shard_count, groups,
                                                       outs, pin_layout), input_list, output, bucket_cap_mb,
                      "reduce_scatter_bucketized")


def all_gather_bucketized(input_list: list[torch.Tensor], dim: int = 0, groups: list | None = None,
                          output: list[torch.Tensor] | None = None, pin_layout: bool = False,
                          bucket_cap_mb: int = 160) -> list[torch.Tensor]:
    """`xm.all_gather` of a list, one collective per bucket of at most `bucket_cap_mb` MB of inputs.

    Returns:
      Each input gathered, in order (`output` when given, written).
    """
    from xladev.runtime.distributed.collective_lists import bucketized

    return bucketized(lambda ins, outs: all_gather(ins, dim, groups, outs, pin_layout), input_list, output,
                      bucket_cap_mb, "all_gather_bucketized")


def collective_broadcast(tensors: list[torch.Tensor], root_ordinal: int = 0, groups: list | None = None,
                         pin_layout: bool = True) -> None:
    """Overwrites `tensors`, in place, with the root replica's values: `xladev.broadcast`.

    Args:
      tensors: the tensors.
      root_ordinal: the replica whose values are sent.
      groups: replica groups.
      pin_layout: as PyTorch/XLA's.
    """
    xladev.broadcast(tensors, root=root_ordinal, groups=groups)


def do_on_ordinals(target: Callable, data: tuple | Any = (), ordinals: list | set | int = (0,)) -> Any:
    """Runs `target(*data)` on the given ordinals only, with `data`'s tensors copied to the CPU, then waits for
    every replica (a rendezvous).

    Returns:
      What `target` returned on those ordinals, else None.
    """
    ordinals = {ordinals} if isinstance(ordinals, int) else set(ordinals)
    running = get_ordinal() in ordinals
    result = None
    if running:
        args = _to_cpu(data if isinstance(data, tuple) else (data,))
        result = target(*args)
    rendezvous("torch_xla.core.xla_model.do_on_ordinals")
    return result


def save(data: Any, file_or_path: Any, master_only: bool = True, global_master: bool = False) -> None:
    """Saves `data` with `torch.save`, its xla tensors copied to the CPU first (so `torch.load` gives CPU tensors).

    Args:
      data: any nesting of lists, tuples, dicts and sets holding tensors (a `state_dict`...).
      file_or_path: a path or a file object.
      master_only: only the master replica writes (of the host, or of the job with `global_master`).
      global_master: with `master_only`, the job's master rather than each host's.
    """
    cpu = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu, file_or_path)
    rendezvous("torch_xla.core.xla_model.save")


class ToXlaTensorArena:
    """Replaces the tensors `select_fn` picks inside any nesting of containers, converting them all in one call.

    `transform(inputs)` walks `inputs` (`torch_xla.utils.utils.for_each_instance` order), hands every selected
    tensor to `convert_fn` at once, and returns a copy of `inputs` holding the converted ones in their places.

    Args:
      convert_fn: maps the list of selected tensors to a list of replacements, in the same order.
      select_fn: which objects to convert.
    """

    def __init__(self, convert_fn: Callable[[list[torch.Tensor]], list[torch.Tensor]],
                 select_fn: Callable[[Any], bool]) -> None:
        self._convert_fn = convert_fn
        self._select_fn = select_fn

    def transform(self, inputs: Any) -> Any:
        """A copy of `inputs` with the selected tensors converted (lists for tuples, as PyTorch/XLA's walk).

        Raises:
          ValueError: `convert_fn` returned a different number of tensors than it was given.
        """
        from torch_xla.utils import utils as xu

        found: list = []
        xu.for_each_instance(inputs, self._select_fn, found.append)
        converted = list(self._convert_fn(found)) if found else []
        if len(converted) != len(found):
            raise ValueError(f"ToXlaTensorArena's convert_fn returned {len(converted)} tensors for {len(found)}")
        replacements = iter(converted)
        return xu.for_each_instance_rewrite(inputs, self._select_fn, lambda _: next(replacements))


def _tensors_to_device(tensors: list[torch.Tensor], device: str | torch.device) -> list[torch.Tensor]:
    """Copies of CPU tensors on an xla device, each a new leaf that keeps its `requires_grad`."""
    return [t.detach().to(device).requires_grad_(t.requires_grad) for t in tensors]


def send_cpu_data_to_device(datas: Any, device: str | torch.device, input_sharding: Any = None) -> Any:
    """`datas` (a tensor, or any nesting of containers) with every CPU tensor copied to `device`.

    Args:
      datas: a tensor (the result is then a one-element list, as PyTorch/XLA's) or a nesting holding tensors.
      device: the xla device.
      input_sharding: SPMD: a `ShardingSpec` to mark each copied tensor it applies to with (`xs.ShardingSpec`).

    Returns:
      The same structure (lists for tuples) with xla tensors in place of the CPU ones.

    Raises:
      RuntimeError: SPMD mode is off while `input_sharding` is given, or its minibatch check fails.
      TypeError: `input_sharding` is not a ShardingSpec.
    """
    if input_sharding is not None:
        check_input_sharding(input_sharding)  # before any copy
    if type(datas) is torch.Tensor:
        datas = [datas]
    copied = []

    def to_device(tensors):
        moved = _tensors_to_device(tensors, device)
        copied.extend(moved)
        return moved

    result = ToXlaTensorArena(to_device, lambda v: type(v) is torch.Tensor and v.device.type == "cpu").transform(datas)
    if input_sharding is not None:
        shard_inputs(copied, input_sharding)
    return result


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Gives every replica the master replica's parameters and buffers, in one broadcast, then marks the step."""
    xladev.broadcast(list(model.parameters()) + list(model.buffers()), root=0)
    xladev.mark_step()


def _to_cpu(data: Any, seen: dict | None = None) -> Any:
    """`data` with every xla tensor replaced by a CPU copy; a tensor met twice is copied once (kept shared)."""
    seen = {} if seen is None else seen
    if isinstance(data, torch.Tensor):
        if data.device.type != "xla":
            return data
        if id(data) not in seen:
            seen[id(data)] = data.detach().cpu()
        return seen[id(data)]
    if isinstance(data, dict):
        out = copy.copy(data)  # keeps the mapping's type and attributes (a state_dict's `_metadata`)
        for key, value in data.items():
            out[key] = _to_cpu(value, seen)
        return out
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a namedtuple
        return type(data)(*(_to_cpu(v, seen) for v in data))
    if isinstance(data, (list, tuple, set, frozenset)):
        return type(data)(_to_cpu(v, seen) for v in data)
    return data


def _maybe_convert_to_cpu(data: Any, convert: bool = True) -> Any:
    """PyTorch/XLA's helper behind `xm.save` (its tests call it): `data` with its xla tensors computed and, with
    `convert`, replaced by CPU copies (a tensor met twice copied once)."""
    if not convert:
        xladev.sync(wait=True)
        return data
    return _to_cpu(data)


def optimization_barrier_(tensors: list[torch.Tensor]) -> None:
    """Passes `tensors` through one optimization barrier, in place: XLA neither moves computations across it nor
    merges what reads the tensors afterwards with what read them before (xladev's `xla::optimization_barrier`).

    Args:
      tensors: xla tensors on one device.
    """
    from xladev.runtime.record.opt_barrier import optimization_barrier_ as barrier  # here: this file's imports are shared

    barrier(tensors)


__getattr__ = _xladev.module_getattr(__name__)
