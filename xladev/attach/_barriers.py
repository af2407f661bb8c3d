"""The step barriers of a real torch_xla, wrapped: each one ends a step in xladev's event log.

Every barrier PyTorch/XLA has goes through `torch_xla.sync` (2.8 and later) or `xm.mark_step` (2.5 to 2.7,
where `torch_xla.sync` calls it): `MpDeviceLoader`, `StepTrace`, `torch_xla.compile` and `xm.optimizer_step`
call one of the two by its module attribute, so wrapping both names covers them all. The caller's frame
says which barrier it was, in PyTorch/XLA's own cause words.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

from xladev.events import Cause, CauseKind, Frame, Step, bus, ending
from xladev.attach._harvest import Harvester

_MAX_FRAMES = 64
# Distinct callers' stacks remembered with their cause and frames (a loop has a few barrier sites).
_MAX_STACKS = 256

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


# How often the adapter's thread reads torch_xla's metric samples and publishes the steps they complete, in
# seconds: the live view's lag behind an execution's end, and a bound on the adapter's reads (each costs about
# 0.25 ms with torch_xla's default 1,024 samples kept per metric).
POLL_INTERVAL_S = 0.05


class Steps:
    """Counts the steps of a real torch_xla run and publishes what happened in each.

    The barrier does only what cannot wait (`Harvester.at_barrier`); the metric samples are read, and the steps
    they complete published, by a thread of the adapter's every `POLL_INTERVAL_S`, and once more at the end.

    Args:
      harvester: reads torch_xla's metrics and analysis blocks.
      poll_interval_s: how often the samples are read while steps wait for them.
    """

    def __init__(self, harvester: Harvester, poll_interval_s: float = POLL_INTERVAL_S) -> None:
        self.harvester = harvester
        self.step = 0
        # A step's records go out once each of its executions has its time (torch_xla records it when the
        # execution ends, after the barrier returned) and its transfers are placed, so that a reader counting
        # per step finds each execution in its own step, as in a log of xladev's runtime.
        self._held: list = []
        self._lock = threading.Lock()
        self._inside = threading.local()
        self.finished = False
        self._told_failure = False
        self._stacks: dict[tuple, tuple[Cause, tuple[Frame, ...]]] = {}  # callers' stacks seen -> cause, frames
        # Time spent at the barriers, and on the adapter's thread (sample reads and records), for `bench_attach.py`.
        self.own_ns = 0
        self.poll_ns = 0
        self.poll_interval_s = poll_interval_s
        self._poller: threading.Thread | None = None
        self._stop = threading.Event()
        os.register_at_fork(after_in_child=self._forget_in_child)

    def _forget_in_child(self) -> None:
        # A forked child has no poller thread, and the lock may have been taken by it at the fork.
        self._lock = threading.Lock()
        self._poller = None
        self._stop = threading.Event()

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
            ending.say(f"attach: reading torch_xla's metrics failed ({type(exc).__name__}: {exc}); "
                       "the run goes on, and some steps' records may be missing")

    def ended(self, start: int, caller, ok: bool) -> None:
        """Keeps the step's events and, when the barrier returned, the step itself, for the poller to publish."""
        end = time.perf_counter_ns()
        try:
            cause, frames = self._cause_and_frames(caller)
            with self._lock:
                if self.finished:
                    return
                self._held += self.harvester.at_barrier(self.step, end)
                if ok:
                    self._held.append(Step(end, self.step, cause, end - start, frames))
                    self.step += 1
                if self._poller is None:
                    self._poller = threading.Thread(target=self._poll, name="xladev-attach", daemon=True)
                    self._poller.start()
        finally:
            self.own_ns += time.perf_counter_ns() - end

    def _cause_and_frames(self, caller) -> tuple[Cause, tuple[Frame, ...] | None]:
        """The barrier's cause and the user's stack (None when no sink wants frames). A training loop calls its
        barrier from the same lines every step: keyed by each frame's code and line, both are made once."""
        key = []
        frame = caller
        while frame is not None and len(key) < _MAX_FRAMES:
            key.append((frame.f_code, frame.f_lineno))
            frame = frame.f_back
        key = tuple(key)
        known = self._stacks.get(key)
        if known is None:
            if len(self._stacks) >= _MAX_STACKS:
                self._stacks.clear()
            known = self._stacks[key] = (barrier_cause(caller), frames_from(caller))
        return known[0], known[1] if bus.wants_frames else None

    def _poll(self) -> None:
        stop = self._stop
        while not stop.wait(self.poll_interval_s):
            try:
                self.publish_ready()
            except Exception as exc:  # noqa: BLE001 - the next read may succeed; the job goes on either way
                self._failed(exc)

    def publish_ready(self) -> None:
        """Reads the samples that arrived and publishes the steps now complete."""
        with self._lock:
            if self.finished or not self._held or ending.sealed:
                return  # nothing ended since the last read; or the run's end is being written by `finish`
            start = time.perf_counter_ns()
            self._held += self.harvester.from_samples(start)
            waiting = self.harvester.first_waiting_step()
            self._publish(self.step if waiting is None else min(waiting, self.step))
            self.poll_ns += time.perf_counter_ns() - start

    def finish(self) -> None:
        """The end of the run: what happened since the last barrier, and executions still waiting for their time."""
        self._stop.set()
        with self._lock:
            if self.finished:
                return
            self.finished = True
            now = time.perf_counter_ns()
            self._held += self.harvester.at_barrier(self.step, now, final=True)
            self._held += self.harvester.from_samples(now, final=True)
            self.harvester.debug.close()
            self._publish(None)
            lost = self.harvester.lost_samples
            if lost:
                ending.say(f"attach: torch_xla dropped {lost} metric samples before the adapter read them (more than "
                           "XLA_METRICS_SAMPLES between two reads): some compile, execution or transfer times in the "
                           "event log belong to other graphs; raise XLA_METRICS_SAMPLES")

    def _publish(self, waiting: int | None) -> None:
        """Emits the held events of the steps before `waiting` (all when None): by step, each step's barrier last."""
        ready = [e for e in self._held if waiting is None or e.step < waiting]
        if not ready:
            return
        self._held = [e for e in self._held if not (waiting is None or e.step < waiting)]
        ready.sort(key=lambda e: (e.step, isinstance(e, Step), e.time_ns))
        if bus.active:
            for event in ready:
                bus.emit(event)
