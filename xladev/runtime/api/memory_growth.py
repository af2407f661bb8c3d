"""Live device memory that grows step over step: found from the step samples, named by two censuses.

A run that keeps its memory stable holds the same buffers at every step's end once its first steps have made the
optimizer state. So when the live bytes of `step_memory`'s samples rise at `_BASELINE_AFTER` samples in a row, the
watcher takes a census of the live buffers (`memory_census`); when they rise at `_CONFIRM_AFTER` more, it takes a
second one, unless that last rise is a jump (tensors made once, not growth per step). What grew between the two,
by kind and line, is what the warning names: a loss appended to a list shows
as `other` made at the loss's line. A growing graph (no barrier) is another finding, `GraphGrowing`: its ops are
pending, not live data, and no step ends while it grows. Nor is a growth told when no new buffer stays live and new
graphs compiled meanwhile: the same tensors hold more because the shapes grow (a sequence length that changes every
step), which the recompilation finding tells.

Each census walks the Python heap (a fraction of a second), and only a run whose memory rises at every sample pays
for it: after each pair of censuses, and after a first census whose rise then stopped, the watcher waits until the
step count has doubled. A watch with a least growth worth telling (`MIN_PER_STEP`, the host's) takes no census for
a rise slower than that over its last `_BASELINE_AFTER` samples. What grows is told once
for each set of lines. The scalar cache is left out: it is bounded, and fills in a healthy run.
"""

from __future__ import annotations

import collections
import time

from xladev.errors import XladevWarning
from xladev.events import MemoryGrowing, bus
from xladev.analysis import memory_growing_message
from xladev.runtime.api.memory_census import SCALAR_CACHE, census
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.execute import step_memory
from xladev.runtime.graph import stack
from xladev.schema.units import format_bytes

# Steps whose memory growth is expected: the first steps make the optimizer state and the gradients.
_SETUP_STEPS = 2
_BASELINE_AFTER = 3  # rises in a row before the first census
_CONFIRM_AFTER = 3  # further rises before the second one and the warning
_HOLDERS = 5  # lines named
# A rise this many times faster per step than the pair's earlier rises is a jump, not the growth going on.
_JUMP = 4


class MemoryGrowthWarning(XladevWarning):
    """Live device memory (or host memory: host_memory_growth.py) rose at every step sampled: tensors kept from step to
    step (a leak), or data that grows."""


