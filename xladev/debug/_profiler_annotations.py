"""User annotations: `Trace` (also the IR scope), `StepTrace` (a profiler step that ends with a barrier), `trace_me`.

Each region is also a profiler scope (`_profiler_scopes`): as in PyTorch/XLA, a step barrier inside an open
`Trace` raises, and a `StepTrace` closes its own scope before its exit marks the step.
"""

from __future__ import annotations

import functools
from typing import Callable

from xladev.debug import _profiler_scopes
from xladev.events import Cause, CauseKind


class Trace:
    """Context manager naming a region of the timeline and of the lazy graph.

    `with xp.Trace("forward", batch=32): ...` shows as a `forward` span (with `batch` among its
    arguments) in a captured profile, and IR nodes recorded inside carry `scope=forward` (nested
    Traces join with '/'), visible in `get_tensors_text` and graph dumps. As in PyTorch/XLA, a step
    barrier (`mark_step`, `torch_xla.sync()`, a loader's or `optimizer_step(barrier=True)`'s) inside
    the region raises `TraceScopeError` ("Expecting scope to be empty but it is forward.1 ...") before
    it syncs anything.

    Args:
      name: the span's name.
      **metadata: shown as the span's arguments in the trace viewer.
    """

    _kind = "xp.Trace"  # how the error message names a region of this class

    def __init__(self, name: str, **metadata) -> None:
        self.name = name
        self.metadata = metadata
        self._span = None
        self._scope = None  # the open profiler scope (a _profiler_scopes entry); None once closed

    def __enter__(self) -> "Trace":
        import jax.profiler

        from xladev.runtime.graph import annotate
        from xladev.runtime.graph.op_ledger import recorder

        recorder.push_scope(self.name)
        self._scope = _profiler_scopes.push(self.name, self._kind)
        try:
            # Cut the runtime's tracing span here, so it nests inside this span on the timeline.
            annotate.tracing_pause()
            self._span = self._make_span(jax.profiler)
            self._span.__enter__()
            annotate.tracing_resume(_current_step())
        except BaseException:
            self._close_scope()
            raise
        return self

    def _close_scope(self) -> None:
        """Pops this region's IR scope and profiler scope, once (a StepTrace closes them before its barrier)."""
        from xladev.runtime.graph.op_ledger import recorder

        scope, self._scope = self._scope, None
        if scope is not None:
            _profiler_scopes.pop(scope)
            recorder.pop_scope()

    def _make_span(self, profiler):
        return profiler.TraceAnnotation(self.name, **self.metadata)

    def __exit__(self, exc_type, exc, tb) -> bool:
        from xladev.runtime.graph import annotate

        try:
            span, self._span = self._span, None
            if span is not None:
                annotate.tracing_pause()
                try:
                    span.__exit__(exc_type, exc, tb)
                finally:
                    self._span_closed()
                annotate.tracing_resume(_current_step())
            else:
                self._span_closed()
        finally:
            self._close_scope()
        return False

    def _span_closed(self) -> None:
        pass


def _current_step() -> int:
    from xladev.runtime.api.runtime_state import executor

    return executor.step


class StepTrace(Trace):
    """A training step: `with xp.StepTrace("train", step_num=i): ...`.

    Shows as `train <i>` in the timeline (a jax StepTraceAnnotation, so TensorBoard's step views group
    by it). Leaving the block normally ends the step with a barrier (`mark_step`, cause "mark_step when
    exiting a profiler StepTrace region"), inside the span, so the step's compile and execution belong
    to it. As in PyTorch/XLA, its own scope is closed before that barrier, so the barrier is refused only
    when the StepTrace sits inside another open `Trace`. When the block raises, the error propagates and
    no barrier runs.

    Args:
      name: the step's name.
      step_num: the step number shown after the name; None shows the name only.
      **metadata: extra span arguments.
    """

    _kind = "xp.StepTrace"

    def __init__(self, name: str, step_num: int | None = None, **metadata) -> None:
        if step_num is not None:
            metadata["step_num"] = step_num
        super().__init__(name, **metadata)
        self.step_num = step_num

    def _make_span(self, profiler):
        return profiler.StepTraceAnnotation(self.name, **self.metadata)

    def __exit__(self, exc_type, exc, tb) -> bool:
        from xladev.runtime.graph import annotate

        # Hooks of this barrier (a step window starting or stopping) run once this span is closed, so a
        # window holds whole `name N` spans.
        annotate.hold_hooks()
        try:
            self._close_scope()  # PyTorch/XLA closes the step's own scope before marking the step
            if exc_type is None:
                from xladev.runtime.api.training import mark_step

                mark_step(Cause(CauseKind.STEP_TRACE))
        finally:
            super().__exit__(exc_type, exc, tb)  # calls _span_closed, which releases the hooks
        return False

    def _span_closed(self) -> None:
        from xladev.runtime.graph import annotate

        annotate.release_hooks()


class _TraceMe(Trace):
    """The `Trace` of a `trace_me` function (named so in the scope error)."""

    _kind = "xp.trace_me"


def trace_me(name: str | None = None, **metadata) -> Callable:
    """Decorator: each call of the function runs inside `Trace(name)` (default: its qualified name).

        @xp.trace_me("loss")
        def loss_fn(logits, y): ...
    """
    if callable(name):  # used bare: @xp.trace_me
        return trace_me()(name)

    def wrap(fn: Callable) -> Callable:
        label = name or getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _TraceMe(label, **metadata):
                return fn(*args, **kwargs)

        return wrapper

    return wrap
