"""`torch_xla.runtime` (`xr`) on xladev: the job's processes, one replica each.

Under `xmp.spawn`, `torch_xla.launch` or `torchrun`, the world size is the number of processes and each
process's ordinal its rank; a lone process answers as PyTorch/XLA without replication (world size 1,
ordinal 0). Device counts are xladev's (`xladev.device_count()`, the jax devices of the process).
"""

from __future__ import annotations

import os

import xladev

from torch_xla import _xladev


def device_type() -> str:
    """The backend, `CPU` or `CUDA`: xladev's `PJRT_DEVICE` setting (`xladev.config.pjrt_device`)."""
    return xladev.config.pjrt_device


def set_device_type(pjrt_device: str) -> None:
    """Accepts the backend the process already runs on; another one cannot be chosen once it has started.

    Args:
      pjrt_device: `CPU` or `CUDA` (any case).

    Raises:
      RuntimeError: it differs from the running backend; the message says to set `PJRT_DEVICE` before starting.
    """
    wanted = str(pjrt_device).upper()
    if wanted != device_type():
        raise RuntimeError(f"xladev already runs on {device_type()} (PJRT_DEVICE); start the script with "
                           f"PJRT_DEVICE={wanted} to use {wanted}")


def get_num_cached_compilation_graph() -> int:
    """How many compiled graphs the in-memory cache holds: `xladev.debug.num_cached_graphs`."""
    import xladev.debug

    return xladev.debug.num_cached_graphs()


def using_pjrt() -> bool:
    """True: xladev, like PyTorch/XLA 2.x, has no other runtime."""
    return True


def use_spmd(auto: bool = False) -> None:
    """Turns SPMD mode on: `xla:0` stands for every local device (`xladev.spmd.use_spmd`).

    Raises:
      ValueError: `auto=True` (XLA's auto-sharding is not available).
    """
    if auto:
        raise ValueError("use_spmd(auto=True): XLA's auto-sharding is not available in xladev: jax 0.10.2 no longer "
                         "offers it (jax.sharding.AUTO was removed); mark the shardings with "
                         "torch_xla.distributed.spmd.mark_sharding")
    import xladev.spmd

    xladev.spmd.use_spmd()
    os.environ["XLA_USE_SPMD"] = "1"  # as PyTorch/XLA sets it: scripts (and its tests) read and clear it


def is_spmd() -> bool:
    """Whether SPMD mode is on."""
    import xladev.spmd

    return xladev.spmd.is_spmd()


def world_size() -> int:
    """The replicas taking part in the job (its processes): `xladev.world_size`."""
    return xladev.world_size()


def global_ordinal() -> int:
    """This process's replica ordinal in the job (its rank): `xladev.global_ordinal`."""
    return xladev.global_ordinal()


def local_ordinal() -> int:
    """This process's replica ordinal on its host (its local rank): `xladev.local_ordinal`."""
    return xladev.local_ordinal()


def process_index() -> int:
    """This process's index in the job (its rank)."""
    return xladev.global_ordinal()


def process_count() -> int:
    """The processes of the job."""
    return xladev.world_size()


def host_index() -> int:
    """This host's index: torchrun's node rank (GROUP_RANK), 0 on one host."""
    return int(os.environ.get("GROUP_RANK", "0") or 0) if xladev.world_size() > 1 else 0


def local_process_count() -> int:
    """The processes of the job on this host (LOCAL_WORLD_SIZE)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) if xladev.world_size() > 1 else 1


def addressable_device_count() -> int:
    """The xla devices this process sees: `xladev.device_count()`."""
    return xladev.device_count()


def global_device_count() -> int:
    """The xla devices of the job: each process's replica device, or this process's devices alone."""
    return xladev.world_size() if xladev.world_size() > 1 else xladev.device_count()


def local_device_count() -> int:
    """The xla devices on this host: the processes here times their devices."""
    return local_process_count() * xladev.device_count()


def addressable_runtime_device_count() -> int:
    """The runtime devices this process sees: `xladev.device_count()`."""
    return xladev.device_count()


def global_runtime_device_count() -> int:
    """The runtime devices of the job."""
    return global_device_count()


def runtime_device_attributes(device) -> dict:
    """A runtime device's attributes, `{}` here: PJRT gives coordinates and slices only for TPU devices.

    Args:
      device: an `xla` device or its name (`xla:0`).
    """
    del device  # every device of this backend has the same (empty) attributes, as PyTorch/XLA's CPU client
    return {}


def global_runtime_device_attributes() -> list[dict]:
    """Each runtime device of the job as PyTorch/XLA's PJRT client names it: `[{'name': 'CPU:0'}, ...]`."""
    return [{"name": f"{device_type()}:{index}"} for index in range(global_runtime_device_count())]


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Turns on XLA's persistent compilation cache in `path`: `xladev.initialize_cache`.

    Args:
      path: the cache directory.
      readonly: read the cache without adding to it.
    """
    xladev.initialize_cache(path, readonly=readonly)


__getattr__ = _xladev.module_getattr(__name__)
