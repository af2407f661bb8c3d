"""Profiler annotations of the runtime: every host-side event that costs time, and the lazy tracing span.

Each is a jax TraceMe (`jax.profiler.TraceAnnotation`), so it shows in any captured profile, whether
the capture runs in-process (`xp.start_trace`) or from another process through `xp.start_server`:

    xladev.compile            graph step site nodes [recompiled reason previous graphs_at_site]
                                                       lowering and XLA compilation of one graph
    xladev.execute            graph step cause hlo_module hlo_op [jax_calls]
                                                       one run of a compiled graph (each run once: while
                                                       a capture records, jax's own PjitFunction
                                                       annotations of the call are not made); jax_calls
                                                       names the call_jax functions and Pallas kernels
                                                       it runs (`a; b`)
    xladev.sync <kind>        kind site step           a value read (`.item()`, `print`, `.cpu()`...) that
                                                       syncs what it needs and copies it to the host
    xladev.fallback <op>      op site step             an op without a lowering, run on the CPU
    xladev.to_device          bytes site step          a host→device copy
    xladev.from_device        bytes kind step          a device→host copy
    xladev.step_closures      count step               the step closures run after a barrier
    xladev.call_jax <fn>      function site step       tracing and lowering a jax function given to call_jax
                                                       (once per specialization; its runs are in its graph's)
    xladev.mark_step          step cause               the step barrier (syncs, compiles, executions, closures)
    xladev.tracing            step                     host time between two barriers: Python and torch
                                                       recording the step's ops lazily

`site` is the user's `file.py:LINE (function)`. Argument values never hold `,` or `#` (TraceMe's
separators): they show as `‚` (a low quotation mark) and `＃`. With no capture running, jax's `TraceMe.is_enabled()` is False
and each helper costs that one C call and returns a shared no-op context manager (`NULL`): the site is
only looked up while a capture records. `set_enabled(False)` turns every helper off (for measuring
that cost). The runtime calls `barrier_begin`/`barrier_end` around each step barrier; anything that must
act exactly at a step boundary (the step-window profiler) registers a hook with `add_barrier_hook`, and
what may refuse a barrier before it starts (the profiler's open `Trace` scopes) sets `set_barrier_guard`.
"""

from __future__ import annotations

import threading
from typing import Callable

from xladev.runtime.graph import stack
from xladev.schema.sites import short_site, site_of

__all__ = [
    "NULL", "add_args", "add_barrier_hook", "arg_text", "barrier_begin", "barrier_end", "call_jax_span",
    "closures_span", "compile_span", "enabled", "execute_span", "fallback_span", "from_device_span", "hold_hooks",
    "release_hooks", "remove_barrier_hook", "set_barrier_guard", "set_enabled", "sync_span", "to_device_span",
    "tracing_pause", "tracing_resume",
]


class _Null:
    """A reusable context manager that does nothing (the cost of an annotation with no capture)."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


_NULL = NULL = _Null()
_forced_off = False
_Annotation = None  # jax.profiler.TraceAnnotation, bound on first use (jax is imported lazily)
_lock = threading.Lock()
_tracing_span = None  # the open `xladev.tracing` span of the current step
_tracing_thread = 0  # the thread that opened it
_barrier_span = None  # the open `xladev.mark_step` span
_hooks: list[Callable[[int], None]] = []
_held = 0  # > 0 while a StepTrace holds the hooks back
_held_steps: list[int] = []
_guard: Callable | None = None  # called with the cause as a barrier starts; may raise to refuse it


def _is_enabled() -> bool:  # rebound to jax's TraceMe.is_enabled on first call
    global _is_enabled, _Annotation
    from jax.profiler import TraceAnnotation

    _Annotation = TraceAnnotation
    _is_enabled = TraceAnnotation.is_enabled
    return _is_enabled()


def enabled() -> bool:
    """True when a profile capture is recording annotations now (and they are not forced off)."""
    return not _forced_off and _is_enabled()


def set_enabled(on: bool) -> None:
    """Turns the runtime's annotations on (the default) or off entirely, e.g. to measure their cost."""
    global _forced_off
    _forced_off = not on


