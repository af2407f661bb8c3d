"""`torch_xla.distributed.parallel_loader` (`pl`) on xladev: the loaders are `xladev.DeviceLoader`.

`DeviceLoader` loads host batches on a thread ahead of use, copies each batch to the device and marks the
step at every `next()` (and once at the end), as `MpDeviceLoader` does. PyTorch/XLA's tuning arguments are
accepted: `loader_prefetch_size` is DeviceLoader's `prefetch` (host batches read ahead); `device_prefetch_size`,
`host_to_device_transfer_threads` and `batchdim` change nothing here (xladev copies each batch on the training
thread as it is used); `batches_per_execution` other than 1 is refused. `input_sharding` (a `ShardingSpec`, or
for dict batches a dict of them by key) marks each batch's tensors as they reach the device, in SPMD mode.
"""

from __future__ import annotations

from typing import Iterable

import torch

import xladev

from torch_xla import _xladev
from xladev.runtime.distributed.input_sharding import check_input_sharding, shard_inputs, tensors_in

# PyTorch/XLA's default host-side queue, kept so a script reads as far ahead as it does there.
_LOADER_PREFETCH_SIZE = 16


def _prefetch(batchdim: int = 0, batches_per_execution: int = 1, loader_prefetch_size: int = _LOADER_PREFETCH_SIZE,
              device_prefetch_size: int = 8, host_to_device_transfer_threads: int = 1, input_sharding=None) -> int:
    """DeviceLoader's `prefetch` for ParallelLoader's keyword arguments; refuses what xladev cannot do.

    Raises:
      TypeError: an argument ParallelLoader does not have (Python's own message, from this signature).
      ValueError: `batches_per_execution` other than 1.
    """
    if batches_per_execution != 1:
        raise ValueError(f"batches_per_execution={batches_per_execution} is not supported by xladev: its loader "
                         "marks the step at every batch; leave it at 1")
    return loader_prefetch_size


class _ShardingLoader(xladev.DeviceLoader):
    """A DeviceLoader that marks each batch's tensors with `input_sharding` as they reach the device."""

    def __init__(self, loader: Iterable, device: torch.device, prefetch: int, input_sharding=None) -> None:
        check_input_sharding(input_sharding)
        super().__init__(loader, device, prefetch=prefetch)
        self._input_sharding = input_sharding

    def _deliver(self, batch):
        spec = self._input_sharding
        if spec is None:
            return self._to_device(batch)
        if not isinstance(spec, dict):
            moved = self._to_device(batch)
            shard_inputs(tensors_in(moved), spec)
            return moved
        if not isinstance(batch, dict):
            raise ValueError(f"input_sharding is a dict, so each batch must be a dict too; got a "
                             f"{type(batch).__name__}")
        missing = [key for key in batch if key not in spec]
        if missing:
            raise KeyError(f"Keys: {missing} are missing from input_sharding.")
        moved = self._to_device(batch)
        for key, value in moved.items():
            shard_inputs(tensors_in(value), spec[key])
        return moved


class MpDeviceLoader(_ShardingLoader):
    """Wraps a data loader: batches arrive on `device`, and each `next()` marks the step.

    Args:
      loader: any iterable of batches (a `torch.utils.data.DataLoader`...).
      device: the xla device.
      **kwargs: ParallelLoader's arguments (`loader_prefetch_size`, `device_prefetch_size`,
        `host_to_device_transfer_threads`, `batchdim`...).

    Raises:
      TypeError, ValueError: an argument ParallelLoader does not take, or one xladev cannot honour.
      RuntimeError: `input_sharding` while SPMD mode is off.
    """

    def __init__(self, loader: Iterable, device: torch.device, **kwargs) -> None:
        super().__init__(loader, device, _prefetch(**kwargs), kwargs.get("input_sharding"))


class ParallelLoader:
    """PyTorch/XLA's loader over a list of devices; xladev has one replica, so one device.

    Args:
      cpu_loader: any iterable of batches.
      devices: a list holding one xla device.
      batchdim, batches_per_execution, loader_prefetch_size, device_prefetch_size,
        host_to_device_transfer_threads, input_sharding: as PyTorch/XLA's (see the module's docstring).

    Raises:
      ValueError: more than one device, or an argument xladev cannot honour.
    """

    def __init__(self, cpu_loader: Iterable, devices, batchdim: int = 0, batches_per_execution: int = 1,
                 loader_prefetch_size: int = _LOADER_PREFETCH_SIZE, device_prefetch_size: int = 8,
                 host_to_device_transfer_threads: int = 1, input_sharding=None) -> None:
        devices = [torch.device(d) for d in devices]
        if len(devices) != 1:
            raise ValueError(f"ParallelLoader over {len(devices)} devices is not supported by xladev: it runs one "
                             "replica on one device (pass [torch_xla.device()])")
        prefetch = _prefetch(batchdim, batches_per_execution, loader_prefetch_size, device_prefetch_size,
                             host_to_device_transfer_threads, input_sharding)
        self._cpu_loader = cpu_loader
        self._device = devices[0]
        self._loader = _ShardingLoader(cpu_loader, devices[0], prefetch, input_sharding)
        self._iterator = None

    def per_device_loader(self, device: torch.device) -> "PerDeviceLoader":
        """The iterator of device batches for `device` (this loader's one device).

        Raises:
          ValueError: another device.
        """
        if torch.device(device) != self._device:
            raise ValueError(f"this ParallelLoader feeds {self._device}, not {device}")
        return PerDeviceLoader(self)

    def per_device_samples(self) -> int:
        """Batches each device gets: all of the loader's."""
        return len(self._cpu_loader)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stops loading ahead (the loader thread ends and the data loader's workers shut down)."""
        if self._iterator is not None:
            self._iterator.close()
            self._iterator = None

    def _next(self):
        if self._iterator is None:
            self._iterator = iter(self._loader)
        return next(self._iterator)


class PerDeviceLoader:
    """One pass over a ParallelLoader's batches on its device: an iterator, with `len()`."""

    def __init__(self, loader: ParallelLoader) -> None:
        self._loader = loader

    def __iter__(self) -> "PerDeviceLoader":
        return self

    def __next__(self):
        return self._loader._next()

    def next(self):
        """The next batch (PyTorch/XLA's spelling of `__next__`)."""
        return self.__next__()

    def __len__(self) -> int:
        return self._loader.per_device_samples()


__getattr__ = _xladev.module_getattr(__name__)
