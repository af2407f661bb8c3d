"""Step-window capture: profile exactly steps START..START+COUNT-1, in-process, from the step barriers.

The trace starts when the barrier ending step START-1 is done and stops when the barrier ending the
window's last step is done (closures included), so the profile holds whole steps: their lazy tracing,
barrier, compiles and executions. `XLADEV_PROFILE_STEPS=5:8` arms the same from the environment
(profiles steps 5, 6 and 7 into `XLADEV_PROFILE_DIR`).
"""

from __future__ import annotations

import atexit
import sys
import threading

from xladev.debug import _profiler_capture as capture
from xladev.debug._profiler_common import ProfilerError, prepare_logdir, tensorboard_command

_lock = threading.Lock()
_windows: list["StepWindow"] = []
_atexit_registered = False


class StepWindow:
    """An armed or running step-window capture (from `xp.profile_steps`).

    Attributes:
      logdir: the log directory.
      start: the first profiled step; stop: one past the last (steps start..stop-1 are profiled).
      started: True once the trace began.
      done: True once the profile was written (`path`) or the window failed or was cancelled (`error`).
      path: the `.xplane.pb` once written.
      error: why the window failed, else None.
    """

    def __init__(self, logdir: str, start: int, count: int, options: dict, announce: bool, source: str) -> None:
        self.logdir = logdir
        self.start = start
        self.stop = start + count
        self.options = options
        self.announce = announce
        self.source = source
        self.started = False
        self.path: str | None = None
        self.error: BaseException | None = None
        self._finished = threading.Event()
        self._last_step: int | None = None

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def call(self) -> str:
        """How the window was asked for: `XLADEV_PROFILE_STEPS=5:8` or `xp.profile_steps(start=5, count=3)`."""
        if self.source == "XLADEV_PROFILE_STEPS":
            return f"XLADEV_PROFILE_STEPS={self.start}:{self.stop}"
        return f"xp.{self.source}(start={self.start}, count={self.stop - self.start})"

    @property
    def steps(self) -> range:
        return range(self.start, self.stop)

    def join(self, timeout: float | None = None) -> str | None:
        """Waits until the window's profile is written (or it failed); returns the path, or None."""
        self._finished.wait(timeout)
        return self.path

    def cancel(self) -> None:
        """Disarms the window; a running trace is stopped and written (its `path` is set)."""
        if self.done:
            return
        if self.started:
            self._finish(note="cancelled")
        else:
            self._fail(ProfilerError(f"profile_steps({self.start}:{self.stop}) was cancelled before it started"),
                       report=False)

    # ---- barrier hook ----------------------------------------------------------------------------
    def _on_barrier(self, ended: int) -> None:
        self._last_step = ended
        if not self.started:
            if ended == self.start - 1:
                self._begin()
            elif ended >= self.start:  # cannot happen with consecutive steps; never hang armed
                self._fail(ProfilerError(f"step {self.start} passed before the window could start"))
        elif ended >= self.stop - 1:
            self._finish()

    def _begin(self) -> None:
        try:
            capture.start_trace(self.logdir, _owner=self.call(), **self.options)
        except BaseException as exc:
            self._fail(exc)
            return
        self.started = True

    def _finish(self, note: str = "") -> None:
        _unhook(self)
        try:
            self.path = capture.stop_trace()
        except BaseException as exc:
            self._fail(exc)
            return
        self._finished.set()
        if self.announce:
            last = self.stop - 1 if not note else self._last_step
            what = f"steps {self.start}-{last}" if last is not None and last > self.start else f"step {self.start}"
            extra = f" ({note})" if note else ""
            print(f"xladev profiler: {what} profiled{extra}: {self.path}\n"
                  f"  view it with: {tensorboard_command(self.logdir)}", file=sys.stderr)

    def _fail(self, exc: BaseException, report: bool = True) -> None:
        _unhook(self)
        self.error = exc
        self._finished.set()
        if report:
            print(f"xladev profiler: {self.source}({self.start}:{self.stop}) failed: {exc}", file=sys.stderr)

    def __repr__(self) -> str:
        state = ("armed" if not self.started else "recording") if not self.done else (
            f"failed: {self.error}" if self.error else f"wrote {self.path}")
        return f"<xladev StepWindow steps {self.start}..{self.stop - 1} {state}>"


def _unhook(window: StepWindow) -> None:
    from xladev.runtime.graph import annotate

    annotate.remove_barrier_hook(window._on_barrier)
    with _lock:
        if window in _windows:
            _windows.remove(window)


def _at_exit() -> None:
    # A run that ends inside the window still gets its profile (with the steps it had); an armed window
    # whose steps never came says so.
    from xladev.runtime.api.runtime_state import executor

    for window in list(_windows):
        if window.started:
            window._finish(note=f"the run ended at step {executor.step}, before step {window.stop - 1} was done")
        else:
            window._fail(ProfilerError(f"never started: the run ended at step {executor.step}, before step "
                                       f"{window.start}"), report=window.announce)


def profile_steps(logdir, start: int = 5, count: int = 3, *, announce: bool = True, host_tracer_level: int = 2,
                  python_tracer_level: int = 0, _source: str = "profile_steps") -> StepWindow:
    """Profiles steps `start`..`start+count-1` in-process. Step numbers are the runtime's (0 is the first)."""
    global _atexit_registered
    for name, value, low in (("start", start, 0), ("count", count, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ProfilerError(f"profile_steps: {name} must be an integer >= {low}, got {value!r}")
    logdir = prepare_logdir(logdir)
    from xladev.runtime.graph import annotate
    from xladev.runtime.api.runtime_state import executor

    current = executor.step
    if start < current:
        raise ProfilerError(f"profile_steps: step {start} has already begun (the runtime is at step {current}); "
                            f"ask for a later window, e.g. start={current + 1}")
    window = StepWindow(logdir, start, count, dict(host_tracer_level=host_tracer_level,
                                                   python_tracer_level=python_tracer_level), announce, _source)
    with _lock:
        for other in _windows:
            if other.start < window.stop and window.start < other.stop:
                raise ProfilerError(f"profile_steps: steps {start}..{window.stop - 1} overlap the armed window "
                                    f"{other.start}..{other.stop - 1}; one trace can run at a time")
        _windows.append(window)
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True
    annotate.add_barrier_hook(window._on_barrier)
    if start == current:  # the window begins with the step being recorded now
        window._begin()
    return window


def armed_windows() -> list[StepWindow]:
    """Windows not yet done (armed or recording)."""
    with _lock:
        return list(_windows)


def start_from_flags() -> None:
    """Arms `XLADEV_PROFILE_STEPS=START:STOP` (steps START..STOP-1) into `XLADEV_PROFILE_DIR`; called at import."""
    from xladev._flags import ConfigError, config

    window = config.profile_steps
    if not window:
        return
    begin, stop = window
    try:
        profile_steps(config.profile_dir, begin, stop - begin, _source="XLADEV_PROFILE_STEPS")
    except ProfilerError as exc:
        raise ConfigError(f"XLADEV_PROFILE_STEPS={begin}:{stop} with XLADEV_PROFILE_DIR={config.profile_dir!r}: "
                          f"{exc}") from None
