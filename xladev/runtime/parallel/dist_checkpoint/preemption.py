"""SIGTERM as a preemption notice, and the step at which every process of the job checkpoints for it
(PyTorch/XLA's preemption sync manager: `_XLAC._activate_preemption_sync_manager`, `_sync_point_reached`).

While detection is active (`activate`, which a `CheckpointManager` with `chkpt_on_preemption` calls), a SIGTERM
does not end the process: it is held back, and `reached_sync_point(step)` (what `reached_preemption` asks) turns
true at one step, the same on every process. The manager checkpoints that step and then lets the SIGTERM act
(`finish`): the process ends as the signal would have ended it, through the handler it replaced (xladev's
writes the end of the event log first). A second SIGTERM, or `XLADEV_PREEMPTION_GRACE` seconds without that
checkpoint, ends it at once.

Which step: every process keeps the last step it checked. In a job, a process that gets SIGTERM publishes a
notice through jax's coordination service; each process's watcher thread sees it, publishes the last step its
process had checked by then, and reads the others'. The sync step is the first step any process checks after
the largest of those: a process checking a later step before the others' answers are in waits for them
(milliseconds; the watchers answer whatever the training threads are doing). A lone process needs no notice:
the sync step is the first step it checks after the signal.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading

from xladev._flags import config
from xladev.errors import XladevError
from xladev.events import ending
from xladev.runtime.graph import backend, world

_NOTICE = "xladev/preemption/notice"
_STEP = "xladev/preemption/step/"
_POLL_S = 0.2
_UNSET = object()  # no step posted yet (None is a post: no step had been checked)


class PreemptionError(XladevError, RuntimeError):
    """Preemption detection cannot start here, or the processes of a job could not agree on its step."""


class _Watch:
    """The process's preemption state (one per process: SIGTERM has one handler)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # against the watcher thread; the signal handler never takes it
        self.reset()
        self.active = False
        self.previous = None
        self.pid = None  # the process that installed the handler (a forked child inherits it)
        self.action_before_fork = None

    def reset(self) -> None:
        self.heard = False            # SIGTERM came to this process
        self.heard_after = None       # a lone process: the last step checked when it came
        self.counter = None           # the last step checked
        self.posted = _UNSET          # in a job: the last step checked when the notice reached this process
        self.agreed = threading.Event()
        self.last_before = None       # in a job: the largest of the processes' posted steps
        self.failure: str | None = None
        self.sync_step = None
        self.finished = False
        self.stop = threading.Event()
        self.watcher: threading.Thread | None = None


_watch = _Watch()
_stop_at_exit = False
_fork_hook = False


def activate() -> None:
    """Starts preemption detection for this process. Idempotent.

    Raises:
      PreemptionError: not on the main thread (where signal handlers are set), or SIGTERM has a handler
        installed from C, which cannot be chained to.
    """
    global _fork_hook, _stop_at_exit
    if _watch.active:
        return
    if threading.current_thread() is not threading.main_thread():
        raise PreemptionError("preemption detection (CheckpointManager(chkpt_on_preemption=True)) sets a SIGTERM "
                              "handler, which only the main thread can do: create the manager there, or pass "
                              "chkpt_on_preemption=False")
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None:
        raise PreemptionError("SIGTERM has a handler installed from C, which preemption detection cannot chain to; "
                              "pass chkpt_on_preemption=False")
    backend.jax_devices()  # a process of a job joins it now, so the notice can reach the others
    _watch.reset()
    _watch.previous = previous
    _watch.pid = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)
    _watch.active = True
    if not _fork_hook:
        os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                            after_in_child=_forget_in_child)
        _fork_hook = True
    if _distributed():
        _watch.watcher = threading.Thread(target=_watch_job, args=(_watch.stop,), name="xladev-preemption",
                                          daemon=True)
        _watch.watcher.start()
        if not _stop_at_exit:
            atexit.register(_stop_watcher)  # after the job's own handler, so it runs first: the client is still up
            _stop_at_exit = True


def deactivate() -> None:
    """Stops preemption detection: SIGTERM's previous handler is back, and a notice held back is forgotten (as
    PyTorch/XLA's `_deactivate_preemption_sync_manager`)."""
    if not _watch.active:
        return
    _watch.active = False
    _stop_watcher()
    if signal.getsignal(signal.SIGTERM) is _on_sigterm and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _watch.previous)
    _watch.reset()


def is_active() -> bool:
    """Whether preemption detection is on."""
    return _watch.active


def reached_sync_point(step: int) -> bool:
    """Whether `step` is the step at which every process checkpoints for a preemption notice.

    Call it once per step, with the same steps on every process of a job, in increasing order (as
    `CheckpointManager.save` does). It is true at one step only (and for repeated calls with that step).

    Raises:
      PreemptionError: detection is not active, or the processes of the job could not agree on the step.
    """
    if not _watch.active:
        raise PreemptionError("preemption detection is not active: create the CheckpointManager with "
                              "chkpt_on_preemption=True")
    with _watch.lock:
        if _watch.sync_step is not None:
            return step == _watch.sync_step
        if not _distributed():
            if not _watch.heard:
                _watch.counter = step
                return False
            after = _watch.heard_after
        elif _watch.posted is _UNSET:
            _watch.counter = step  # no notice here yet: the sync step will be a later one
            return False
        else:
            after = _watch.posted
    if _distributed():
        if after is not None and step <= after:
            return False
        if not _watch.agreed.wait(config.dist_timeout):
            raise PreemptionError(f"the processes of the job did not agree on a step to checkpoint for the "
                                  f"preemption within {config.dist_timeout:g} s (XLADEV_DIST_TIMEOUT)")
        if _watch.failure:
            raise PreemptionError(_watch.failure)
        after = _watch.last_before
    with _watch.lock:
        if _watch.sync_step is None and (after is None or step > after):
            _watch.sync_step = step
        return step == _watch.sync_step


