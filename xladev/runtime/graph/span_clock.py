"""Per thread: the time spent in measured spans, so that an op's tracing time leaves out what ran inside it.

A `.item()` or a CPU fallback compiles and runs the pending graph in the middle of its op. The compile, the
execution, the copies and the CPU kernel are timed as themselves; the op's tracing time is what is left
(`recorder.op_finished`), so the time breakdown counts each span once.
"""

from __future__ import annotations

import threading
import time


class _SpanClock(threading.local):
    ns = 0  # nanoseconds spent so far in measured spans on this thread
    op_start: int | None = None  # when the innermost op on this thread began; None outside ops
    covered_until = 0  # the end of the last execution already left out of an op (see `waited_for`)


_clock = _SpanClock()


def spent(ns: int) -> None:
    """A measured span of `ns` ran on this thread: a compile, an execution waited for, a transfer, a CPU kernel,
    a wait for the other ranks, or a whole op."""
    _clock.ns += ns


def op_began() -> tuple[int, int, int | None]:
    """(now, the spans spent so far, the enclosing op's start), for `op_ended`."""
    now = time.perf_counter_ns()
    previous = _clock.op_start
    _clock.op_start = now
    return now, _clock.ns, previous


def op_ended(started: tuple[int, int, int | None]) -> int:
    """Ends the op `op_began` started; returns its tracing time: its own time less the spans inside it. The whole
    op then counts as a span of the op around it, if any, so that op leaves it out too."""
    start, spans_before, previous = started
    _clock.op_start = previous
    elapsed = time.perf_counter_ns() - start
    tracing = elapsed - (_clock.ns - spans_before)
    _clock.ns = spans_before + elapsed
    return tracing


def waited_for(start_ns: int, ready_ns: int) -> None:
    """This thread waited for a graph that ran from `start_ns` (its dispatch) to `ready_ns`: the part that ran
    while the current op was in progress is the graph's execution time, not the op's tracing time.

    A graph dispatched before the op (by `mark_step`, while the next step recorded) counts from the op's start;
    graphs queued behind each other are left out once, not once each.
    """
    op_start = _clock.op_start
    if op_start is None:
        return
    begin = max(start_ns, op_start, _clock.covered_until)
    if ready_ns > begin:
        _clock.ns += ready_ns - begin
        _clock.covered_until = ready_ns
