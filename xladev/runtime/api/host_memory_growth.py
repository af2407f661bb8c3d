"""Host memory that grows step over step: the process's resident set, sampled at step ends, named by two censuses.

The device's watch (memory_growth.py) sees tensors kept on the device; a run can also die of host memory, most often
a copy read to the CPU each step and kept (`history.append(out.cpu())`). This watch (the device watch's
`RisingWatch`, measuring another memory) hears the same step samples and reads the resident set (`/proc/self/statm`:
a few microseconds). When it rose at three samples in a row, by `analysis.HOST_GROWTH_MIN_PER_STEP` a step or more
(a healthy process's creeps up by a page or two at most steps), it takes a census of the CPU tensors in the Python heap
and starts noting the user line of each CPU copy a read makes (`transfers.host_copy_lines`); after three more rises
it takes a second census. It tells the growth when it averaged at least `analysis.HOST_GROWTH_MIN_PER_STEP` a step
(the resident set moves by pages and arenas, so slower growth is not told) and CPU tensors kept from step to step
account for at least half of it: what grew between the censuses, by line.

A leak of Python objects holds no tensor (a list of per-step records kept). When a pair of censuses saw the resident
set grow that fast with nothing kept that they count, the watch takes another pair at once (the last census as its
first), and this time traces Python's allocations from the first census to the second (`tracemalloc`, one frame a
block, unless the job traces them already): the second census also counts the blocks allocated since and still
alive, by the line that allocated them where that line is the user's (objects a library function makes for the
user are not named). Tracing slows a host-bound step about 4x while it runs, so it runs only then, once per
suspicion; its own records take resident memory too, so the growth is judged and told at its rate before tracing
started. A resident set that rises with neither kept is not told: a healthy run's also rises for many steps while
allocator arenas and XLA's caches fill, and nothing would name a line.
A loop that ends while the watch traces (the training done, an evaluation or a save next) would go on paying for
the tracing: it stops when no step sample came for `IDLE_STOP_S`, or three times the longest gap between samples.
Where the resident set cannot be read (not Linux), the watch stays off.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc

import torch

from xladev.analysis import HOST_GROWTH_MIN_PER_STEP
from xladev.runtime.api.memory_census import UNKNOWN_LINE
from xladev.runtime.api.memory_growth import RisingWatch
from xladev.runtime.execute import step_memory, transfers
from xladev.runtime.record.tensor import XlaTensor
from xladev.schema.sites import is_user_file

HOST_COPY = "host copy"  # a CPU tensor a device read made, at the line that read it
CPU_TENSOR = "CPU tensor"  # any other CPU tensor: its line is not known
PYTHON_OBJECTS = "Python objects"  # blocks Python allocated at a user line while the watch traced, still alive
EXPLAINED_SHARE = 0.5  # the least share of the resident growth that kept CPU tensors must account for
IDLE_STOP_S = 10.0  # tracing stops when no step sample came for this long (or 3x the longest gap between samples)
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
    # Whether each class met is a CPU-capable tensor class: a dict lookup per object instead of two subclass checks
    # (a heap of ~370,000 objects with torch and jax loaded, almost none of them tensors).
    tensor_class: dict[type, bool] = {}
    for obj in gc.get_objects():
        cls = type(obj)  # never isinstance: it reads `__class__`, which some objects compute (memory_census.py)
        wanted = tensor_class.get(cls)
        if wanted is None:
            wanted = tensor_class[cls] = issubclass(cls, torch.Tensor) and not issubclass(cls, XlaTensor)
        if not wanted:
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


def python_census() -> dict[tuple[str, str], tuple[int, int]]:
    """The blocks Python allocated since tracing started and still alive, by the user line that allocated them:
    {(PYTHON_OBJECTS, "file.py:LINE"): (bytes, blocks)}. Blocks allocated in library code are left out, and so are
    numpy's buffers, which `host_census` counts where a CPU tensor holds them."""
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, 0)])
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for stat in snapshot.statistics("lineno"):
        frame = stat.traceback[0]
        if is_user_file(frame.filename):
            out[(PYTHON_OBJECTS, f"{os.path.basename(frame.filename)}:{frame.lineno}")] = (stat.size, stat.count)
    return out


