"""`torch_xla.core.xla_model` (`xm`) on xladev: renames of, and thin adapters onto, xladev's API.

xladev runs one process with one replica, so the replication names answer as PyTorch/XLA does in a single
process: ordinal 0, world size 1, master everywhere; `all_reduce`, `all_gather`, `rendezvous` and
`mesh_reduce` work over that one replica, as PyTorch/XLA's do when the world size is 1.
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

REDUCE_SUM = "sum"
REDUCE_MUL = "mul"
REDUCE_AND = "and"
REDUCE_OR = "or"
REDUCE_MIN = "min"
REDUCE_MAX = "max"
_REDUCE_TYPES = frozenset((REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX))

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
    """0: this process's replica ordinal (PyTorch/XLA now spells it `torch_xla.runtime.global_ordinal()`)."""
    return 0


def get_local_ordinal(defval: int = 0) -> int:
    """0: this process's ordinal on this host."""
    return 0


def is_master_ordinal(local: bool = True) -> bool:
    """True: the only replica is the master, locally and globally."""
    return True


def xrt_world_size(defval: int = 1) -> int:
    """1: the replicas taking part (PyTorch/XLA now spells it `torch_xla.runtime.world_size()`)."""
    return 1


def master_print(*args: Any, fd: TextIO | None = None, local: bool = False, flush: bool = False) -> None:
    """`print` on the master ordinal, which is this process.

    Args:
      fd: the stream; the current `sys.stdout` when None.
      local, flush: as PyTorch/XLA's (`local` changes nothing with one replica).
    """
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
    """Nothing to do: gradients are all-reduced across replicas, and there is one (as in PyTorch/XLA at world size 1)."""


def optimizer_step(optimizer: torch.optim.Optimizer, barrier: bool = False, optimizer_args: dict | None = None,
                   groups: list | None = None, pin_layout: bool = True) -> Any:
    """`optimizer.step(**optimizer_args)`, then a barrier if asked: `xladev.optimizer_step`.

    Args:
      optimizer: the optimizer.
      barrier: mark the step after it (not needed under `MpDeviceLoader`, which marks each step).
      optimizer_args: keyword arguments of `optimizer.step`.
      groups, pin_layout: replica groups of the gradient all-reduce; one replica here.

    Returns:
      What `optimizer.step` returned.
    """
    reduce_gradients(optimizer, groups, pin_layout)
    return xladev.optimizer_step(optimizer, barrier=barrier, optimizer_args=optimizer_args)


def set_rng_state(seed: int, device: str | torch.device | None = None) -> None:
    """Seeds the device RNG: `xladev.manual_seed`."""
    xladev.manual_seed(seed, None if device is None else torch.device(device))


def get_stablehlo(tensors: list[torch.Tensor] | None = None) -> str:
    """StableHLO text of the graph computing `tensors` (of everything pending when None): `xladev.debug.get_stablehlo`."""
    return xladev.debug.get_stablehlo(tensors)


def _check_reduce_type(reduce_type: str) -> None:
    if reduce_type not in _REDUCE_TYPES:
        raise ValueError(f"xm.all_reduce: unknown reduce_type {reduce_type!r}; use one of xm.REDUCE_SUM, "
                         "REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX")


def all_reduce(reduce_type: str, inputs: torch.Tensor | list[torch.Tensor], scale: float = 1.0,
               groups: list | None = None, pin_layout: bool = True):
    """Reduces across replicas; with one replica the values are already reduced.

    As PyTorch/XLA does when the world size is 1, nothing is computed and `scale` is not applied: a tensor
    comes back as a copy, a list comes back as it is.

    Args:
      reduce_type: one of `REDUCE_SUM`, `REDUCE_MUL`, `REDUCE_AND`, `REDUCE_OR`, `REDUCE_MIN`, `REDUCE_MAX`.
      inputs: a tensor, or a list of tensors reduced in place.
      scale, groups, pin_layout: as PyTorch/XLA's.

    Returns:
      A copy of the tensor, or the list itself.

    Raises:
      ValueError: an unknown `reduce_type`.
    """
    _check_reduce_type(reduce_type)
    return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs


def all_gather(value: torch.Tensor, dim: int = 0, groups: list | None = None, output: torch.Tensor | None = None,
               pin_layout: bool = True) -> torch.Tensor:
    """Concatenates `value` from every replica along `dim`: with one replica, `value` itself (a copy).

    Args:
      value: this replica's tensor.
      dim: the concatenation dimension.
      groups, pin_layout: as PyTorch/XLA's.
      output: if given, receives the result (and is returned).

    Returns:
      The gathered tensor.
    """
    if output is not None:
        return output.copy_(value)
    return value.clone()


def rendezvous(tag: str, payload: bytes = b"", replicas: list | None = None) -> list[bytes]:
    """Waits for every replica to reach `tag`; with one replica, returns at once.

    Returns:
      Each replica's payload, by ordinal: `[payload]`.
    """
    return [payload]


def mesh_reduce(tag: str, data: Any, reduce_fn: Callable[[list], Any]) -> Any:
    """Reduces `data` from every replica with `reduce_fn`: here `reduce_fn([data])`, tensors copied to the CPU.

    Args:
      tag: the rendezvous name.
      data: any nesting of Python values and tensors.
      reduce_fn: called with the list of every replica's `data`.

    Returns:
      What `reduce_fn` returned.
    """
    return reduce_fn([_to_cpu(data)])


def save(data: Any, file_or_path: Any, master_only: bool = True, global_master: bool = False) -> None:
    """Saves `data` with `torch.save`, its xla tensors copied to the CPU first (so `torch.load` gives CPU tensors).

    Args:
      data: any nesting of lists, tuples, dicts and sets holding tensors (a `state_dict`...).
      file_or_path: a path or a file object.
      master_only, global_master: who writes; this process is the master either way.
    """
    torch.save(_to_cpu(data), file_or_path)


def broadcast_master_param(model: torch.nn.Module) -> None:
    """Copies the master replica's parameters to the others; with one replica there is nothing to copy."""


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


__getattr__ = _xladev.module_getattr(__name__)
