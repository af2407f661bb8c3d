"""Device memory step by step: what is live at each step's end, and the step's peak, for the step records. Each
figure is of this process's busiest device (one device for a data-parallel rank; under SPMD, the one holding most).

At a step's end the live bytes are the device's allocator statistics where the backend keeps them (a GPU), else the
sum of the live jax arrays on it (`device_memory`). The peak is the most the step held while a graph ran: what was
live when the step began plus, for the graph that adds most, XLA's memory analysis of what a run adds (its outputs
less those written into donated inputs, its temporaries and its code); never less than what is live at the end. It
is an estimate from the analysis, as PyTorch/XLA's own per-graph figures are.

Summing the live arrays costs about half a microsecond per array, so a step of a large model with a short step
would pay more than the 1 % the toolkit allows itself: the sampler measures its own cost (CPU time, which another
process's load does not inflate) and samples every Nth step, N chosen so that the cost stays under 1 % of the step
time. Only sampled steps carry figures; the others carry none
(never a zero). Listeners (`listeners`) get each sample: the growth check (`memory_growth`) is one. What they get
leaves out the scalar cache (Python numbers fed to graphs), which fills up to its bound in a healthy run.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

from xladev.runtime.execute import device_memory
from xladev.runtime.graph import backend
from xladev.schema.memory import added_bytes

# The share of a step's time the sampling may take.
COST_SHARE = 0.01
# Who hears each sample: (step, device bytes less the scalar cache's, peak bytes), on the thread that ended the step.
listeners: list[Callable[[int, int, int], None]] = []


class StepMemory:
    """Samples device memory at step ends: this process's busiest device (the one a data-parallel rank trains on;
    under SPMD, the device holding most, which runs out first).

    Attributes:
      every: sample one step in this many (re-chosen after each sample from its cost).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.every = 1
        self._countdown = 0
        self._added = 0  # the most a graph of this step adds while it runs (XLA's memory analysis)
        self._live_before: int | None = None  # live bytes at the previous sample
        self._last_end_ns: int | None = None

    def graph_ran(self, memory: dict[str, int]) -> None:
        """A graph was dispatched: remembers what it adds while it runs, for the step's peak.

        Args:
          memory: XLA's memory analysis of its executable (empty when XLA gave none).
        """
        added = added_bytes(memory) if memory else None
        if added is not None and added > self._added:
            self._added = added

    def step_ended(self, step: int, cache_bytes: int = 0) -> tuple[int | None, int | None]:
        """Samples the device's memory at the end of `step`, when this step is one to sample.

        Args:
          step: the step that ended.
          cache_bytes: what the scalar cache holds now (left out of what listeners hear).

        Returns:
          (live bytes, peak bytes), or (None, None) for a step not sampled or a device that cannot say.
        """
        now = time.perf_counter_ns()
        with self._lock:
            interval = now - self._last_end_ns if self._last_end_ns is not None else None
            self._last_end_ns = now
            if self._countdown > 0:
                self._countdown -= 1
                return None, None
            added, self._added = self._added, 0
            # The cost is this thread's CPU time, not the wall time: on a busy machine one sample descheduled for
            # 10 ms read as a cost 200 steps' worth and starved the growth checks of samples for the rest of a run.
            started = time.thread_time_ns()
            try:
                live = device_memory.busiest_bytes_in_use(backend.jax_devices())
            except Exception:  # a device that cannot be read (torn down at exit): no figure, never a wrong one
                return None, None
            cost = time.thread_time_ns() - started
            if interval:
                self.every = max(1, math.ceil(cost / (COST_SHARE * interval)))
            self._countdown = self.every - 1
            before = self._live_before if self._live_before is not None else live
            self._live_before = live
            peak = max(live, before + added)
        for listener in listeners:
            listener(step, live - cache_bytes, peak)
        return live, peak

    def reset(self) -> None:
        """Forgets the samples so far (a new run in the same process: `Executor.reset`)."""
        with self._lock:
            self.every = 1
            self._countdown = 0
            self._added = 0
            self._live_before = None
            self._last_end_ns = None


step_memory = StepMemory()
