"""User annotations: `Trace` (also the IR scope), `StepTrace` (a profiler step that ends with a barrier), `trace_me`."""

from __future__ import annotations

import functools
from typing import Callable

from xladev.events import Cause, CauseKind


class Trace:
    """Context manager naming a region of the timeline and of the lazy graph.

    `with xp.Trace("forward", batch=32): ...` shows as a `forward` span (with `batch` among its
    arguments) in a captured profile, and IR nodes recorded inside carry `scope=forward` (nested
    Traces join with '/'), visible in `get_tensors_text` and graph dumps.

    Args:
      name: the span's name.
      **metadata: shown as the span's arguments in the trace viewer.
    """

    def __init__(self, name: str, **metadata) -> None:
        self.name = name
        self.metadata = metadata
        self._span = None

    def __enter__(self) -> "Trace":
        import jax.profiler

        from xladev.runtime import annotate
        from xladev.runtime.recorder import recorder

        recorder.push_scope(self.name)
        try:
            # Cut the runtime's tracing span here, so it nests inside this span on the timeline.
            annotate.tracing_pause()
            self._span = self._make_span(jax.profiler)
            self._span.__enter__()
            annotate.tracing_resume(_current_step())
        except BaseException:
            recorder.pop_scope()
            raise
        return self

    def _make_span(self, profiler):
        return profiler.TraceAnnotation(self.name, **self.metadata)

    def __exit__(self, exc_type, exc, tb) -> bool:
        from xladev.runtime import annotate
        from xladev.runtime.recorder import recorder

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
            recorder.pop_scope()
        return False

    def _span_closed(self) -> None:
        pass


def _current_step() -> int:
    from xladev.runtime.executor import executor

    return executor.step


class StepTrace(Trace):
    """A training step: `with xp.StepTrace("train", step_num=i): ...`.

    Shows as `train <i>` in the timeline (a jax StepTraceAnnotation, so TensorBoard's step views group
    by it). Leaving the block normally ends the step with a barrier (`mark_step`, cause "mark_step when
    exiting a profiler StepTrace region"), inside the span, so the step's compile and execution belong
    to it. When the block raises, the error propagates and no barrier runs.

    Args:
      name: the step's name.
      step_num: the step number shown after the name; None shows the name only.
      **metadata: extra span arguments.
    """

    def __init__(self, name: str, step_num: int | None = None, **metadata) -> None:
        if step_num is not None:
            metadata["step_num"] = step_num
        super().__init__(name, **metadata)
        self.step_num = step_num

    def _make_span(self, profiler):
        return profiler.StepTraceAnnotation(self.name, **self.metadata)

    def __exit__(self, exc_type, exc, tb) -> bool:
        from xladev.runtime import annotate

        # Hooks of this barrier (a step window starting or stopping) run once this span is closed, so a
        # window holds whole `name N` spans.
        annotate.hold_hooks()
        try:
            if exc_type is None:
                from xladev.runtime.training import mark_step

                mark_step(Cause(CauseKind.STEP_TRACE))
        finally:
            super().__exit__(exc_type, exc, tb)  # calls _span_closed, which releases the hooks
        return False

    def _span_closed(self) -> None:
        from xladev.runtime import annotate

        annotate.release_hooks()


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
            with Trace(label, **metadata):
                return fn(*args, **kwargs)

        return wrapper

    return wrap
