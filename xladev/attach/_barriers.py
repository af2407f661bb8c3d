"""The step barriers of a real torch_xla, wrapped: each one ends a step in xladev's event log.

Every barrier PyTorch/XLA has goes through `torch_xla.sync` (2.8 and later) or `xm.mark_step` (2.5 to 2.7,
where `torch_xla.sync` calls it): `MpDeviceLoader`, `StepTrace`, `torch_xla.compile` and `xm.optimizer_step`
call one of the two by its module attribute, so wrapping both names covers them all. The caller's frame
says which barrier it was, in PyTorch/XLA's own cause words.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

from xladev.events import Cause, CauseKind, Frame, StepMarked, bus, ending
from xladev.attach._harvest import Harvester

_MAX_FRAMES = 64

# (file ending, function) of torch_xla's own callers of a barrier -> the cause; None: any function of the file.
_LIBRARY_CALLERS = (
    ("torch_xla/distributed/parallel_loader.py", None, CauseKind.DEVICE_LOADER),
    ("torch_xla/debug/profiler.py", None, CauseKind.STEP_TRACE),
    ("torch_xla/torch_xla.py", "_clear_pending_ops_before_compile", CauseKind.COMPILE_PENDING),
    ("torch_xla/torch_xla.py", "_compile", CauseKind.COMPILE_REGION),
    ("torch_xla/core/xla_model.py", "optimizer_step", CauseKind.OPTIMIZER_STEP),
)


def barrier_cause(caller) -> Cause:
    """The cause of a barrier called from `caller` (a Python frame): which of torch_xla's callers, else the user."""
    frame = caller
    while frame is not None:
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/torch_xla/" not in path:
            return Cause(CauseKind.USER_MARK_STEP)
        for ending, function, kind in _LIBRARY_CALLERS:
            if path.endswith(ending) and function in (None, frame.f_code.co_name):
                return Cause(kind)
        frame = frame.f_back  # torch_xla's own pass-through (xm.mark_step calling sync): look further out
    return Cause(CauseKind.USER_MARK_STEP)


def frames_from(caller) -> tuple[Frame, ...]:
    """The Python stack from `caller` outwards, innermost first."""
    frames = []
    frame = caller
    while frame is not None and len(frames) < _MAX_FRAMES:
        frames.append(Frame(frame.f_code.co_name, frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back
    return tuple(frames)


class Steps:
    """Counts the steps of a real torch_xla run and publishes what happened in each.

    Args:
      harvester: reads torch_xla's metrics and analysis blocks.
    """

    def __init__(self, harvester: Harvester) -> None:
        self.harvester = harvester
        self.step = 0
        # Published one step late: a step's records go out once each of its executions has its time (torch_xla
        # records it when the execution ends, after the barrier returned), so that a reader counting per step
        # finds each execution in its own step, as in a log of xladev's runtime.
        self._held: list = []
        self._lock = threading.Lock()
        self._inside = threading.local()
        self.finished = False
        self._told_failure = False
        self.own_ns = 0  # time spent here at the barriers (harvest and records), for `bench_attach.py`

    def wrap(self, barrier):
        """`barrier` (torch_xla.sync, xm.mark_step), ending a step in the log each time it returns."""
        if getattr(barrier, "__xladev_barrier__", False):
            return barrier

        @functools.wraps(barrier)
        def step_barrier(*args, **kwargs):
            inside = self._inside
            if getattr(inside, "depth", 0):  # xm.mark_step calling torch_xla.sync: one barrier, not two
                return barrier(*args, **kwargs)
            inside.depth = 1
            start = time.perf_counter_ns()
            ok = False
            try:
                result = barrier(*args, **kwargs)
                ok = True
                return result
            finally:
                inside.depth = 0
                if bus.active:
                    try:
                        self.ended(start, sys._getframe(1), ok)
                    except Exception as exc:  # reading torch_xla's outputs must never break the user's step
                        self._failed(exc)

        step_barrier.__xladev_barrier__ = True
        return step_barrier

    def _failed(self, exc: Exception) -> None:
        if not self._told_failure:
            self._told_failure = True
            ending.say(f"attach: reading torch_xla's metrics at a barrier failed ({type(exc).__name__}: {exc}); "
                       "the run goes on, and this step's records may be missing")

    def ended(self, start: int, caller, ok: bool) -> None:
        """Publishes the step's events and, when the barrier returned, the step itself."""
        end = time.perf_counter_ns()
        try:
            self._ended(start, end, caller, ok)
        finally:
            self.own_ns += time.perf_counter_ns() - end

    def _ended(self, start: int, end: int, caller, ok: bool) -> None:
        cause = barrier_cause(caller)
        frames = frames_from(caller) if bus.wants_frames else None
        with self._lock:
            if self.finished:
                return
            self._held += self.harvester.collect(self.step, end)
            if ok:
                self._held.append(StepMarked(end, self.step, cause, end - start, frames))
                self.step += 1
            self._publish(self.harvester.first_waiting_step())

    def finish(self) -> None:
        """The end of the run: what happened since the last barrier, and executions still waiting for their time."""
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self._held += self.harvester.collect(self.step, time.perf_counter_ns(), final=True)
            self._publish(None)
            lost = self.harvester.lost_samples
            if lost:
                ending.say(f"attach: torch_xla dropped {lost} metric samples before the adapter read them (more than "
                           "XLA_METRICS_SAMPLES in one step): some compile, execution or transfer times in the "
                           "event log belong to other graphs; raise XLA_METRICS_SAMPLES")

    def _publish(self, waiting: int | None) -> None:
        """Emits the held events of the steps before `waiting` (all when None): by step, each step's barrier last."""
        ready = [e for e in self._held if waiting is None or e.step < waiting]
        if not ready:
            return
        self._held = [e for e in self._held if not (waiting is None or e.step < waiting)]
        ready.sort(key=lambda e: (e.step, isinstance(e, StepMarked), e.time_ns))
        if bus.active:
            for event in ready:
                bus.emit(event)
