"""The step counter: the number of the step being recorded, stamped on every event.

The step barrier (`barrier.mark_step`) is the only writer; compiles, executions, transfers, CPU
fallbacks and the recorder read it. It sits at the bottom of the runtime so that all of them can.
"""

from __future__ import annotations

_current = 0


def current() -> int:
    """The step being recorded (0 before the first barrier)."""
    return _current


def advance() -> int:
    """Ends the current step; returns its number. Called by the barrier, under the execution lock."""
    global _current
    ended = _current
    _current += 1
    return ended


def reset() -> None:
    """Starts counting again from step 0 (`Executor.reset`)."""
    global _current
    _current = 0
