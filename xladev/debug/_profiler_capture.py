"""Profile capture: in-process (`start_trace`/`stop_trace`) and remote (`trace`, `trace_detached`).

A remote capture asks a profiler server (`xp.start_server` in the traced process, any process on any
host) to record for `duration_ms` through xprof's client, then checks what was written: a new, non-empty
`.xplane.pb` that xprof reads back with at least one event. Each wait is bounded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time

from xladev.debug import _profiler_client, _profiler_xspace
from xladev.debug._profiler_common import (
    NO_EVENTS_HELP, ProfileSummary, ProfilerError, check_profile, new_xplane_files, parse_service_addr, prepare_logdir,
    probe_server, xplane_files,
)
from xladev.schema.ranks import RANK_FIELD, rank_and_world

# ---- in-process capture -------------------------------------------------------------------------


@dataclasses.dataclass
class _Session:
    logdir: str
    owner: str
    before: dict
    started_ns: int


_lock = threading.RLock()
_active: _Session | None = None


def active_session() -> _Session | None:
    return _active


def _reset_jax_state() -> None:
    # jax leaves its session marked as running when exporting fails; clear it so the next start works.
    try:
        from jax._src import profiler as jax_profiler

        jax_profiler._profile_state.reset()
    except Exception:
        pass


def rank_logdir(logdir):
    """This rank's profile directory: `logdir/rank<R>` in a job of several processes (two ranks on one host
    would otherwise write the same `<time>/<host>.xplane.pb`), `{rank}` in `logdir` replaced, else `logdir`."""
    text = os.fspath(logdir) if logdir is not None else ""
    rank, world = rank_and_world()
    if RANK_FIELD in text:
        return text.replace(RANK_FIELD, str(rank))
    return os.path.join(text, f"rank{rank}") if world > 1 and text else logdir


def start_trace(logdir, *, host_tracer_level: int = 2, python_tracer_level: int = 0, _owner: str = "xp.start_trace") -> None:
    """Starts recording a profile of this process; `stop_trace()` writes it under `logdir`.

    Args:
      logdir: the TensorBoard log directory; the profile goes to `<logdir>/plugins/profile/<time>/<host>.xplane.pb`.
        In a job of several processes each rank writes under `<logdir>/rank<R>` (TensorBoard shows one run per
        rank), or where `{rank}` in `logdir` says.
      host_tracer_level: 1 user annotations only, 2 (default) adds runtime/XLA host events, 3 everything.
      python_tracer_level: 1 records every Python call too (large profiles, slower steps); 0 (default) does not.

    Raises:
      ProfilerError: a trace is already running in this process, or `logdir` is not writable.
    """
    global _active
    with _lock:
        if _active is not None:
            raise ProfilerError(
                f"a profile trace is already running in this process (started by {_active.owner} into "
                f"{_active.logdir!r}); call xp.stop_trace() before starting another")
        logdir = prepare_logdir(rank_logdir(logdir))
        before = xplane_files(logdir)
        import jax.profiler

        options = jax.profiler.ProfileOptions()
        options.host_tracer_level = int(host_tracer_level)
        options.python_tracer_level = int(python_tracer_level)
        try:
            jax.profiler.start_trace(logdir, profiler_options=options)
        except RuntimeError as exc:
            raise ProfilerError(
                f"cannot start a profile trace: {exc} (a trace was started directly with jax.profiler.start_trace; "
                "stop it with jax.profiler.stop_trace())") from None
        _active = _Session(logdir, _owner, before, time.time_ns())


def stop_trace() -> str:
    """Stops the running in-process trace and writes it.

    Returns:
      The path of the written `.xplane.pb`.

    Raises:
      ProfilerError: no trace is running, or writing failed (a remote capture of this process was running at
        the same time, or the directory became unwritable), or nothing was written.
    """
    global _active
    with _lock:
        session = _active
        if session is None:
            raise ProfilerError("stop_trace() called but no profile trace is running: call xp.start_trace(logdir) first")
        _active = None
        try:
            tidied = _stop_and_write(session.logdir)
        except Exception as exc:
            _reset_jax_state()
            hint = ""
            if "ALREADY_EXISTS" in str(exc) or "Another profiling session" in str(exc):
                hint = (" A remote capture (xp.trace / TensorBoard's capture button) of this process overlapped the "
                        "in-process trace; only one profiling session can record at a time.")
            raise ProfilerError(f"writing the profile to {session.logdir!r} failed: {type(exc).__name__}: {exc}.{hint}") from None
        written = new_xplane_files(session.logdir, session.before)
        if not written:
            raise ProfilerError(f"the profile trace stopped but no .xplane.pb was written under {session.logdir!r}")
        path = written[-1]
        if os.path.getsize(path) == 0:
            raise ProfilerError(f"the profile {path!r} is empty (0 bytes)")
        announce_written(path, session.logdir, tidied, session.owner)
        return path


def announce_written(path: str, logdir: str, tidied: "_profiler_xspace.TidyResult | None", how: str,
                     steps: tuple[int, int] | None = None) -> None:
    """Publishes `Profile` (the event log's `profile` record: `xladev report` and the TUI show where
    the profile is, which steps it covers and how to open it), when anything listens.

    Args:
      path: the written `.xplane.pb`.
      logdir: its TensorBoard log directory.
      tidied: what tidying it found (its step window), or None.
      how: the call that captured it.
      steps: the exact (first, last) step window, when the caller knows it (a step window).
    """
    from xladev.events import Profile, bus

    if not bus.active:
        return
    from xladev.runtime.graph import steps as runtime_steps

    if steps is None and tidied is not None:
        steps = (tidied.first_step, tidied.last_step)
    first, last = steps if steps is not None else (None, None)
    bus.emit(Profile(time.perf_counter_ns(), runtime_steps.current(), path, logdir, first, last, how))


def _stop_and_write(logdir: str) -> "_profiler_xspace.TidyResult | None":
    """Stops jax's in-process profiling session and writes its profile, tidied (`_profiler_xspace`), where
    and as `jax.profiler.stop_trace()` writes it (`<logdir>/plugins/profile/<time>/<host>.xplane.pb`).

    Returns:
      What tidying removed and found (the steps the profile covers); None when the profile could not be read.

    Raises:
      RuntimeError: no session runs, or the native profiler failed to stop or write (its message).
    """
    from jax._src import profiler as jax_profiler

    state = getattr(jax_profiler, "_profile_state", None)
    session = getattr(state, "profile_session", None)
    if session is None or not hasattr(session, "export"):  # another jax: its own writer, then tidy the file
        before = xplane_files(logdir)
        jax_profiler.stop_trace()
        results = [_tidy(path) for path in new_xplane_files(logdir, before)]
        return results[-1] if results else None
    with state.lock:
        try:
            xspace = session.stop()
        finally:
            state.reset()
            jax_profiler.clear_metadata()
        try:
            xspace, result = _profiler_xspace.tidy(xspace, _jax_ops())
        except ValueError:
            result = None  # written as it came; reading it back says what is wrong
        session.export(xspace, logdir)
        return result


class trace_session(contextlib.AbstractContextManager):
    """`with xp.trace_session(logdir) as t: ...` records the block; `t.path` is the `.xplane.pb` afterwards.

    The profile is written even when the block raises (the block's error then propagates).
    """

    def __init__(self, logdir, **options) -> None:
        self.logdir = logdir
        self.options = options
        self.path: str | None = None

    def __enter__(self) -> "trace_session":
        start_trace(self.logdir, _owner="xp.trace_session", **self.options)
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.path = stop_trace()
        except ProfilerError:
            if exc_type is None:
                raise
        return False


# ---- remote capture -----------------------------------------------------------------------------


BUSY_MARK = "Another profiling session active"


def _native_trace(addr: str, logdir: str, duration_ms: int, attempts: int, options: dict, timeout_s: float) -> None:
    """xprof's blocking client call, in a child process (`_profiler_client`), bounded by `timeout_s`.

    Raises:
      ProfilerError: the capture did not finish in time, the server was busy with another session, it
        recorded nothing, or the client failed; each says so.
    """
    import subprocess

    try:
        outcome = _profiler_client.run(addr, logdir, duration_ms, attempts, options, timeout_s)
    except subprocess.TimeoutExpired:
        raise ProfilerError(
            f"the capture from {addr} did not finish within {timeout_s:g} s (it asked for {duration_ms} ms x "
            f"{attempts} attempt(s)); the server accepted the connection but never answered. Is it a profiler "
            "server (xp.start_server) of a process that is still alive?") from None
    if outcome.ok:
        return
    text = outcome.error.strip()
    if BUSY_MARK in outcome.output:
        raise ProfilerError(
            f"the profiler server at {addr} is busy: another profiling session is active in that process "
            "(another `xladev capture`, TensorBoard's Capture button, an xp.trace/trace_detached, or an in-process "
            "xp.start_trace/profile_steps there). Only one session can record at a time: wait for it to finish, "
            f"then capture again ({attempts} attempt(s) were refused: \"{BUSY_MARK}\")")
    if "No trace event" in text or "no responses from clients" in text:
        raise ProfilerError(
            f"No trace event is collected from {addr} after {attempts} attempt(s) of {duration_ms} ms: the "
            f"server answered but recorded nothing ({text.splitlines()[0]}).\n" + NO_EVENTS_HELP)
    raise ProfilerError(f"capturing a profile from {addr} failed: {text}")


def trace(service_addr: str, logdir, duration_ms: int = 1000, num_tracing_attempts: int = 3,
          host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, *,
          python_tracer_level: int = 0, timeout_s: float | None = None) -> str:
    """Captures a profile from the profiler server at `service_addr`; blocks until it is written and checked."""
    return capture(service_addr, logdir, duration_ms, num_tracing_attempts, host_tracer_level, device_tracer_level,
                   delay_ms, python_tracer_level=python_tracer_level, timeout_s=timeout_s).path


def capture(service_addr: str, logdir, duration_ms: int = 1000, num_tracing_attempts: int = 3,
            host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, *,
            python_tracer_level: int = 0, timeout_s: float | None = None, quiet: bool = False) -> ProfileSummary:
    """`trace`, returning the summary of what was read back. `quiet` silences xprof's native log lines
    while reading (command-line tools only)."""
    host, port = parse_service_addr(service_addr)
    for name, value, low in (("duration_ms", duration_ms, 1), ("num_tracing_attempts", num_tracing_attempts, 1),
                             ("delay_ms", delay_ms, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ProfilerError(f"{name} must be an integer >= {low}, got {value!r}")
    logdir = prepare_logdir(logdir)
    probe_server(host, port)
    before = xplane_files(logdir)
    options = {
        "host_tracer_level": int(host_tracer_level),
        "device_tracer_level": int(device_tracer_level),
        "python_tracer_level": int(python_tracer_level),
        "delay_ms": int(delay_ms),
    }
    if timeout_s is None:
        timeout_s = (delay_ms + duration_ms) * num_tracing_attempts / 1000.0 + 30.0 + 2.0 * num_tracing_attempts
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    _native_trace(addr, logdir, duration_ms, num_tracing_attempts, options, timeout_s)
    written = new_xplane_files(logdir, before)
    if not written:
        raise ProfilerError(f"No trace event is collected: the capture from {addr} reported success but wrote no "
                            f".xplane.pb under {logdir!r}.\n" + NO_EVENTS_HELP)
    tidied = _tidy(written[-1])
    summary = check_profile(written[-1], quiet=quiet)
    if _is_this_process(host, port):
        announce_written(written[-1], logdir, tidied, f"xp.trace from {addr}")
    return summary


def _is_this_process(host: str, port: int) -> bool:
    """True when `host:port` is this process's own profiler server (a capture of this run)."""
    from xladev.debug._profiler_server import current_server

    server = current_server()
    if server is None or server.port != port:
        return False
    import socket

    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname())


