"""What the runtime does as the run ends, before the sinks write their last records.

- It announces the graphs still running (their `Execute`), so the last step's execution is in every
  output. At a normal exit this runs in threading's exit callbacks, which come before every `atexit` handler
  (the sinks'), however late a sink was started; on SIGTERM, as the first end-of-run hook (`ending`).
- It waits for the asynchronous step closures still queued. One that raised after the last barrier and
  `wait_device_ops()` (a closure of the last step, in a script that ends without waiting) would otherwise be
  lost: its traceback is printed and the process exits with status 1, as an exception of the script would.
"""

from __future__ import annotations

import atexit
import threading
import traceback

from xladev.events import ending
from xladev.runtime.execute import closures
from xladev.runtime.execute.execution import execution, lock

_installed = False


def install() -> None:
    """Registers the runtime's end-of-run work (at runtime start). Idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    try:
        threading._register_atexit(_at_exit)
    except (AttributeError, RuntimeError):  # no such hook, or shutdown already began
        atexit.register(_at_exit)
    ending.at_end(_settle_on_sigterm, early=True)


def _at_exit() -> None:
    _settle_quietly()
    failed = closures.wait_at_exit()
    if failed is not None:
        ending.say("an asynchronous step closure (add_step_closure(..., run_async=True)) raised after the last "
                   "step, and nothing re-raised it (xladev.wait_device_ops() would have); exit status 1:")
        try:
            traceback.print_exception(failed)
        except (OSError, ValueError):  # stderr gone: the exit status still says it
            pass
        ending.exit_status_at_exit(1)


def _settle_quietly() -> None:
    # The process is ending: report a failed execution, never raise into interpreter shutdown. No lock:
    # a daemon thread may hold it for ever now, and nothing else runs graphs at this point.
    try:
        execution.in_flight.settle()
    except Exception as exc:
        ending.say(str(exc))


def _settle_on_sigterm() -> None:
    # The main thread may be running on (SIGTERM's output is written on a thread of its own): settle under
    # the lock, as every barrier does, unless a graph holds it past the budget.
    if lock.acquire(timeout=ending.EARLY_BUDGET_S):
        try:
            _settle_quietly()
        finally:
            lock.release()
