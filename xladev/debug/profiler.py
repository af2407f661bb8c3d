"""Profiling: captures that open in TensorBoard's Profile tab, and the annotations they show.

    import xladev.debug.profiler as xp

    server = xp.start_server(9012)                       # in the training process
    handle = xp.trace_detached("localhost:9012", "logs", duration_ms=2000)
    for step, (x, y) in enumerate(loader):
        with xp.StepTrace("train", step_num=step):       # `train N` on the timeline; exit marks the step
            with xp.Trace("forward"):                    # a span, and the IR scope of the ops inside
                loss = loss_fn(model(x), y)
            loss.backward(); optimizer.step()
    print(handle.join() or handle.error)                 # the checked .xplane.pb, or why there is none

Or in-process, no server: `xp.start_trace("logs")` ... `xp.stop_trace()`, `with xp.trace_session("logs")`,
or exact steps with `xp.profile_steps("logs", start=5, count=3)` (also `XLADEV_PROFILE_STEPS=5:8`).
Then `tensorboard --logdir logs`. The runtime annotates every compile (`xladev.compile`, with the user's
line and the recompilation reason), graph run (`xladev.execute`, once, with why it ran and its HLO
module), mid-step sync (`xladev.sync .item()`), CPU fallback (`xladev.fallback aten::op`), copy
(`xladev.to_device`, `xladev.from_device`), step closures, barrier (`xladev.mark_step`) and the lazy
tracing of each step (`xladev.tracing`) (xladev/runtime/graph/annotate.py). Profiles xladev writes are
tidied of jaxlib's duplicate and lowering-time call events (_profiler_xspace.py).
As in PyTorch/XLA, a step barrier inside an open `Trace` raises `TraceScopeError` ("Expecting scope to be
empty but it is forward.1", then where and what to do); a `StepTrace`'s own exit barrier does not.
See docs/profiling.md.
"""

from __future__ import annotations

from xladev.debug import _profiler_capture, _profiler_server, _profiler_steps
from xladev.debug._profiler_annotations import StepTrace, Trace, trace_me
from xladev.debug._profiler_capture import CaptureHandle, trace_session
from xladev.debug._profiler_common import ProfileSummary, ProfilerError, check_profile, tensorboard_command
from xladev.debug._profiler_scopes import TraceScopeError
from xladev.debug._profiler_server import ProfilerServer
from xladev.debug._profiler_steps import StepWindow

__all__ = [
    "CaptureHandle", "ProfileSummary", "ProfilerError", "ProfilerServer", "StepTrace", "StepWindow", "Trace",
    "TraceScopeError", "check_profile", "profile_steps", "start_server", "start_trace", "stop_server", "stop_trace",
    "tensorboard_command", "trace", "trace_detached", "trace_me", "trace_session",
]


def start_server(port: int) -> ProfilerServer:
    """Starts this process's profiler server, which `trace`, `xladev capture` and TensorBoard capture from.

    It listens on all interfaces and runs until `stop_server()` or the process exits.

    Args:
      port: TCP port; 0 picks a free one (read `.port` from the result).

    Returns:
      The server (`.port`, `.address`, `.stop()`); the same one when called again with its port.

    Raises:
      ProfilerError: the port is already in use (named in the message), invalid, or another server runs here.
    """
    return _profiler_server.start_server(port)


def stop_server() -> None:
    """Stops this process's profiler server (no-op when none runs)."""
    _profiler_server.stop_server()


def trace(service_addr: str, logdir: str, duration_ms: int = 1000, num_tracing_attempts: int = 3,
          host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, *,
          python_tracer_level: int = 0, timeout_s: float | None = None) -> str:
    """Captures a profile from a profiler server, blocking until it is written and checked.

    Args:
      service_addr: `host:port` of a process that ran `start_server(port)` (this one too).
      logdir: TensorBoard log directory; the file goes to `<logdir>/plugins/profile/<time>/<host>_<port>.xplane.pb`.
      duration_ms: how long to record.
      num_tracing_attempts: tries when a capture records no event.
      host_tracer_level: 1 user annotations, 2 (default) adds runtime/XLA host events, 3 verbose.
      device_tracer_level: 0 off, 1 device activity (GPU/TPU; none on CPU).
      delay_ms: wait before recording.
      python_tracer_level: 1 also records every Python call (big profiles); default 0.
      timeout_s: bound on the whole wait; default (delay_ms + duration_ms) x attempts + 30 s.

    Returns:
      The path of the new `.xplane.pb`, checked to be non-empty and to hold trace events.

    Raises:
      ProfilerError: malformed address, nothing listening there, no event collected, an unwritable
        logdir, or a capture that did not finish in time; the message says what to check.
    """
    return _profiler_capture.trace(service_addr, logdir, duration_ms, num_tracing_attempts, host_tracer_level,
                                   device_tracer_level, delay_ms, python_tracer_level=python_tracer_level,
                                   timeout_s=timeout_s)


def trace_detached(service_addr: str, logdir: str, duration_ms: int = 1000, num_tracing_attempts: int = 3,
                   host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, *,
                   python_tracer_level: int = 0, timeout_s: float | None = None,
                   report_errors: bool = True) -> CaptureHandle:
    """`trace(...)` on a background thread, so the caller (the training loop) keeps running.

    Returns:
      A handle: `.join(timeout=None)` waits and returns the path (None on failure), `.result()` returns it
      or raises, `.done`, `.path`, `.error`. A failure is also printed to stderr unless `report_errors=False`.
    """
    return _profiler_capture.trace_detached(service_addr, logdir, duration_ms, num_tracing_attempts,
                                            host_tracer_level, device_tracer_level, delay_ms,
                                            python_tracer_level=python_tracer_level, timeout_s=timeout_s,
                                            report_errors=report_errors)


def start_trace(logdir: str, *, host_tracer_level: int = 2, python_tracer_level: int = 0) -> None:
    """Starts recording this process in-process (no server, no port); `stop_trace()` writes the profile.

    Raises:
      ProfilerError: a trace is already running here, or `logdir` cannot be written.
    """
    _profiler_capture.start_trace(logdir, host_tracer_level=host_tracer_level, python_tracer_level=python_tracer_level)


def stop_trace() -> str:
    """Stops the in-process trace and writes it.

    Returns:
      The `.xplane.pb` path under `<logdir>/plugins/profile/<time>/`.

    Raises:
      ProfilerError: no trace is running, or writing it failed.
    """
    return _profiler_capture.stop_trace()


def profile_steps(logdir: str, start: int = 5, count: int = 3, *, announce: bool = True,
                  host_tracer_level: int = 2, python_tracer_level: int = 0) -> StepWindow:
    """Profiles exactly steps `start`..`start+count-1` in-process, from the step barriers.

    The trace starts when the barrier ending step `start-1` is done and stops after the barrier ending
    step `start+count-1`. Steps are numbered by the runtime from 0 (each `mark_step` ends one).

    Returns:
      A handle: `.join(timeout)` returns the path once written, `.path`, `.error`, `.done`, `.started`,
      `.cancel()`. With `announce`, the path and the tensorboard command are printed when written.

    Raises:
      ProfilerError: bad numbers, `start` already begun, an overlapping armed window, or an unwritable logdir.
    """
    return _profiler_steps.profile_steps(logdir, start, count, announce=announce,
                                         host_tracer_level=host_tracer_level,
                                         python_tracer_level=python_tracer_level)
