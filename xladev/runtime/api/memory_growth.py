"""Live device memory that grows step over step: found from the step samples, named by two censuses.

A run that keeps its memory stable holds the same buffers at every step's end once its first steps have made the
optimizer state. So when the live bytes of `step_memory`'s samples rise at `_BASELINE_AFTER` samples in a row, the
watcher takes a census of the live buffers (`memory_census`); when they rise at `_CONFIRM_AFTER` more, it takes a
second one. What grew between the two, by kind and line, is what the warning names: a loss appended to a list shows
as `other` made at the loss's line. A growing graph (no barrier) is another finding, `GraphGrowing`: its ops are
pending, not live data, and no step ends while it grows. Nor is a growth told when no new buffer stays live and new
graphs compiled meanwhile: the same tensors hold more because the shapes grow (a sequence length that changes every
step), which the recompilation finding tells.

Each census walks the Python heap (a fraction of a second), and only a run whose memory rises at every sample pays
for it, and after each pair of censuses the watcher waits until the step count has doubled. What grows is told once
for each set of lines. The scalar cache is left out: it is bounded, and fills in a healthy run.
"""

from __future__ import annotations

import time

from xladev.errors import XladevWarning
from xladev.events import MemoryGrowing, bus
from xladev.rules import memory_growing_message
from xladev.runtime.api.memory_census import SCALAR_CACHE, MemoryReport, census
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.execute import step_memory
from xladev.runtime.graph import stack
from xladev.schema.units import format_bytes

# Steps whose memory growth is expected: the first steps make the optimizer state and the gradients.
_SETUP_STEPS = 2
_BASELINE_AFTER = 3  # rises in a row before the first census
_CONFIRM_AFTER = 3  # further rises before the second one and the warning
_HOLDERS = 5  # lines named


class MemoryGrowthWarning(XladevWarning):
    """Live device memory rose at every step sampled: tensors kept from step to step (a leak), or data that grows."""


class GrowthWatch:
    """Watches the step samples of live device memory; warns and publishes `MemoryGrowing` on steady growth."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._last: int | None = None
        self._rises = 0
        self._baseline: tuple[int, int, MemoryReport, int] | None = None  # step, bytes, census, graphs compiled
        self._told: set[tuple] = set()
        self._quiet_until = 0  # after a census pair, no more before this step: a run that keeps growing pays twice
                               # as rarely each time

    def on_sample(self, step: int, live: int, peak: int) -> None:
        """Hears one sample (`step_memory.listeners`).

        Args:
          step: the step that ended.
          live: the device bytes live at its end.
          peak: the step's peak (unused: growth is judged on what stays live).
        """
        if step < max(_SETUP_STEPS, self._quiet_until):
            return
        last, self._last = self._last, live
        if last is None or live <= last:
            self._rises = 0
            self._baseline = None
            return
        self._rises += 1
        if self._rises == _BASELINE_AFTER:
            self._baseline = (step, live, census(0), len(compile_cache.by_hash))
        elif self._rises == _BASELINE_AFTER + _CONFIRM_AFTER and self._baseline is not None:
            self._tell(step, live, census(0))
            self._rises = 0
            self._baseline = None
            self._last = None
            self._quiet_until = 2 * step

    def _tell(self, step: int, live: int, now: MemoryReport) -> None:
        from_step, from_bytes, before, graphs = self._baseline
        steps = step - from_step
        holders = _grown(before, now, steps)
        if len(compile_cache.by_hash) > graphs and not any(h["buffers"] > 0 for h in holders):
            # The same buffers, bigger, while new graphs compiled: the shapes grow (a sequence length that changes
            # every step), which the recompilation finding tells; nothing is kept from step to step.
            return
        key = tuple((h["kind"], h["line"]) for h in holders)
        if key in self._told:
            return
        self._told.add(key)
        per_step = (live - from_bytes) / steps
        message = memory_growing_message(from_step=from_step, from_bytes=from_bytes, to_step=step, to_bytes=live,
                                         per_step_bytes=per_step, holders=holders, format_bytes=format_bytes)
        if bus.active:
            bus.emit(MemoryGrowing(time.perf_counter_ns(), step, from_step, from_bytes, live, per_step,
                                   tuple(holders)))
        stack.warn_at_user(message, MemoryGrowthWarning)


def _grown(before: MemoryReport, now: MemoryReport, steps: int) -> list[dict]:
    """What grew between two censuses, by kind and line, biggest first."""
    earlier = {(row.kind, row.line): row for row in before.rows()}
    grown = []
    for row in now.rows():
        if row.line == SCALAR_CACHE:
            continue
        old = earlier.get((row.kind, row.line))
        added = row.nbytes - (old.nbytes if old else 0)
        if added > 0:
            grown.append({"kind": row.kind, "line": row.line, "per_step_bytes": added / steps,
                          "buffers": row.buffers - (old.buffers if old else 0)})
    grown.sort(key=lambda h: -h["per_step_bytes"])
    return grown[:_HOLDERS]


watch = GrowthWatch()


def install() -> None:
    """Makes the watcher hear the step samples (`device.register`). Idempotent."""
    if watch.on_sample not in step_memory.listeners:
        step_memory.listeners.append(watch.on_sample)
