"""How the run ends, for what xladev writes last: a normal exit, SIGTERM, or an exit status set while exiting.

End-of-run hooks (`at_end`) are what the sinks write last (the event log's `end` record, the PT_XLA_DEBUG
summary), after the runtime's own (`early=True`: announcing the graphs still running). Each runs once, early
ones first, whichever way the run ends:
- a normal exit (the script returns, `sys.exit`, an exception, Ctrl-C): from `atexit`;
- SIGTERM: from xladev's handler (`install_sigterm`), after which the process dies by SIGTERM as it would have.

SIGTERM (torchrun ends the surviving ranks of a failed job with it, as do `kill` and batch schedulers). With
its default action a process dies at once and writes nothing. xladev's handler writes the end-of-run output
first (the event log's `end` record says `terminated` by `SIGTERM`), then restores the default action and
re-raises the signal: the process still dies by SIGTERM (status 143 in a shell, -15 from `subprocess`), and,
as with the default action, the script's own exit handlers do not run. How it stays out of a user's way:
- It is installed when the first end-of-run output starts (the event log, PT_XLA_DEBUG; a run with neither
  keeps SIGTERM's default action), from the main thread, only while SIGTERM has its default action or a
  Python handler. `SIG_IGN`, or a handler installed from C, is left alone.
- A Python handler installed before xladev's is chained to: xladev notes that SIGTERM came (the end record
  names it), then calls that handler, which decides what happens; nothing else changes.
- A handler installed after xladev's replaces it (Python keeps one handler per signal); that handler decides.
  If it ends the process with `sys.exit`, the end-of-run output is written as on any exit. To keep xladev's
  behaviour as well, call the handler that `signal.signal` returned when yours was installed, as the last
  thing yours does.
- The output is written on a thread of its own (`xladev-sigterm`): a main thread interrupted inside a sink
  finishes that write first. A wakeup file descriptor (`signal.set_wakeup_fd`) starts it even while the main
  thread is busy in C code (a long compile), where Python would run no handler until the call returned.
  The output gets at most `SIGTERM_BUDGET_S`; then the process dies regardless.
- From the moment SIGTERM is taken the run is sealed (`sealed`): the main thread runs on until the signal
  kills it, but its later events reach no sink, and the ending waits (at most `SEAL_BUDGET_S`) for an event
  being delivered to reach every sink. Every output then ends at the same event: the end record and the
  PT_XLA_DEBUG summary count the same steps, whichever is written first.
- A forked child (a DataLoader worker) gets the previous disposition back right after the fork: a worker
  that its DataLoader terminates just dies, and writes nothing into its parent's files. Over the fork itself
  SIGTERM has its default action (`_before_fork`), so a child ended before its after-fork hook ran cannot
  reach the parent's wakeup fd either.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from typing import Callable

# Seconds the end-of-run output may take after SIGTERM before the process dies without the rest of it.
SIGTERM_BUDGET_S = 10.0
# Of which the runtime's hooks (waiting for graphs still running) may take this much.
EARLY_BUDGET_S = 2.0
# Of which waiting for an event being delivered when the run was sealed may take this much (a sink's write).
SEAL_BUDGET_S = 1.0

_lock = threading.Lock()
_hooks: list[tuple[bool, Callable[[], None]]] = []
_atexit_installed = False

received: str | None = None  # "SIGTERM" once the process received it
terminated = False           # True once xladev ends the process because of it
sealed = False               # True once it does: only the ending's own threads deliver events (`may_emit`)
_ender_idents: set[int] = set()


def say(message: str) -> None:
    """One `xladev: ` line on stderr; never raises (stderr itself may be gone at exit)."""
    try:
        sys.stderr.write(f"xladev: {message}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


# ---------------------------------------------------------------- end-of-run hooks
def at_end(hook: Callable[[], None], early: bool = False) -> None:
    """Runs `hook()` once when the run ends, however it ends. Registering the same hook again does nothing.

    Args:
      hook: what to write or do last. It must not raise (a failure is told on stderr in one line).
      early: the runtime's hooks, run before the others (the sinks' hooks see their events).
    """
    global _atexit_installed
    with _lock:
        if not any(h == hook for _, h in _hooks):
            _hooks.append((early, hook))
        if not _atexit_installed:
            atexit.register(run_end_hooks)
            os.register_at_fork(after_in_child=_hooks.clear)  # a forked child never writes its parent's end
            _atexit_installed = True
    if not early:  # there is output to write at the end: write it on SIGTERM too
        install_sigterm()


def forget(hook: Callable[[], None]) -> None:
    """Drops a hook not yet run (its sink ended early, e.g. `event_log.stop()`)."""
    with _lock:
        _hooks[:] = [(e, h) for e, h in _hooks if h != hook]


def _next_hook(early_only: bool) -> Callable[[], None] | None:
    """Takes the next hook to run off the list: the first early one, else (unless `early_only`) the first."""
    with _lock:
        for i, (early, _) in enumerate(_hooks):
            if early:
                return _hooks.pop(i)[1]
        if _hooks and not early_only:
            return _hooks.pop(0)[1]
        return None


def run_end_hooks(early_only: bool = False) -> None:
    """Runs each end-of-run hook not yet run, early ones first; each runs once even if called again.

    Args:
      early_only: run only the runtime's (early) hooks.
    """
    while True:
        hook = _next_hook(early_only)
        if hook is None:
            return
        try:
            hook()
        except Exception as exc:  # the run is ending: tell, and let the other hooks write theirs
            say(f"while ending the run, {getattr(hook, '__qualname__', hook)!s} failed: {exc!r}")


def end_reason() -> tuple[str, str | None]:
    """(reason, signal) for the event log's `end` record: ("terminated", "SIGTERM") when SIGTERM ends the
    process; ("exit", "SIGTERM") when it came but a handler of the script's let the run end otherwise;
    ("exit", None) else."""
    return ("terminated" if terminated else "exit"), received


# ---------------------------------------------------------------- exit status
_status_at_exit: int | None = None


def exit_status_at_exit(status: int) -> None:
    """Makes the process exit with `status` once the exit handlers have run. Call while the process exits.

    Python fixes its exit status before its exit handlers run. So this registers an `atexit` handler, which
    runs before those already registered, that runs them itself (each once, in their order) and then ends
    the process with `status`, skipping only the interpreter's final teardown. Called during the threading
    exit callbacks (before `atexit`'s), every `atexit` handler still runs.

    Args:
      status: the exit status (the highest asked for wins).
    """
    global _status_at_exit
    first = _status_at_exit is None
    _status_at_exit = status if first else max(status, _status_at_exit)
    if first:
        atexit.register(_exit_with_status)


def _exit_with_status() -> None:
    global _status_at_exit
    status, _status_at_exit = _status_at_exit, None
    if status is None:  # the nested run below calls this again: nothing more to do
        return
    try:
        atexit._run_exitfuncs()
    finally:
        _flush_stdio()
        os._exit(status)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass


# ---------------------------------------------------------------- SIGTERM
_previous = None        # SIGTERM's disposition before xladev's handler: SIG_DFL or a Python callable
_installed_pid = None   # the process that installed it (a forked child inherits the handler)
_terminating = False
_fork_hook_installed = False
_wakeup_fds: tuple[int, int] | None = None


def install_sigterm() -> bool:
    """Installs xladev's SIGTERM handler (see the module's docstring). Idempotent.

    Returns:
      True when installed (now or before); False when left alone: not the main thread, SIGTERM ignored,
      or a handler installed from C.
    """
    global _previous, _installed_pid, _fork_hook_installed
    if threading.current_thread() is not threading.main_thread():
        return False  # signal.signal refuses there
    current = signal.getsignal(signal.SIGTERM)
    if current is _on_sigterm:
        return True
    if current is None or current == signal.SIG_IGN:
        return False
    _previous = current
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed_pid = os.getpid()
    _watch_wakeup_fd()
    if not _fork_hook_installed:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_restore_in_child)
        _fork_hook_installed = True
    return True


def _on_sigterm(signum, frame) -> None:
    global received
    if os.getpid() != _installed_pid:  # a child forked without the fork hooks: the previous disposition
        _act_as_previous(signum, frame)
        return
    received = signal.Signals(signum).name
    if callable(_previous):  # the script's own handler, installed before xladev's: it decides
        _previous(signum, frame)
        return
    _begin_termination(signum)


def is_handler(handler) -> bool:
    """Whether `handler` (what `signal.getsignal` returned) is xladev's own SIGTERM handler."""
    return handler is _on_sigterm


