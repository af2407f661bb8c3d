"""`torch_xla.core.xla_model` (`xm`) on xladev: renames of, and thin adapters onto, xladev's API.

Each process of a job (`xmp.spawn`, `torch_xla.launch` or `torchrun`) is one replica on its `xla:0`: the
ordinals and world size are the job's, and the collectives (`all_reduce`, `all_gather`, `reduce_scatter`,
`collective_broadcast`, `all_to_all`, `collective_permute`) are xladev's, recorded into the step's graph as
XLA collectives. A lone process is one replica, as in PyTorch/XLA without replication: ordinal 0, world
size 1, `all_reduce` a copy.
"""

from __future__ import annotations

import copy
import sys
from typing import Any, Callable, TextIO

import torch

import xladev
import xladev.debug

import torch_xla
from torch_xla import _xladev

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
    """Seeds the device RNG: `xladev.manual_seed`."""
    xladev.manual_seed(seed, None if device is None else torch.device(device))


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


def optimization_barrier_(tensors: list[torch.Tensor]) -> None:
    """Passes `tensors` through one optimization barrier, in place: XLA neither moves computations across it nor
    merges what reads the tensors afterwards with what read them before (xladev's `xla::optimization_barrier`).

    Args:
      tensors: xla tensors on one device.
    """
    from xladev.runtime.opt_barrier import optimization_barrier_ as barrier  # here: this file's imports are shared

    barrier(tensors)


__getattr__ = _xladev.module_getattr(__name__)
