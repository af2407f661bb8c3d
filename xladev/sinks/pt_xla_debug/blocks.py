"""The text blocks of PyTorch/XLA's debug analysis (FORMATS.md §3), line for line."""

from __future__ import annotations

from xladev.analysis import fallback_reasons
from xladev.events import Cause, CauseKind
from xladev.schema.memory import SIZES
from xladev.schema.sites import first_user_index, shown_frames

RULE_EQ = "=" * 80
RULE_DASH = "-" * 80
DOTS = "." * 10


# PyTorch/XLA's line for every sync that is not a barrier: it cannot tell a read from a fallback.
GUESSED_VALUE_ACCESS = "most likely user code trying to access tensor value before torch_xla.sync"
XLADEV_CAUSE_PREFIX = "xladev: "

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


def xladev_cause_line(cause: Cause) -> str | None:
    """xladev's line after PyTorch/XLA's, when xladev knows more than that line says.

    Args:
      cause: the sync's cause.

    Returns:
      `xladev: <exact cause>`, or None when PyTorch/XLA's line already says it all.
    """
    if cause.kind in _SAID_IN_FULL:
        return None
    return XLADEV_CAUSE_PREFIX + exact_cause(cause)


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


def frame_lines(frames, max_frames: int) -> list[str]:
    """Frame lines, innermost first; the first user frame is marked with `>`.

    Past `max_frames` the list is cut (PyTorch/XLA's dots); a user frame beyond the cut is still printed after
    the dots, so the user's line survives a deep stack (torch.compile's wrappers, autograd's) as the one fact
    the block is for.
    """
    shown = shown_frames(frames)
    user = first_user_index(shown)
    cut = len(shown) > max_frames
    keep = shown[:max(1, max_frames - 1)] if cut and user is not None and user >= max_frames else shown[:max_frames]
    lines = [f"{'> ' if i == user else '  '}{frame.name} ({frame.file}:{frame.line})" for i, frame in enumerate(keep)]
    if cut:
        lines.append("  " + DOTS)
        if user is not None and user >= len(keep):
            frame = shown[user]
            lines.append(f"> {frame.name} ({frame.file}:{frame.line})")
    return lines


def analysis_block(prefix: str, title: str, cause: Cause, graph_hash: str, num_inputs: int, num_outputs: int,
                   frames, max_frames: int, extra: list[tuple[str, list[str]]] = (),
                   graph_name: str | None = None) -> str:
    """A Compilation or Execution Analysis block, with optional extra sections after the cause.

    Args:
      prefix: `Compilation Analysis: ` or `Execution Analysis: `, at the start of every line.
      title: `Compilation Cause` or `Execution Cause`.
      cause: why the graph compiled or ran.
      graph_hash, num_inputs, num_outputs: the Graph Info.
      frames: the Python stack, innermost first.
      max_frames: PT_XLA_DEBUG_MAX_FRAME.
      extra: (heading, lines) sections after the cause (the recompilation diff).
      graph_name: a compiled region's name: a "Graph Name" line, as PyTorch/XLA writes it, when set.

    Returns:
      The block's text.
    """
    p = prefix
    lines = ["", f"{p}{RULE_EQ}", f"{p}{title}", f"{p}  {cause_text(cause)}"]
    xladev_line = xladev_cause_line(cause)
    if xladev_line:  # after PyTorch/XLA's line: its parsers read only the line right after "... Cause"
        lines.append(f"{p}  {xladev_line}")
    for heading, body in extra:
        lines.append(f"{p}{heading}")
        lines.extend(f"{p}  {line}" for line in body)
    lines += [
        f"{p}Graph Info: ",
        *([f"{p}  Graph Name: {graph_name}"] if graph_name else []),
        f"{p}  Graph Hash: {graph_hash}",
        f"{p}  Number of Graph Inputs: {num_inputs}",
        f"{p}  Number of Graph Outputs: {num_outputs}",
        f"{p}Python Frame Triggered Execution: ",
    ]
    lines += [f"{p}{line}" for line in frame_lines(frames, max_frames)]
    lines += [f"{p}{RULE_DASH}", f"{p}{RULE_EQ}"]
    return "\n".join(lines) + "\n"


def _gb(memory: dict, key: str) -> str:
    # PyTorch/XLA prints "Unknown " before the unit where XLA's memory analysis has no such size: never a 0 it
    # did not measure.
    n = memory.get(key)
    return "Unknown  GB" if n is None else f"{n / 1024 ** 3:.6f} GB"


def post_compilation_block(memory: dict) -> str:
    """PyTorch/XLA's "Post Compilation Analysis" block of a compiled graph: its sizes in GB, in its order.

    Args:
      memory: XLA's memory analysis in bytes (`argument`, `output`, `alias`, `temp`, `generated_code`); a size
        missing from it prints as `Unknown`.

    Returns:
      The block's text.
    """
    p = "Post Compilation Analysis: "
    lines = ["", f"{p}{RULE_EQ}", *(f"{p}{size.printed}: {_gb(memory, key)}" for key, size in SIZES.items()),
             f"{p}{RULE_DASH}", f"{p}{RULE_EQ}"]
    return "\n".join(lines) + "\n"
