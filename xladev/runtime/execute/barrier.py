"""The step barrier: `mark_step` syncs every pending tensor, ends the step, then runs the step closures.

The step counter itself is in steps.py, where everything that stamps an event can read it; the
barrier is what advances it.
"""

from __future__ import annotations

import time
from typing import Callable

from xladev.events import Cause, Step, bus
from xladev.runtime.graph import annotate, stack, steps
from xladev.runtime.execute import closures as async_closures, profile_memory
from xladev.runtime.execute.execution import Execution, execution, lock
from xladev.runtime.execute.step_memory import step_memory
from xladev.runtime.graph.storage import pending_storages
from xladev.runtime.lowering.manual_regions import ManualRegionError, inside_region


class Barrier:
    """Ends steps. Holds the step closures waiting for the next barrier.

    Attributes:
      closures: (fn, args, run_async) triples, run in order after the next barrier.
    """

    def __init__(self, runner: Execution) -> None:
        self.runner = runner
        self.closures: list = []

    def add_closure(self, fn: Callable, args: tuple, run_async: bool) -> None:
        """Runs `fn(*args)` after the next barrier (on the closure thread when `run_async`)."""
        self.closures.append((fn, tuple(args), run_async))

    def mark_step(self, cause: Cause) -> None:
        """The step barrier: sync every live pending tensor, count the step, run step closures."""
        start = time.perf_counter_ns()
        annotate.barrier_begin(steps.current(), cause)
        frames = stack.capture_frames() if bus.wants_frames else None
        with lock:
            storages = pending_storages()
            if storages:
                self._sync(storages, cause, frames)
            # Ops recorded in a step that ran no graph (everything already data) still count.
            self.runner.flush_ops()
            ended = steps.advance()
        if bus.active:
            end = time.perf_counter_ns()
            device_bytes, peak_bytes = step_memory.step_ended(ended, self.runner.scalar_bytes)
            bus.emit(Step(end, ended, cause, end - start, frames, device_bytes, peak_bytes))
        profile_memory.step_ended()
        self._run_closures(ended)
        annotate.barrier_end(ended)

    def _sync(self, storages: list, cause: Cause, frames) -> None:
        try:
            self.runner.sync_storages(storages, cause, frames, donate=True)
        except ManualRegionError:
            # A value of a manual region that was never ended can be computed by no graph; kept alive (a
            # variable, a traceback), it must not fail every later barrier. The barrier computes the rest, and
            # reading it still raises. Walked only here: the walk costs a pass over each tensor's graph.
            left = [s for s in storages if not inside_region(s.value)]
            if len(left) == len(storages):
                raise
            stack.warn_at_user(f"{len(storages) - len(left)} tensor(s) computed inside a manual region (after "
                         "enable_manual_sharding) and never put back together with disable_manual_sharding are "
                         "left uncomputed at this barrier; reading one raises", RuntimeWarning)
            self.runner.sync_storages(left, cause, frames, donate=True)

    def _run_closures(self, ended: int) -> None:
        async_closures.raise_error()
        closures, self.closures = self.closures, []
        if not closures:
            return
        with annotate.closures_span(len(closures), ended):
            for fn, args, run_async in closures:
                if run_async:
                    async_closures.submit(fn, args)
                else:
                    fn(*args)

    def clear(self) -> None:
        """Drops the closures waiting for the next barrier (`Executor.reset`)."""
        self.closures = []


barrier = Barrier(execution)