def terminate(signum: int = signal.SIGTERM) -> None:
    """Ends the process by `signum` as xladev's handler does when the signal comes: the end-of-run output
    first (the event log's `end` record says `terminated`), then death by the signal. For a handler that held
    a SIGTERM back (to checkpoint on preemption) and now lets it act. Returns at once; the process dies within
    `SIGTERM_BUDGET_S`."""
    global received
    received = signal.Signals(signum).name
    _begin_termination(signum)


def _act_as_previous(signum, frame) -> None:
    if callable(_previous):
        _previous(signum, frame)
    else:
        _die_by(signum)


def may_emit() -> bool:
    """Whether an event emitted on this thread reaches the sinks once the run is `sealed`: only the ending's
    own (the runtime's last executions, announced by its early hook) do."""
    return threading.get_ident() in _ender_idents


def _begin_termination(signum: int) -> None:
    """Seals the run and starts writing the end-of-run output, after which the process dies by the signal. Once."""
    global _terminating, terminated, sealed
    with _lock:
        if _terminating:
            return
        # Sealed here, on the thread that took the signal, so that the main thread's next event is its last
        # one dropped rather than one more delivered while the output is being written.
        _terminating = terminated = sealed = True
    try:
        # Not a daemon: an interpreter exiting meanwhile waits for it, and so still dies by the signal.
        threading.Thread(target=_terminate, args=(signum,), name="xladev-sigterm").start()
    except RuntimeError:  # the interpreter is too far into its exit to start a thread
        _terminate(signum)