def heard() -> bool:
    """Whether this process got a SIGTERM that detection holds back."""
    return _watch.active and _watch.heard


def finish(step: int) -> None:
    """Lets a held-back SIGTERM act, now that the checkpoint of `step` is written: the process ends as the
    signal would have ended it (through the handler detection replaced). Does nothing if this process got no
    SIGTERM. Blocks while the process ends, unless a handler of the script's decides otherwise."""
    if not heard() or _watch.finished:
        return
    _watch.finished = True
    ending.say(f"the checkpoint of step {step} is written: ending the process, as SIGTERM asked")
    _end()


def _distributed() -> bool:
    return world.joined() and world.placement().world_size > 1


def _before_fork() -> None:
    # A forked child (a DataLoader worker, which its loader ends with SIGTERM) is not preempted with its
    # parent. Until its after-fork hook has put the previous handler back, a SIGTERM to it would reach this
    # module's handler, and one that arrives just before that swap would be dropped by Python: so over the
    # fork SIGTERM has its default action (in the parent too, for that moment), as ending.py does for its own.
    if _watch.active and os.getpid() == _watch.pid:
        _watch.action_before_fork = ending.setsig(signal.SIGTERM, None)


def _after_fork_in_parent() -> None:
    if _watch.action_before_fork is not None:
        ending.setsig(signal.SIGTERM, _watch.action_before_fork)
        _watch.action_before_fork = None


def _forget_in_child() -> None:
    # In the child: SIGTERM acts as it did before detection started.
    _watch.action_before_fork = None
    if _watch.active and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        try:
            signal.signal(signal.SIGTERM, _watch.previous)
        except (ValueError, TypeError):
            pass
    _watch.active = False


def _on_sigterm(signum, frame) -> None:
    # Runs on the main thread between two bytecodes, possibly inside reached_sync_point: no lock here.
    if os.getpid() != _watch.pid:  # a child forked before its after-fork hook ran: as before detection
        _forget_in_child()
        os.kill(os.getpid(), signum)
        return
    if _watch.heard:
        ending.say("a second SIGTERM: ending the process now, without the checkpoint on preemption")
        _end()
        return
    _watch.heard_after = _watch.counter
    _watch.heard = True
    ending.say(f"SIGTERM: a preemption notice. The CheckpointManager checkpoints at the next step it is given "
               f"(save or save_async), then the process ends; a second SIGTERM, or "
               f"{config.preemption_grace:g} s without that checkpoint (XLADEV_PREEMPTION_GRACE), ends it now")
    threading.Thread(target=_grace, args=(_watch.stop,), name="xladev-preemption-grace", daemon=True).start()


def _grace(stop: threading.Event) -> None:
    if stop.wait(config.preemption_grace) or _watch.finished:
        return  # detection stopped, or the checkpoint was written
    _watch.finished = True
    ending.say(f"no checkpoint on preemption within {config.preemption_grace:g} s of SIGTERM "
               "(XLADEV_PREEMPTION_GRACE): ending the process without it")
    _end()


def _end() -> None:
    previous = _watch.previous
    if callable(previous) and not ending.is_handler(previous):
        previous(signal.SIGTERM, None)  # the script's own handler, installed before: it decides
        return
    if previous == signal.SIG_IGN:
        return  # the signal would have been ignored
    ending.terminate(signal.SIGTERM)
    threading.Event().wait()  # the process is ending by the signal: nothing more runs here


def _watch_job(stop: threading.Event) -> None:
    """A job's watcher: passes this process's SIGTERM on as the notice, and on the notice (from any process)
    agrees with the others on the last step checked before it."""
    client = world.job.client()
    where = world.placement()
    announced = False
    while not stop.is_set():
        try:
            if _watch.heard and not announced:
                client.key_value_set(_NOTICE, str(where.rank), allow_overwrite=True)
                announced = True
            if client.key_value_try_get(_NOTICE) is not None:
                break
        except Exception:  # not set yet (try_get raises NOT_FOUND), or the service is going away
            pass
        stop.wait(_POLL_S)
    else:
        return
    with _watch.lock:
        _watch.posted = posted = _watch.counter
    try:
        client.key_value_set(f"{_STEP}{where.rank}", "" if posted is None else str(posted))
        steps = [client.blocking_key_value_get(f"{_STEP}{r}", int(config.dist_timeout * 1000))
                 for r in range(where.world_size)]
        checked = [int(s) for s in steps if s]
        _watch.last_before = max(checked) if checked else None
    except Exception as exc:
        _watch.failure = (f"rank {where.rank}: the processes of the job could not agree on a step to checkpoint "
                          f"for the preemption: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    _watch.agreed.set()


def _stop_watcher() -> None:
    _watch.stop.set()
    if _watch.watcher is not None and _watch.watcher is not threading.current_thread():
        _watch.watcher.join(_POLL_S * 5)