def _tidy(path: str) -> "_profiler_xspace.TidyResult | None":
    """Removes jaxlib's duplicate call events and the runtime's lowering-time jax calls from a written profile.

    A file that cannot be tidied stays as it was (None): the check that follows says what is wrong with it.
    """
    try:
        return _profiler_xspace.tidy_file(path, _jax_ops())
    except (OSError, ValueError):
        return None


def _jax_ops() -> dict:
    """This process's compiled graphs' `call_jax` instructions, for naming their events; {} without a runtime."""
    if "xladev.runtime.compile.compilation" not in sys.modules:  # a client that ran no graph: nothing to name
        return {}
    from xladev.runtime.compile.compilation import jax_call_ops_by_module

    return jax_call_ops_by_module()


class CaptureHandle:
    """A capture running on a background thread (from `xp.trace_detached`).

    Attributes:
      done: True once the capture finished, successfully or not.
      path: the checked `.xplane.pb` once it succeeded, else None.
      error: the exception (a ProfilerError with what to check) once it failed, else None.
    """

    def __init__(self, service_addr: str, logdir, kwargs: dict, report_errors: bool) -> None:
        self.service_addr = service_addr
        self.logdir = logdir
        self.path: str | None = None
        self.error: BaseException | None = None
        self._finished = threading.Event()
        self._report = report_errors
        self._thread = threading.Thread(target=self._run, args=(kwargs,), name="xladev-trace-detached", daemon=True)
        self._thread.start()

    def _run(self, kwargs: dict) -> None:
        try:
            self.path = trace(self.service_addr, self.logdir, **kwargs)
        except BaseException as exc:  # kept on the handle, and reported: never lost
            self.error = exc
            if self._report:
                print(f"xladev profiler: detached capture from {self.service_addr} failed: {exc}", file=sys.stderr)
        finally:
            self._finished.set()

    @property
    def done(self) -> bool:
        return self._finished.is_set()

    def join(self, timeout: float | None = None) -> str | None:
        """Waits up to `timeout` seconds (forever when None; the capture itself is bounded).

        Returns:
          The profile path once it succeeded; None while running or after a failure (see `.error`).
        """
        self._finished.wait(timeout)
        return self.path

    def result(self, timeout: float | None = None) -> str:
        """Like `join`, but raises the capture's error, or TimeoutError if still running after `timeout`."""
        if not self._finished.wait(timeout):
            raise TimeoutError(f"the capture from {self.service_addr} is still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.path  # type: ignore[return-value]

    def __repr__(self) -> str:
        state = "running" if not self.done else (f"failed: {self.error}" if self.error else f"wrote {self.path}")
        return f"<xladev CaptureHandle {self.service_addr} {state}>"


def trace_detached(service_addr: str, logdir, duration_ms: int = 1000, num_tracing_attempts: int = 3,
                   host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, *,
                   python_tracer_level: int = 0, timeout_s: float | None = None,
                   report_errors: bool = True) -> CaptureHandle:
    """`trace(...)` on a background thread; returns at once with a handle (a malformed address raises here)."""
    parse_service_addr(service_addr)
    kwargs = dict(duration_ms=duration_ms, num_tracing_attempts=num_tracing_attempts,
                  host_tracer_level=host_tracer_level, device_tracer_level=device_tracer_level, delay_ms=delay_ms,
                  python_tracer_level=python_tracer_level, timeout_s=timeout_s)
    return CaptureHandle(service_addr, logdir, kwargs, report_errors)