def _terminate(signum: int) -> None:
    try:
        _wait_for_deliveries(SEAL_BUDGET_S)
        # The hooks run on a daemon thread of their own, so that one that hangs (a graph that never
        # finishes) cannot keep the process alive past the budget.
        early = threading.Thread(target=_run_hooks_as_ender, args=(True,), name="xladev-end-early", daemon=True)
        early.start()
        early.join(EARLY_BUDGET_S)
        rest = threading.Thread(target=_run_hooks_as_ender, args=(False,), name="xladev-end", daemon=True)
        rest.start()
        rest.join(max(SIGTERM_BUDGET_S - EARLY_BUDGET_S, 0.1))
    finally:
        _die_by(signum)


_delivery_code = None  # the code of `Bus._deliver` (the bus imports this module, and sets it)


def deliveries_run_in(code) -> None:
    """Names the function that delivers events (`Bus._deliver`): the ending waits for the calls of it in flight."""
    global _delivery_code
    _delivery_code = code


def _run_hooks_as_ender(early_only: bool) -> None:
    _ender_idents.add(threading.get_ident())
    run_end_hooks(early_only)


def _wait_for_deliveries(budget_s: float) -> None:
    """Waits until no other thread is delivering an event (`Bus._deliver`): an event whose delivery began before
    the seal then reached every sink, not only those before the one writing its last output."""
    code, me = _delivery_code, threading.get_ident()
    if code is None:
        return
    deadline = time.monotonic() + budget_s
    while time.monotonic() < deadline and any(
            _runs(frame, code) for ident, frame in sys._current_frames().items() if ident != me):
        time.sleep(0.001)