def arg_text(value) -> str:
    """An argument value TraceMe keeps whole: its encoding (`name#k=v,k=v#`) cuts at `,` and `#`."""
    return str(value).replace(",", "\u201a").replace("#", "\uff03")


def user_site(frames=None) -> str:
    """`file.py:LINE (function)` of the user's frame in `frames` (default: the caller's stack)."""
    return short_site(site_of(frames if frames is not None else stack.capture_frames()))


def compile_span(graph_hash: str, step: int, nodes: int, frames=None, name: str | None = None):
    """Context manager around lowering and compiling graph `graph_hash` during step `step`.

    Add what is known only once it compiled (the recompilation reason) with `add_args`. A named graph (see
    `execute_span`) is `xladev.compile <name>`.
    """
    if _forced_off or not _is_enabled():
        return _NULL
    title = f"xladev.compile {arg_text(name)}" if name else "xladev.compile"
    extra = {"graph_name": arg_text(name)} if name else {}
    return _Annotation(title, graph=graph_hash, step=step, nodes=nodes, site=arg_text(user_site(frames)), **extra)


def execute_span(graph_hash: str, step: int, cause, link: tuple[str, str] | None = None, name: str | None = None,
                 collectives: tuple[int, int] | None = None, jax_calls: tuple[str, ...] = ()):
    """Context manager around running graph `graph_hash` during step `step`; `NULL` when no capture records.

    Args:
      cause: why it runs (an `xladev.events.Cause`).
      link: (module, root instruction) as xprof's HLO tools name them, for the trace viewer's link to the
        graph viewer; None leaves it out.
      name: the graph's name (a compiled region's, a torch.compile graph's): the span is then
        `xladev.execute <name>`, so each compiled graph shows by name on the timeline.
      collectives: (count, bytes) of the collectives the graph runs across the processes, or None: the span
        then carries `collectives` and `collective_bytes` (what this rank's collectives move per run).
      jax_calls: the names of the jax functions and Pallas kernels the graph runs (`call_jax`); the span then
        carries `jax_calls`, so each run names them, not only the trace that made them.
    """
    if _forced_off or not _is_enabled():
        return _NULL
    why = cause.kind.value + (f" ({cause.detail})" if cause.detail else "")
    title = f"xladev.execute {arg_text(name)}" if name else "xladev.execute"
    extra = {"graph_name": arg_text(name)} if name else {}
    if link is not None:
        extra.update(hlo_module=link[0], hlo_op=link[1])
    if collectives is not None:
        extra.update(collectives=collectives[0], collective_bytes=collectives[1])
    if jax_calls:
        extra["jax_calls"] = arg_text("; ".join(jax_calls))
    return _Annotation(title, graph=graph_hash, step=step, cause=arg_text(why), **extra)


def sync_span(kind: str, step: int):
    """`xladev.sync <kind>` around a value read: the graph it forces to run, and the copy to the host."""
    if _forced_off or not _is_enabled():
        return _NULL
    kind = arg_text(kind)
    return _Annotation(f"xladev.sync {kind}", kind=kind, site=arg_text(user_site()), step=step)


def fallback_span(op: str, step: int):
    """`xladev.fallback <op>` around an op run on the CPU: its operands' copies, the kernel, the results' upload."""
    if _forced_off or not _is_enabled():
        return _NULL
    return _Annotation(f"xladev.fallback {op}", op=op, site=arg_text(user_site()), step=step)


def to_device_span(nbytes: int, step: int):
    """`xladev.to_device` around one host→device copy of `nbytes` bytes."""
    if _forced_off or not _is_enabled():
        return _NULL
    return _Annotation("xladev.to_device", bytes=nbytes, site=arg_text(user_site()), step=step)


def from_device_span(nbytes: int, kind: str, step: int):
    """`xladev.from_device` around one device→host copy of `nbytes` bytes, for the access `kind`."""
    if _forced_off or not _is_enabled():
        return _NULL
    return _Annotation("xladev.from_device", bytes=nbytes, kind=arg_text(kind), step=step)


def closures_span(count: int, step: int):
    """`xladev.step_closures` around the `count` step closures run after the barrier ending `step`."""
    if not count or _forced_off or not _is_enabled():
        return _NULL
    return _Annotation("xladev.step_closures", count=count, step=step)


