"""The profiler scopes of `Trace`/`StepTrace`/`trace_me`, and PyTorch/XLA's rule that no step barrier runs inside one.

PyTorch/XLA keeps, per thread, a stack of the IR scopes its `xp.Trace` regions open. Each scope is named
`<name>.<n>`, where `n` counts the scopes opened so far at that depth under the same parent (1 for the
first, 2 for a sibling opened after it closed; a nested scope starts again at 1); nested scopes join with
`/` (`outer.1/inner.1`). Every step marker (`xm.mark_step()`, `torch_xla.sync()`, the parallel loader's
and `optimizer_step(barrier=True)`'s) resets that context unless called with `reset_scope=False`, and
refuses when the stack is not empty: a RuntimeError "Expecting scope to be empty but it is <scope>".
A `StepTrace` closes its own scope before its exit marks the step, so only enclosing scopes count.

xladev does the same, with a longer message (the scopes, where each was opened, the barrier's line and
what to do instead) that starts with PyTorch/XLA's words, so a test matching them still matches. The
check runs as the barrier starts, before anything is synced or counted: the pending tensors stay pending
and the next barrier outside the scopes computes them (PyTorch/XLA raises after it has run the graph).

The runtime calls `check_barrier` through `xladev.runtime.graph.annotate.set_barrier_guard`, installed when
the first scope opens, so a program that never opens one pays nothing at its barriers.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Iterator

from xladev.debug._profiler_common import ProfilerError

__all__ = ["TraceScopeError", "allow_barrier_in_scope", "check_barrier", "current_scope", "pop", "push"]

EXPECTING = "Expecting scope to be empty but it is "  # PyTorch/XLA's words, which its tests match


class TraceScopeError(ProfilerError):
    """A step barrier ran inside an open `xp.Trace` scope (a RuntimeError, as PyTorch/XLA's).

    Attributes:
      scope: the open scopes as PyTorch/XLA names them (`outer.1/inner.1`).
      barrier_site: `file:line` of the user's code that asked for the barrier, or None.
    """

    def __init__(self, message: str, scope: str, barrier_site: str | None) -> None:
        super().__init__(message)
        self.scope = scope
        self.barrier_site = barrier_site


class _Entry:
    """One open scope: its PyTorch/XLA name, the sibling counter to restore, and where it was opened."""

    __slots__ = ("label", "name", "kind", "saved_next_id", "opened_at")

    def __init__(self, label: str, name: str, kind: str, saved_next_id: int, opened_at: str | None) -> None:
        self.label = label
        self.name = name
        self.kind = kind
        self.saved_next_id = saved_next_id
        self.opened_at = opened_at


class _Context(threading.local):
    """This thread's open scopes and the number the next scope at the current depth gets."""

    def __init__(self) -> None:
        self.entries: list[_Entry] = []
        self.next_id = 1
        self.unchecked = 0  # > 0 inside allow_barrier_in_scope(): PyTorch/XLA's reset_scope=False


_context = _Context()
_guard_installed = False


def push(name: str, kind: str = "xp.Trace") -> _Entry:
    """Opens a scope on this thread (`Trace.__enter__`).

    Args:
      name: the Trace's name.
      kind: how the user opened it (`xp.Trace`, `xp.StepTrace`, `xp.trace_me`), for the error message.

    Returns:
      The entry, to pass back to `pop`.
    """
    if not _guard_installed:
        _install_guard()
    ctx = _context
    number = ctx.next_id
    entry = _Entry(f"{name}.{number}", name, kind, number + 1, _user_site())
    ctx.entries.append(entry)
    ctx.next_id = 1  # a nested scope is the first at its depth
    return entry


def pop(entry: _Entry) -> None:
    """Closes `entry` (`Trace.__exit__`); the next sibling at its depth gets the following number.

    Args:
      entry: what `push` returned. An entry no longer open (already popped) is ignored.
    """
    entries = _context.entries
    if entries and entries[-1] is entry:
        entries.pop()
        _context.next_id = entry.saved_next_id
    elif entry in entries:  # closed out of order (a Trace exited by hand): drop it and what it holds
        del entries[entries.index(entry):]
        _context.next_id = entry.saved_next_id


def current_scope() -> str:
    """This thread's open scopes as PyTorch/XLA prints them (`outer.1/inner.1`); '' when none."""
    return "/".join(e.label for e in _context.entries)


@contextlib.contextmanager
def allow_barrier_in_scope() -> Iterator[None]:
    """Barriers inside this block skip the check and keep the scope numbering: PyTorch/XLA's `reset_scope=False`."""
    _context.unchecked += 1
    try:
        yield
    finally:
        _context.unchecked -= 1


def check_barrier(cause) -> None:
    """Called as a step barrier starts, on the thread that asked for it; raises when a scope is open.

    With no scope open it resets the numbering, as PyTorch/XLA's step marker does.

    Args:
      cause: the barrier's Cause (its kind names the barrier in the message).

    Raises:
      TraceScopeError: a scope is open on this thread; nothing of the barrier has happened yet.
    """
    ctx = _context
    if ctx.unchecked:
        return
    if not ctx.entries:
        ctx.next_id = 1
        return
    raise _scope_error(ctx.entries, cause)


def _install_guard() -> None:
    global _guard_installed
    from xladev.runtime.graph import annotate

    annotate.set_barrier_guard(check_barrier)
    _guard_installed = True


# ------------------------------------------------------------------------------------------- the message


def _user_frame():
    """The innermost frame outside xladev, torch and the libraries (the user's code), or None."""
    from xladev.runtime.graph.stack import user_frame

    return user_frame()


def _site(frame) -> str | None:
    """`file.py:LINE (function)` of `frame`, or None."""
    if frame is None:
        return None
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno} ({frame.f_code.co_name})"


