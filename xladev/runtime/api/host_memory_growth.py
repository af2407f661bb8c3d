"""Host memory that grows step over step: the process's resident set, sampled at step ends, named by two censuses.

The device's watch (memory_growth.py) sees tensors kept on the device; a run can also die of host memory, most often
a copy read to the CPU each step and kept (`history.append(out.cpu())`). This watch (the device watch's
`RisingWatch`, measuring another memory) hears the same step samples and reads the resident set (`/proc/self/statm`:
a few microseconds). When it rose at three samples in a row it takes a census of the CPU tensors in the Python heap
and starts noting the user line of each CPU copy a read makes (`transfers.host_copy_lines`); after three more rises
it takes a second census. It tells the growth when it averaged at least `rules.HOST_GROWTH_MIN_PER_STEP` a step
(the resident set moves by pages and arenas, so slower growth is not told) and CPU tensors kept from step to step
account for at least half of it: what grew between the censuses, by line. A resident set that rises with no tensor
kept is not told: a healthy run's also rises for many steps while allocator arenas and XLA's caches fill, and nothing
would name a line.
Where the resident set cannot be read (not Linux), the watch stays off.
"""

from __future__ import annotations

import gc
import os

import torch

from xladev.rules import HOST_GROWTH_MIN_PER_STEP
from xladev.runtime.api.memory_census import UNKNOWN_LINE
from xladev.runtime.api.memory_growth import RisingWatch
from xladev.runtime.execute import step_memory, transfers
from xladev.runtime.record.tensor import XlaTensor

HOST_COPY = "host copy"  # a CPU tensor a device read made, at the line that read it
CPU_TENSOR = "CPU tensor"  # any other CPU tensor: its line is not known
EXPLAINED_SHARE = 0.5  # the least share of the resident growth that kept CPU tensors must account for
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


_statm: tuple[int, int] | None = None  # (pid, open fd of /proc/<pid>/statm): re-read with pread, a few µs


def resident_bytes() -> int | None:
    """The process's resident set in bytes, or None where `/proc/self/statm` cannot be read."""
    global _statm
    pid = os.getpid()
    try:
        if _statm is None or _statm[0] != pid:  # a forked child inherits the fd of its parent's file
            _statm = (pid, os.open(f"/proc/{pid}/statm", os.O_RDONLY))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):  # no /proc, or no os.pread (not POSIX)
        return None


def host_census() -> dict[tuple[str, str], tuple[int, int]]:
    """The CPU tensors in the Python heap: {(kind, line): (bytes, storages)}, each storage counted once."""
    lines = transfers.host_copy_lines or {}
    seen: set[int] = set()
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for obj in gc.get_objects():
        cls = type(obj)  # never isinstance: it reads `__class__`, which some objects compute (memory_census.py)
        if not issubclass(cls, torch.Tensor) or issubclass(cls, XlaTensor):
            continue
        try:
            if obj.device.type != "cpu":
                continue
            storage = obj.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError):  # meta, sparse, or a subclass without storage
            continue
        if key in seen or nbytes == 0:
            continue
        seen.add(key)
        noted = lines.get(id(obj))
        holder = (HOST_COPY, noted[1]) if noted is not None and noted[0]() is obj else (CPU_TENSOR, UNKNOWN_LINE)
        held = out.get(holder, (0, 0))
        out[holder] = (held[0] + nbytes, held[1] + 1)
    return out


class HostGrowthWatch(RisingWatch):
    """Watches the resident set at the step samples; warns and publishes `MemoryGrowing(space="host")`."""

    SPACE = "host"
    MIN_PER_STEP = HOST_GROWTH_MIN_PER_STEP

    def measure(self, live: int) -> int | None:
        return resident_bytes()

    def census(self) -> dict[tuple[str, str], tuple[int, int]]:
        return host_census()

    def _explained(self, per_step: float, holders: list[dict]) -> bool:
        # The resident set also rises for many steps in a healthy run (allocator arenas, XLA's and jax's caches
        # warming up: +6.9 MB a step at steps 10-13 of a small model's training). Only CPU tensors kept from step
        # to step, accounting for at least half of the rise, make it a leak worth a warning.
        kept = sum(h["per_step_bytes"] for h in holders if h["buffers"] > 0)
        return kept >= EXPLAINED_SHARE * per_step

    def _start(self) -> None:
        transfers.host_copy_lines = {}  # from now on each device read's CPU copy is noted with its line

    def _stop(self) -> None:
        transfers.host_copy_lines = None


watch = HostGrowthWatch()


def install() -> None:
    """Makes the watch hear the step samples (`device.register`). Idempotent."""
    if watch.on_sample not in step_memory.listeners:
        step_memory.listeners.append(watch.on_sample)
