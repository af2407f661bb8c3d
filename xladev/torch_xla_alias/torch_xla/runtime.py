"""`torch_xla.runtime` (`xr`) on xladev: one process, one replica.

World size 1 and ordinal 0 are what PyTorch/XLA itself answers in a single process without replication;
the device counts are xladev's (`xladev.device_count()`, the jax devices of the backend).
"""

from __future__ import annotations

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


def using_pjrt() -> bool:
    """True: xladev, like PyTorch/XLA 2.x, has no other runtime."""
    return True


def is_spmd() -> bool:
    """False: xladev does not shard (`use_spmd` is refused with advice)."""
    return False


def world_size() -> int:
    """1: the processes taking part in the job."""
    return 1


def global_ordinal() -> int:
    """0: this process's rank in the job."""
    return 0


def local_ordinal() -> int:
    """0: this process's rank on this host."""
    return 0


def process_index() -> int:
    """0: this process's index."""
    return 0


def process_count() -> int:
    """1: the processes of the job."""
    return 1


def host_index() -> int:
    """0: this host's index."""
    return 0


def local_process_count() -> int:
    """1: the processes on this host."""
    return 1


def addressable_device_count() -> int:
    """The xla devices this process sees: `xladev.device_count()`."""
    return xladev.device_count()


def global_device_count() -> int:
    """The xla devices of the job, which are this process's: `xladev.device_count()`."""
    return xladev.device_count()


def local_device_count() -> int:
    """The xla devices on this host, which are this process's: `xladev.device_count()`."""
    return xladev.device_count()


def addressable_runtime_device_count() -> int:
    """The runtime devices this process sees: `xladev.device_count()`."""
    return xladev.device_count()


def global_runtime_device_count() -> int:
    """The runtime devices of the job: `xladev.device_count()`."""
    return xladev.device_count()


def initialize_cache(path: str, readonly: bool = False) -> None:
    """Turns on XLA's persistent compilation cache in `path`: `xladev.initialize_cache`.

    Args:
      path: the cache directory.
      readonly: read the cache without adding to it.
    """
    xladev.initialize_cache(path, readonly=readonly)


__getattr__ = _xladev.module_getattr(__name__)