def _user_site() -> str | None:
    return _site(_user_frame())


def _barrier_call(cause) -> tuple[str, bool]:
    """What the user called, in the words of the API they used, and whether that was the torch_xla alias.

    Args:
      cause: the barrier's Cause.

    Returns:
      (`xm.mark_step()`, `torch_xla.sync()`, `xladev.mark_step()`, the StepTrace's exit..., True when called
      through the torch_xla alias, where `reset_scope=False` exists).
    """
    from xladev.runtime.graph.stack import is_library_frame

    frame, api, via_alias = sys._getframe(1), None, False
    while frame is not None and is_library_frame(frame.f_code.co_filename):
        via_alias = via_alias or _ALIAS_PART in frame.f_code.co_filename
        api, frame = frame, frame.f_back  # ends on the outermost library frame: the function the user called
    kind = getattr(getattr(cause, "kind", None), "name", "")
    if kind in _CALLS:
        return _CALLS[kind], via_alias
    if api is None:
        return "a step barrier", via_alias
    path, name = api.f_code.co_filename, api.f_code.co_name
    if f"torch_xla{os.sep}core{os.sep}xla_model" in path:
        return f"xm.{name}()", True
    if f"{_ALIAS_PART}torch_xla{os.sep}__init__" in path:
        return ("torch_xla.compile()/step()" if name in ("__enter__", "__exit__") else f"torch_xla.{name}()"), True
    return (f"xladev.{name}()" if name in ("mark_step", "sync") else f"{name}()"), via_alias


_ALIAS_PART = f"torch_xla_alias{os.sep}"
_CALLS = {  # barriers the cause alone names
    "STEP_TRACE": "the exit of an xp.StepTrace (it marks the step)",
    "DEVICE_LOADER": "the device loader's barrier at the next batch (MpDeviceLoader / xladev.DeviceLoader)",
    "OPTIMIZER_STEP": "optimizer_step(optimizer, barrier=True)",
}
_OPENED = {"xp.Trace": "an xp.Trace opened", "xp.StepTrace": "an xp.StepTrace opened",
           "xp.trace_me": "an @xp.trace_me function called"}


def _scope_error(entries: list[_Entry], cause) -> TraceScopeError:
    """The error for a barrier asked for inside `entries`: PyTorch/XLA's line, then where and what to do."""
    scope = "/".join(e.label for e in entries)
    barrier_site = _site(_user_frame())
    call, via_alias = _barrier_call(cause)
    where = f" at {barrier_site}" if barrier_site else ""
    opened = "; ".join(f"'{e.name}', {_OPENED.get(e.kind, e.kind)}" + (f" at {e.opened_at}" if e.opened_at else "")
                       for e in entries)
    plural = "s" if len(entries) > 1 else ""
    on_purpose = (" To sync inside a region on purpose, pass reset_scope=False to xm.mark_step() / torch_xla.sync()."
                  if via_alias else "")
    message = (
        f"{EXPECTING}{scope}\n"
        f"xladev: {call}{where} asked for a step barrier inside the open profiler scope{plural} {opened}. "
        "As in PyTorch/XLA, a step barrier may not run inside an xp.Trace region.\n"
        "Close the region first: move the sync after the `with xp.Trace(...)` block (or out of the @xp.trace_me "
        f"function), or make the region an xp.StepTrace, whose exit marks the step after closing its own scope.{on_purpose}\n"
        "Nothing was synced: the pending tensors stay pending, and the next barrier outside the region computes them."
    )
    return TraceScopeError(message, scope, barrier_site)
