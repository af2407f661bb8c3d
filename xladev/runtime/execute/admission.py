"""Whether a graph may run now: the checks every graph passes before it compiles or runs.

Executions can be disallowed (`xladev.debug.allow_execution(False)`, a `full_graph` region, a torch.compile
trace), a compiled region can bound how many different graphs it makes, and a forked child of a started
runtime runs nothing. A refusal names the cause of the execution and the user's line that asked for it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable

from xladev._flags import config
from xladev.errors import XladevError
from xladev.events import Cause
from xladev.runtime.graph import fork_guard, stack
from xladev.runtime.graph.ir import Graph
from xladev.schema.sites import short_site, site_of

# A check every graph must pass before it compiles or runs (a compiled region's `max_different_graphs`), or None.
_admission: Callable[[Graph], None] | None = None


@contextlib.contextmanager
def admitting(check: Callable[[Graph], None] | None):
    """Runs the block with `check(graph)` called on each graph before it compiles or runs; it may raise.

    Args:
      check: the check, or None for none.
    """
    global _admission
    saved, _admission = _admission, check
    try:
        yield
    finally:
        _admission = saved


def admit(graph: Graph) -> None:
    """Runs the check `admitting` set on a graph about to compile or run (none: nothing).

    Raises:
      whatever the check raises.
    """
    if _admission is not None:
        _admission(graph)


class ExecutionNotAllowedError(XladevError, RuntimeError):
    """A graph was about to run while executions are disallowed (`xladev.debug.allow_execution(False)`).

    The message names the cause of the execution and the user's line that asked for it.
    """


# What disallows executions when `config.allow_execution` is False, for the refusal's message, per thread (as the
# override a compiled region sets is): (what disallows them, the sentence a refusal starts with).
_DISALLOWED_BY = "xladev.debug.allow_execution(False) (XLADEV_ALLOW_EXECUTION=0)"
_refusal = threading.local()


@contextlib.contextmanager
def refusing_because(reason: str, headline: str = ""):
    """Names `reason` as what disallows executions in refusals raised in this thread inside the block.

    Args:
      reason: e.g. `xladev.compile(full_graph=True) of 'step'`.
      headline: a sentence the refusal starts with.
    """
    saved = getattr(_refusal, "why", None)
    _refusal.why = (reason, headline)
    try:
        yield
    finally:
        _refusal.why = saved


def check_may_run(cause: Cause, frames) -> None:
    """Raises unless a graph may run here: not in a forked child of a started runtime, nor while executions
    are disallowed (`allow_execution(False)`, `full_graph` regions, torch.compile traces)."""
    fork_guard.check()
    if config.allow_execution:
        return
    site = short_site(site_of(frames if frames is not None else stack.capture_frames()))
    what = cause.kind.value + (f" ({cause.detail})" if cause.detail else "")
    disallowed_by, headline = getattr(_refusal, "why", None) or (_DISALLOWED_BY, "")
    raise ExecutionNotAllowedError(
        f"{headline}a graph was about to run at {site} ({what}) while executions are disallowed by "
        f"{disallowed_by}: keep the tensor on the device there, or allow executions around this code")