def call_jax_span(name: str, step: int):
    """`xladev.call_jax <name>` around tracing and lowering a jax function for `call_jax` (a new specialization)."""
    if _forced_off or not _is_enabled():
        return _NULL
    name = arg_text(name)
    return _Annotation(f"xladev.call_jax {name}", function=name, site=arg_text(user_site()), step=step)


def add_args(span, **args) -> None:
    """Adds arguments to an open span (no-op for `NULL`), e.g. a compile's recompilation reason."""
    if span is not _NULL and args:
        span.set_metadata(**{k: arg_text(v) if isinstance(v, str) else v for k, v in args.items()})


def set_barrier_guard(guard: Callable | None) -> None:
    """Installs `guard(cause)`, called first thing in every barrier on the thread that asked for it.

    It may raise to refuse the barrier (xladev.debug.profiler does when a `Trace` scope is open, as
    PyTorch/XLA's step marker does): nothing of the barrier has happened then. None removes it.
    """
    global _guard
    _guard = guard


def barrier_begin(step: int, cause) -> None:
    """Called as a step barrier starts: runs the guard (which may raise, before anything else happens),
    ends the step's tracing span, opens the barrier's span."""
    global _tracing_span, _barrier_span
    if _guard is not None:
        _guard(cause)
    if _tracing_span is None and _barrier_span is None and (_forced_off or not _is_enabled()):
        return
    with _lock:
        spans = (_tracing_span, _barrier_span)  # a barrier span still open here is from a barrier that raised
        _tracing_span = _barrier_span = None
        for span in spans:
            if span is not None:
                span.__exit__(None, None, None)
        if not _forced_off and _is_enabled():
            kind = getattr(cause, "kind", None)
            _barrier_span = _Annotation("xladev.mark_step", step=step, cause=getattr(kind, "value", str(cause)))


def barrier_end(ended: int) -> None:
    """Called when the barrier ending step `ended` is done (closures included): closes its span, runs
    the barrier hooks, then opens the tracing span of step `ended + 1`."""
    global _barrier_span
    if _barrier_span is not None:
        with _lock:
            span, _barrier_span = _barrier_span, None
        if span is not None:
            span.__exit__(None, None, None)
    if _hooks:
        if _held:
            _held_steps.append(ended)
        else:
            for hook in tuple(_hooks):
                hook(ended)
    tracing_resume(ended + 1)


def hold_hooks() -> None:
    """Defers barrier hooks until `release_hooks()`: a `StepTrace` ends its step with a barrier inside its
    own span, and a step window must start or stop after that span is closed, not inside it."""
    global _held
    _held += 1


def release_hooks() -> None:
    """Ends a `hold_hooks()`; runs the hooks of the barriers that happened meanwhile."""
    global _held
    _held = max(0, _held - 1)
    if _held or not _held_steps:
        return
    steps = list(_held_steps)
    _held_steps.clear()
    for ended in steps:
        for hook in tuple(_hooks):
            hook(ended)


def tracing_pause() -> None:
    """Closes the open tracing span (user `Trace` regions call this before opening or closing their own
    span, so spans on the timeline nest instead of overlapping)."""
    global _tracing_span
    if _tracing_span is None or _tracing_thread != threading.get_ident():
        return
    with _lock:
        span, _tracing_span = _tracing_span, None
    if span is not None:
        span.__exit__(None, None, None)


def tracing_resume(step: int) -> None:
    """Opens a tracing span for `step` again after `tracing_pause`, when a capture is recording."""
    global _tracing_span, _tracing_thread
    if _tracing_span is not None or _forced_off or not _is_enabled():
        return
    with _lock:
        if _tracing_span is None:
            _tracing_span = _Annotation("xladev.tracing", step=step)
            _tracing_thread = threading.get_ident()


def add_barrier_hook(hook: Callable[[int], None]) -> None:
    """Calls `hook(ended_step)` at the end of every step barrier, before the next step's tracing span
    opens. A hook must not raise (the barrier has already happened)."""
    _hooks.append(hook)


def remove_barrier_hook(hook: Callable[[int], None]) -> None:
    try:
        _hooks.remove(hook)
    except ValueError:
        pass