class RisingWatch:
    """The growth check on one memory, heard at each step sample: counts rises in a row, takes a census at the
    `_BASELINE_AFTER`th and another at the `_CONFIRM_AFTER`th more, and tells what grew between them (a warning and
    a `MemoryGrowing` event). Subclasses say what is measured and counted.

    Attributes:
      SPACE: the memory watched, as `MemoryGrowing.space` names it.
      MIN_PER_STEP: the least growth per step that is told.
    """

    SPACE = "device"
    MIN_PER_STEP = 0.0

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._last: int | None = None
        self._last_step: int | None = None
        self._rises = 0
        self._rise_from: tuple[int, int] | None = None  # (step, bytes) of the sample before the first rise
        # The samples of the last `_BASELINE_AFTER` rises and the one before them: the rise's recent rate.
        self._window: collections.deque[tuple[int, int]] = collections.deque(maxlen=_BASELINE_AFTER + 1)
        self._confirm_at = 0  # the rise count at which the second census is taken
        self._baseline: tuple[int, int, dict, int] | None = None  # step, bytes, census, graphs compiled
        self._told: set[tuple] = set()
        self._quiet_until = 0  # after a census pair, no more before this step: a run that keeps growing pays twice
                               # as rarely each time
        self._stop()

    def measure(self, live: int) -> int | None:
        """The bytes watched at this sample (`live`: the device's live bytes); None when they cannot be read."""
        return live

    def _fast(self, since: tuple[int, int], step: int, value: int) -> bool:
        # A census walks the Python heap (0.1 s with torch and jax loaded), and a healthy process's resident set
        # creeps up by a page or two at most steps: a rise slower than what would be told takes no census.
        return value - since[1] >= self.MIN_PER_STEP * (step - since[0])

    def _jumped(self, last_step: int, last: int, step: int, value: int) -> bool:
        # The rise since the previous sample, per step, against the pair's rises before it: a steady growth keeps
        # its rate from sample to sample (the samples' spacing varies), a one-off allocation does not.
        from_step, from_bytes = self._baseline[:2]
        if last_step <= from_step:
            return False
        before = (last - from_bytes) / (last_step - from_step)
        return (value - last) / (step - last_step) > _JUMP * before

    def census(self) -> dict[tuple[str, str], tuple[int, int]]:
        """What holds the memory now: {(kind, line): (bytes, buffers)}."""
        raise NotImplementedError

    def _start(self) -> None:
        """A first census was taken (growth is suspected): a hook."""

    def _look_again(self) -> bool:
        """Whether to take another pair of censuses at once, the one just taken as its first (a hook); else the
        watch rests until twice this step, so that a run that keeps growing pays twice as rarely each time."""
        return False

    def _rate(self, per_step: float) -> float:
        """The growth per step to judge and tell, from the one measured between the two censuses (a hook)."""
        return per_step

    def _explained(self, per_step: float, holders: list[dict]) -> bool:
        """Whether what grew explains the growth well enough to tell it (a hook: the device's census always does)."""
        return True

    def _stop(self) -> None:
        """The growth stopped, or was told: a hook."""

    def on_sample(self, step: int, live: int, peak: int) -> None:
        """Hears one sample (`step_memory.listeners`).

        Args:
          step: the step that ended.
          live: the device bytes live at its end.
          peak: the step's peak (unused: growth is judged on what stays live).
        """
        if step < max(_SETUP_STEPS, self._quiet_until):
            return
        value = self.measure(live)
        if value is None:
            return
        last, self._last = self._last, value
        last_step, self._last_step = self._last_step, step
        if last is None or value <= last:
            if self._baseline is not None:  # a census was taken for a rise that stopped: rest, as after a pair
                self._rest(step)
                return
            self._rises = 0
            self._stop()
            return
        self._rises += 1
        if self._rises == 1:
            self._rise_from = (last_step, last)
            self._window.clear()
            self._window.append((last_step, last))
        self._window.append((step, value))
        if self._baseline is None:
            if self._rises >= _BASELINE_AFTER and self._fast(self._window[0], step, value):
                self._first_census(step, value, self.census())
        elif self._rises == self._confirm_at:
            # Too slow to be told: a second census tells nothing. Or the last rise a jump: what a step made once (the
            # tensors a script makes after its loop, at the last barrier) would be told as growth per step.
            if not self._fast(self._baseline[:2], step, value) or self._jumped(last_step, last, step, value):
                self._rest(step)
                return
            now = self.census()
            self._tell(step, value, now)
            self._stop()
            if self._look_again():  # this census is the next pair's first, counted otherwise from now on
                self._first_census(step, value, now)
                return
            self._rest(step)

    def _first_census(self, step: int, value: int, held: dict) -> None:
        # A pair's first census: the second is taken `_CONFIRM_AFTER` rises later.
        self._baseline = (step, value, held, len(compile_cache.by_hash))
        self._confirm_at = self._rises + _CONFIRM_AFTER
        self._start()

    def _rest(self, step: int) -> None:
        # No census before twice this step: a run whose memory keeps rising pays for them twice as rarely each time.
        self._rises = 0
        self._baseline = None
        self._last = None
        self._quiet_until = 2 * step
        self._stop()

    def _tell(self, step: int, value: int, now: dict) -> None:
        from_step, from_bytes, before, graphs = self._baseline
        steps = step - from_step
        per_step = self._rate((value - from_bytes) / steps)
        if per_step < self.MIN_PER_STEP:
            return
        holders = _grown(before, now, steps)
        if len(compile_cache.by_hash) > graphs and not any(h["buffers"] > 0 for h in holders):
            # The same buffers, bigger, while new graphs compiled: the shapes grow (a sequence length that changes
            # every step), which the recompilation finding tells; nothing is kept from step to step. (On the host:
            # the new graphs' compiled code.)
            return
        if not self._explained(per_step, holders):
            return
        key = tuple((h["kind"], h["line"]) for h in holders)
        if key in self._told:
            return
        self._told.add(key)
        message = memory_growing_message(from_step=from_step, from_bytes=from_bytes, to_step=step, to_bytes=value,
                                         per_step_bytes=per_step, holders=holders, format_bytes=format_bytes,
                                         space=self.SPACE)
        if bus.active:
            bus.emit(MemoryGrowing(time.perf_counter_ns(), step, from_step, from_bytes, value, per_step,
                                   tuple(holders), space=self.SPACE))
        stack.warn_at_user(message, MemoryGrowthWarning)


class GrowthWatch(RisingWatch):
    """Watches the step samples of live device memory; warns and publishes `MemoryGrowing` on steady growth."""

    def census(self) -> dict[tuple[str, str], tuple[int, int]]:
        return {(row.kind, row.line): (row.nbytes, row.buffers) for row in census(0).rows()
                if row.line != SCALAR_CACHE}


def _grown(before: dict, now: dict, steps: int) -> list[dict]:
    """What grew between two censuses ({(kind, line): (bytes, buffers)}), by kind and line, biggest first."""
    grown = []
    for (kind, line), (nbytes, buffers) in now.items():
        old_bytes, old_buffers = before.get((kind, line), (0, 0))
        if nbytes > old_bytes:
            grown.append({"kind": kind, "line": line, "per_step_bytes": (nbytes - old_bytes) / steps,
                          "buffers": buffers - old_buffers})
    grown.sort(key=lambda h: -h["per_step_bytes"])
    return grown[:_HOLDERS]


watch = GrowthWatch()


def install() -> None:
    """Makes the watcher hear the step samples (`device.register`). Idempotent."""
    if watch.on_sample not in step_memory.listeners:
        step_memory.listeners.append(watch.on_sample)
