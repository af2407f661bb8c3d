"""Host memory that grows step over step: the process's resident set, sampled at step ends, named by two censuses.

The device's watch (memory_growth.py) sees tensors kept on the device; a run can also die of host memory, most often
a copy read to the CPU each step and kept (`history.append(out.cpu())`). This watch hears the same step samples and
reads the resident set (`/proc/self/statm`: a few microseconds). When it rose at `_BASELINE_AFTER` samples in a
row it takes a census of the CPU tensors in the Python heap and starts noting the user line of each CPU copy a read
makes (`transfers.host_copy_lines`); after `_CONFIRM_AFTER` more rises it takes a second census. It tells the growth
when it averaged at least `rules.HOST_GROWTH_MIN_PER_STEP` a step (the resident set moves by pages and arenas, so
slower growth is not told): what grew between the censuses, by line, or that no CPU tensor did (Python objects,
native memory). A growth while new graphs compiled and no tensor grew is compiled code, not a leak, and is not told.
Where the resident set cannot be read (not Linux), the watch stays off.
"""

from __future__ import annotations

import gc
import os
import time

import torch

from xladev.events import MemoryGrowing, bus
from xladev.rules import HOST_GROWTH_MIN_PER_STEP, memory_growing_message
from xladev.runtime.api.memory_census import UNKNOWN_LINE
from xladev.runtime.api.memory_growth import MemoryGrowthWarning
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.execute import step_memory, transfers
from xladev.runtime.graph import stack
from xladev.runtime.record.tensor import XlaTensor
from xladev.schema.units import format_bytes

_SETUP_STEPS = 2  # the first steps load data, compile and make the optimizer state
_BASELINE_AFTER = 3
_CONFIRM_AFTER = 3
_HOLDERS = 5
HOST_COPY = "host copy"  # a CPU tensor a device read made, at the line that read it
CPU_TENSOR = "CPU tensor"  # any other CPU tensor: its line is not known
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


def host_census() -> dict[tuple[str, str], list[int]]:
    """The CPU tensors in the Python heap: {(kind, line): [bytes, storages]}, each storage counted once."""
    lines = transfers.host_copy_lines or {}
    seen: set[int] = set()
    out: dict[tuple[str, str], list[int]] = {}
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
        row = out.setdefault(holder, [0, 0])
        row[0] += nbytes
        row[1] += 1
    return out


class HostGrowthWatch:
    """Watches the resident set at the step samples; warns and publishes `MemoryGrowing(space="host")`."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._last: int | None = None
        self._rises = 0
        self._baseline = None  # (step, resident bytes, census, graphs compiled)
        self._told: set[tuple] = set()
        self._quiet_until = 0
        transfers.host_copy_lines = None

    def on_sample(self, step: int, live: int, peak: int) -> None:
        """Hears one step sample (`step_memory.listeners`); `live` and `peak` are the device's (unused)."""
        if step < max(_SETUP_STEPS, self._quiet_until):
            return
        rss = resident_bytes()
        if rss is None:
            return
        last, self._last = self._last, rss
        if last is None or rss <= last:
            self._rises = 0
            self._stop()
            return
        self._rises += 1
        if self._rises == _BASELINE_AFTER:
            self._baseline = (step, rss, host_census(), len(compile_cache.by_hash))
            transfers.host_copy_lines = {}
        elif self._rises == _BASELINE_AFTER + _CONFIRM_AFTER and self._baseline is not None:
            self._tell(step, rss)
            self._rises = 0
            self._stop()
            self._last = None
            self._quiet_until = 2 * step

    def _stop(self) -> None:
        self._baseline = None
        transfers.host_copy_lines = None

    def _tell(self, step: int, rss: int) -> None:
        from_step, from_bytes, before, graphs = self._baseline
        steps = step - from_step
        per_step = (rss - from_bytes) / steps
        if per_step < HOST_GROWTH_MIN_PER_STEP:
            return
        holders = _grown(before, host_census(), steps)
        if len(compile_cache.by_hash) > graphs and not holders:
            return  # new graphs' compiled code, and no tensor kept: the recompilation finding tells it
        key = tuple((h["kind"], h["line"]) for h in holders)
        if key in self._told:
            return
        self._told.add(key)
        message = memory_growing_message(from_step=from_step, from_bytes=from_bytes, to_step=step, to_bytes=rss,
                                         per_step_bytes=per_step, holders=holders, format_bytes=format_bytes,
                                         space="host")
        if bus.active:
            bus.emit(MemoryGrowing(time.perf_counter_ns(), step, from_step, from_bytes, rss, per_step,
                                   tuple(holders), space="host"))
        stack.warn_at_user(message, MemoryGrowthWarning)


def _grown(before: dict, now: dict, steps: int) -> list[dict]:
    """What grew between two host censuses, by kind and line, biggest first."""
    grown = []
    for (kind, line), (nbytes, count) in now.items():
        old_bytes, old_count = before.get((kind, line), (0, 0))
        if nbytes > old_bytes:
            grown.append({"kind": kind, "line": line, "per_step_bytes": (nbytes - old_bytes) / steps,
                          "buffers": count - old_count})
    grown.sort(key=lambda h: -h["per_step_bytes"])
    return grown[:_HOLDERS]


watch = HostGrowthWatch()


def install() -> None:
    """Makes the watch hear the step samples (`device.register`). Idempotent."""
    if watch.on_sample not in step_memory.listeners:
        step_memory.listeners.append(watch.on_sample)