def _runs(frame, code) -> bool:
    """Whether a thread's stack (its innermost `frame`) is inside a call of `code`."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _die_by(signum: int) -> None:
    """Ends the process by `signum` with its default action, as if no handler had been installed."""
    _flush_stdio()
    try:
        signal.signal(signum, signal.SIG_DFL)
    except ValueError:  # not the main thread
        setsig(signum, None)
    os.kill(os.getpid(), signum)
    time.sleep(5)  # the signal is on its way; should it be blocked in this thread's mask, end anyway
    os._exit(128 + signum)


def _watch_wakeup_fd() -> None:
    """Hands SIGTERM to a thread at once, through Python's signal wakeup fd, unless another one is in use."""
    global _wakeup_fds
    if _wakeup_fds is not None:
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        old = None
    if old != -1:  # failed, or someone's (asyncio's) is in place: keep theirs; the handler alone does the job
        if old is not None:
            signal.set_wakeup_fd(old)
        os.close(read_fd)
        os.close(write_fd)
        return
    try:
        threading.Thread(target=_wakeup_loop, args=(read_fd,), name="xladev-signal-wakeup", daemon=True).start()
    except RuntimeError:  # no new thread this late in the exit: the handler alone does the job
        signal.set_wakeup_fd(-1)
        os.close(read_fd)
        os.close(write_fd)
        return
    _wakeup_fds = (read_fd, write_fd)


def _wakeup_loop(read_fd: int) -> None:
    global received
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        # One byte per signal that has a Python handler. Act only while xladev's handler is the one in place
        # and no earlier handler of the script's is to be called (that one runs on the main thread).
        if (signal.SIGTERM in data and os.getpid() == _installed_pid and not callable(_previous)
                and signal.getsignal(signal.SIGTERM) is _on_sigterm):
            received = "SIGTERM"
            _begin_termination(signal.SIGTERM)


def setsig(signum: int, handler: int | None) -> int | None:
    """Sets a signal's OS-level action from any thread (`signal.signal` works on the main thread only), through
    Python's own C function; None is SIG_DFL. Python's table of handlers is left as it is.

    Returns:
      The action it replaced (an address to hand back to this function).
    """
    import ctypes

    c_setsig = ctypes.pythonapi.PyOS_setsig
    c_setsig.argtypes, c_setsig.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
    return c_setsig(signum, handler)


_action_before_fork: int | None = None


def _before_fork() -> None:
    # From the fork until the child's after-fork hook runs, the child must not have Python's signal handler
    # for SIGTERM: it would write to the wakeup fd it shares with the parent, whose thread would take a worker
    # ended at once for the parent's own SIGTERM. So SIGTERM has its default action over the fork (in the
    # parent too, for that moment: as without xladev). The fork may come from any thread (a DataLoader under
    # DeviceLoader forks on the loader's thread), where only the C function can do this.
    global _action_before_fork
    if _wakeup_fds is not None and not callable(_previous) and os.getpid() == _installed_pid:
        _action_before_fork = setsig(signal.SIGTERM, None)


def _after_fork_in_parent() -> None:
    global _action_before_fork
    if _action_before_fork is not None:
        setsig(signal.SIGTERM, _action_before_fork)
        _action_before_fork = None


def _restore_in_child() -> None:
    # Right after a fork, in the child (where this thread is the main one now): the parent's disposition, and
    # no wakeup fd to the parent's pipe.
    global _wakeup_fds, _action_before_fork
    _action_before_fork = None
    if _wakeup_fds is not None:
        old = signal.set_wakeup_fd(-1)
        if old != _wakeup_fds[1]:  # someone else's (asyncio's): theirs stays
            signal.set_wakeup_fd(old)
        for fd in _wakeup_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        _wakeup_fds = None
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        try:
            signal.signal(signal.SIGTERM, _previous)
        except (ValueError, TypeError):
            pass
