"""An event's cause in the words of PyTorch/XLA's debug analysis blocks, and the block of a compile or execution.

The blocks' text is `xladev.schema.debug_text`'s; here only the runtime's `Cause` becomes its lines.
"""

from __future__ import annotations

from xladev.analysis import fallback_reasons
from xladev.events import Cause, CauseKind
from xladev.schema.debug_text import analysis_block_text

# PyTorch/XLA's line for every sync that is not a barrier: it cannot tell a read from a fallback.
GUESSED_VALUE_ACCESS = "most likely user code trying to access tensor value before torch_xla.sync"

# The cause lines of PyTorch/XLA 2.8 and later (torch_xla/csrc/debug_util.cpp), which its debug-tool tests
# match: a barrier is "torch_xla.sync", named after where it was called from when that is the parallel
# loader or a StepTrace's exit, and "user torch_xla.sync" otherwise (optimizer_step(barrier=True)
# included). Every other execution is its guess at a value read. (2.7 and earlier said "mark_step".)
PT_XLA_CAUSES = {
    CauseKind.USER_MARK_STEP: "user torch_xla.sync",
    CauseKind.DEVICE_LOADER: "torch_xla.sync in parallel loader at step end",
    CauseKind.STEP_TRACE: "torch_xla.sync when exiting a profiler StepTrace region",
    CauseKind.OPTIMIZER_STEP: "user torch_xla.sync",
    CauseKind.COMPILE_PENDING: CauseKind.COMPILE_PENDING.value,
    CauseKind.COMPILE_REGION: CauseKind.COMPILE_REGION.value,
    CauseKind.DYNAMO_INPUTS: CauseKind.DYNAMO_INPUTS.value,
    CauseKind.DYNAMO_COMPILE: CauseKind.DYNAMO_COMPILE.value,
    CauseKind.DYNAMO_EXECUTE: CauseKind.DYNAMO_EXECUTE.value,
}
# Causes PyTorch/XLA's line already says in full: no xladev line after it.
_SAID_IN_FULL = frozenset((CauseKind.USER_MARK_STEP, CauseKind.DEVICE_LOADER, CauseKind.STEP_TRACE,
                           CauseKind.COMPILE_PENDING, CauseKind.COMPILE_REGION, CauseKind.DYNAMO_INPUTS,
                           CauseKind.DYNAMO_COMPILE, CauseKind.DYNAMO_EXECUTE))


def cause_text(cause: Cause) -> str:
    """The cause line as PyTorch/XLA writes it, so its parsers (the line after "... Cause") read ours.

    Args:
      cause: the sync's cause.

    Returns:
      PyTorch/XLA's line for it (PT_XLA_CAUSES), or its guess at a value read for every other execution.
    """
    return PT_XLA_CAUSES.get(cause.kind, GUESSED_VALUE_ACCESS)


def known_cause(cause: Cause) -> str | None:
    """What xladev knows more than PyTorch/XLA's line says, for the line after it.

    Args:
      cause: the sync's cause.

    Returns:
      The exact cause (`exact_cause`), or None when PyTorch/XLA's line already says it all.
    """
    if cause.kind in _SAID_IN_FULL:
        return None
    return exact_cause(cause)


def exact_cause(cause: Cause) -> str:
    """What xladev knows of the cause: the access (`.item()`, `print`...) or the fallback op and why."""
    kind = cause.kind
    if kind is CauseKind.VALUE_ACCESS:
        # A real torch_xla's (`xladev.attach`) names no access: PyTorch/XLA's own words, without a detail.
        text = "user code trying to access tensor value before torch_xla.sync"
        return f"{text}: {cause.detail}" if cause.detail else text
    if kind is CauseKind.FALLBACK:
        return f"CPU fallback op {cause.detail} needs its inputs on the host ({fallback_reasons.reason(cause.detail)})"
    if kind is CauseKind.COLLECTIVE and cause.detail:
        return f"{cause.detail}: a collective every replica runs now, waiting for the others"
    return kind.value


def analysis_block(prefix: str, title: str, cause: Cause, graph_hash: str, num_inputs: int, num_outputs: int,
                   frames, max_frames: int, extra: list[tuple[str, list[str]]] = (),
                   graph_name: str | None = None) -> str:
    """A Compilation or Execution Analysis block of a sync (`debug_text.analysis_block_text`).

    Args:
      prefix: `Compilation Analysis: ` or `Execution Analysis: `, at the start of every line.
      title: `Compilation Cause` or `Execution Cause`.
      cause: why the graph compiled or ran: PyTorch/XLA's line for it, then xladev's where it knows more.
      graph_hash, num_inputs, num_outputs: the Graph Info.
      frames: the Python stack, innermost first.
      max_frames: PT_XLA_DEBUG_MAX_FRAME.
      extra: (heading, lines) sections after the cause (the recompilation diff).
      graph_name: a compiled region's name, when it has one.

    Returns:
      The block's text.
    """
    return analysis_block_text(prefix, title, cause_text(cause), known_cause(cause), graph_hash, num_inputs,
                               num_outputs, frames, max_frames, extra, graph_name)