class HostGrowthWatch(RisingWatch):
    """Watches the resident set at the step samples; warns and publishes `MemoryGrowing(space="host")`."""

    SPACE = "host"
    MIN_PER_STEP = HOST_GROWTH_MIN_PER_STEP

    def __init__(self) -> None:
        self._tracing = False  # tracemalloc started by the watch (not by the job)
        # The last pair of censuses saw the resident set grow fast with nothing kept that it counts: the next pair
        # traces Python's allocations (which slows a host-bound step about 4x while it runs, so not before).
        self._suspect = False
        self._untraced_rate: float | None = None  # bytes a step the resident set rose before tracing started
        self._lock = threading.Lock()  # the samples' thread and the idle timer's
        self._idle_timer: threading.Timer | None = None
        self._idle_after = IDLE_STOP_S
        self._last_sample: float | None = None  # time.monotonic() of the last sample
        self._longest_gap = 0.0
        super().__init__()

    def on_sample(self, step: int, live: int, peak: int) -> None:
        with self._lock:
            now = time.monotonic()
            if self._last_sample is not None:
                self._longest_gap = max(self._longest_gap, now - self._last_sample)
            self._last_sample = now
            super().on_sample(step, live, peak)
            if self._tracing:
                self._arm_idle_stop()

    def _arm_idle_stop(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_after = max(IDLE_STOP_S, 3 * self._longest_gap)
        self._idle_timer = threading.Timer(self._idle_after, self._idle)
        self._idle_timer.daemon = True
        self._idle_timer.start()

    def _idle(self) -> None:
        with self._lock:  # no sample came: the loop ended while tracing (a sample just in re-armed another timer)
            if self._tracing and time.monotonic() - (self._last_sample or 0.0) >= self._idle_after:
                self.reset()

    def measure(self, live: int) -> int | None:
        return resident_bytes()

    def _rate(self, per_step: float) -> float:
        # While the watch traces, the resident set also holds tracing's own records, which grow with every block
        # kept (measured: +4.1 MB a step against +2.6 MB untraced, for 1.6 MB of floats kept a step), and
        # tracemalloc's own count of them does not match what they take: the rise is judged and told at its rate
        # before tracing started.
        return per_step if self._untraced_rate is None else min(per_step, self._untraced_rate)

    def census(self) -> dict[tuple[str, str], tuple[int, int]]:
        held = host_census()
        if self._tracing:
            held.update(python_census())
        return held

    def _explained(self, per_step: float, holders: list[dict]) -> bool:
        # The resident set also rises for many steps in a healthy run (allocator arenas, XLA's and jax's caches
        # warming up: +6.9 MB a step at steps 10-13 of a small model's training). Only CPU tensors or Python objects
        # kept from step to step, accounting for at least half of the rise, make it a leak worth a warning.
        kept = sum(h["per_step_bytes"] for h in holders if h["buffers"] > 0)
        explained = kept >= EXPLAINED_SHARE * per_step
        self._suspect = not explained and not self._tracing  # traced and still unexplained: a healthy rise
        return explained

    def _look_again(self) -> bool:
        return self._suspect

    def _start(self) -> None:
        transfers.host_copy_lines = {}  # from now on each device read's CPU copy is noted with its line
        if self._rise_from is not None and self._baseline is not None and self._baseline[0] > self._rise_from[0]:
            (from_step, from_bytes), (step, value) = self._rise_from, self._baseline[:2]
            self._untraced_rate = (value - from_bytes) / (step - from_step)
        if self._suspect and not tracemalloc.is_tracing():  # a job tracing its own keeps its settings, unread
            tracemalloc.start(1)  # one frame a block: tracing's cheapest
            self._tracing = True

    def _stop(self) -> None:
        transfers.host_copy_lines = None
        self._untraced_rate = None
        if self._tracing:  # one traced pair per suspicion, whatever its end: tracing is too dear to repeat
            self._tracing = self._suspect = False
            tracemalloc.stop()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None


watch = HostGrowthWatch()


def install() -> None:
    """Makes the watch hear the step samples (`device.register`). Idempotent."""
    if watch.on_sample not in step_memory.listeners:
        step_memory.listeners.append(watch.on_sample)
