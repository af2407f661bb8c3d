"""How much device memory is in use: PyTorch/XLA's `xm.get_memory_info()` on jax's devices.

A GPU's PJRT client keeps allocator statistics (`Device.memory_stats()`: bytes in use, the limit, the peak),
and they are the truth there. The CPU client keeps none, so there the figure is the sum of the live jax
arrays on the device (every buffer xladev holds is one: tensors' data, the RNG key, donated state) and the
limit is the host's physical memory, which is what a CPU "device" allocates from. A buffer counts once however
many jax arrays hold it. That peak is the largest
sum seen by a call of `memory_info`: the CPU client does not see the temporaries inside a running program.
"""

from __future__ import annotations

import os
import threading

from xladev._flags import config
from xladev.runtime.graph import backend

_peaks: dict[int, int] = {}
_lock = threading.Lock()


def buffer_key(data) -> int:
    """What identifies a single-device jax array's buffer (several arrays may share one).

    Args:
      data: a jax array on one device.

    Returns:
      Its buffer's address, or the array's `id` where the backend does not give one.
    """
    try:
        return data.unsafe_buffer_pointer()
    except Exception:  # a backend that does not expose it, or a deleted array: the array on its own
        return id(data)


def live_buffers(device) -> dict[int, int]:
    """The live buffers on a jax device.

    Several jax arrays may hold one buffer (the global array over the replica mesh that wraps a process's own
    buffer for a graph of collectives, a shard's view of its array): each buffer is listed once.

    Args:
      device: the jax device.

    Returns:
      `buffer_key` -> bytes of every buffer of a live, undeleted jax array on it.
    """
    return live_buffers_by_device([device])[device]


def live_buffers_by_device(devices) -> dict:
    """`live_buffers` of each of `devices`, from one pass over the live arrays.

    Args:
      devices: jax devices.

    Returns:
      device -> (`buffer_key` -> bytes).
    """
    buffers: dict = {device: {} for device in devices}
    for device, key, _, data in live_shards(devices):
        on = buffers[device]
        on[key] = max(on.get(key, 0), data.nbytes)
    return buffers


def live_shards(devices):
    """The pieces of the live, undeleted jax arrays that lie on `devices`, from one pass over the live arrays.

    Args:
      devices: jax devices.

    Yields:
      (device, `buffer_key`, the array, the piece's single-device data) per piece; a buffer several arrays share
      comes once for each.
    """
    wanted = set(devices)
    for array in backend.jax_module().live_arrays():
        if array.is_deleted():
            continue
        for shard in array.addressable_shards:
            if shard.device in wanted:
                yield shard.device, buffer_key(shard.data), array, shard.data


def buffers_on(array, device) -> list[tuple[int, int]]:
    """The buffers of a jax array on one device.

    Args:
      array: a jax array (one device's, or sharded or replicated over several).
      device: the jax device.

    Returns:
      (`buffer_key`, bytes) of each of its shards on `device`.
    """
    return [(buffer_key(shard.data), shard.data.nbytes) for shard in array.addressable_shards
            if shard.device == device]


def bytes_in_use(device) -> int:
    """Device memory in use now: the allocator's figure where the backend keeps statistics (a GPU), else the sum
    of the live arrays' buffers on the device (the CPU).

    Args:
      device: the jax device.

    Returns:
      Bytes.
    """
    stats = _stats(device)
    return int(stats["bytes_in_use"]) if stats and "bytes_in_use" in stats else sum(live_buffers(device).values())


def busiest_bytes_in_use(devices) -> int:
    """The most device memory in use on any of `devices` (this process's; the one an SPMD step runs out on first):
    the allocators' figures where kept (a GPU), else the live arrays' buffers, summed per device in one pass.

    Args:
      devices: jax devices.

    Returns:
      Bytes.
    """
    devices = list(devices)
    if len(devices) == 1 or _stats(devices[0]):
        return max(bytes_in_use(device) for device in devices)
    return max(sum(on.values()) for on in live_buffers_by_device(devices).values())


def _stats(device) -> dict | None:
    return device.memory_stats() if hasattr(device, "memory_stats") else None


def _host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a platform without these names: no limit known
        return 0


def memory_info(device_index: int = 0) -> dict[str, int]:
    """Device memory in use, the limit and the peak, in bytes, under PyTorch/XLA's key names.

    Args:
      device_index: the xla device's index in this process.

    Returns:
      `{'bytes_used', 'bytes_limit', 'peak_bytes_used'}`: from the allocator where the backend keeps statistics
      (GPU), else from the live arrays (CPU; see the module's docstring). With a device memory budget
      (XLADEV_DEVICE_MEMORY_LIMIT) below the device's limit, `bytes_limit` is the budget: what graphs are held to.

    Raises:
      ValueError: this process has no such device.
    """
    device = backend.jax_devices()[backend.check_index(device_index)]
    stats = _stats(device)
    if stats:
        used = int(stats.get("bytes_in_use", 0))
        return {"bytes_used": used, "bytes_limit": _budgeted(int(stats.get("bytes_limit", 0))),
                "peak_bytes_used": int(stats.get("peak_bytes_in_use", used))}
    used = sum(live_buffers(device).values())
    with _lock:
        peak = _peaks[device_index] = max(_peaks.get(device_index, 0), used)
    return {"bytes_used": used, "bytes_limit": limit_bytes(device), "peak_bytes_used": peak}


def limit_bytes(device) -> int:
    """What a device may hold: its allocator's limit where kept (a GPU), else the host's physical memory; the device
    memory budget (XLADEV_DEVICE_MEMORY_LIMIT) where it is lower. 0 when no limit is known.

    Args:
      device: the jax device.

    Returns:
      Bytes.
    """
    stats = _stats(device)
    return _budgeted(int(stats.get("bytes_limit", 0)) if stats else _host_memory())


def _budgeted(limit: int) -> int:
    """The device's limit, or the device memory budget where one is set below it (0: no limit known)."""
    budget = config.device_memory_limit
    return limit if budget is None else min(limit, budget) if limit else budget
