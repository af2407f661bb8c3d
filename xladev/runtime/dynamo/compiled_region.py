"""`xladev.compile`: a function (or block) traced into one graph of its own, named, and optionally bounded.

The semantics are PyTorch/XLA's `torch_xla.compile`: a sync before the region (so what was pending
before it does not join its graph), the region traced lazily, and a sync after it. On top of that:

- the graphs run for the region carry its name (`Graph Name` in the debug analysis, `name` in the
  event log); the first sync is named `<name>_clear_pending`, as in PyTorch/XLA;
- `full_graph=True` refuses any execution inside the region (a value read, a CPU fallback), naming
  the cause and the line, so the region is guaranteed to be one graph;
- `max_different_graphs=N` raises once the region would run an (N+1)-th different graph, saying
  what differs from the closest graph it ran before and on which line, before compiling it.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from typing import Any, Callable

from xladev._flags import config
from xladev.errors import XladevError
from xladev.events import Cause, CauseKind
from xladev.graphdiff import GraphSummary, closest, differences
from xladev.runtime.execute import admission
from xladev.runtime.graph import graph_names, stack
from xladev.runtime.compile.graph_info import RuntimeGraphInfo
from xladev.runtime.graph.ir import Graph
from xladev.runtime.api.training import mark_step
from xladev.schema.sites import short_site, site_of


class GraphLimitError(XladevError, RuntimeError):
    """A compiled region would run more different graphs than its `max_different_graphs` allows.

    The message starts with PyTorch/XLA's sentence for it, then names the new graph and what differs from
    the closest graph the region ran before.
    """


class _Session:
    """The different graphs one compiled function has run (PyTorch/XLA's dynamic-shape detector session)."""

    def __init__(self, name: str | None, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.keys: dict[Any, GraphSummary] = {}
        self.lock = threading.Lock()

    def admit(self, graph: Graph) -> None:
        """Lets `graph` run if the region ran it before or the limit leaves room; raises otherwise.

        Raises:
          GraphLimitError: a new graph beyond the limit; nothing was compiled or run.
        """
        with self.lock:
            if graph.key in self.keys:
                return
            summary = RuntimeGraphInfo(graph).summary()
            if len(self.keys) < self.limit:
                self.keys[graph.key] = summary
                return
            previous = closest(list(self.keys.values()), summary)
            changes = differences(previous, summary) or ["the graph's structure"]
            what = f"{self.name!r}" if self.name else "the compiled region"
            site = short_site(site_of(stack.capture_frames()))
            raise GraphLimitError(
                f"Maximum number of different traces allowed per function exceeded: {self.limit}\n"
                f"{what}, called at {site}, traced a new graph ({summary.hash}) after {len(self.keys)} different graph(s) "
                f"(max_different_graphs={self.limit}); against the closest one ({previous.hash}):\n"
                + "".join(f"  - {c}\n" for c in changes)
                + "The new graph was not compiled or run; its ops stay pending. Make the region trace the same "
                  "graph each call (fixed shapes, tensors instead of changing Python numbers), or raise the limit.")


# Sessions of compiled functions, by (name, id of the function) while the function lives, as PyTorch/XLA keys them.
_sessions: dict[str, _Session] = {}
_functions: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def _session_for(key: str, name: str | None, limit: int, fn: Any) -> _Session:
    session = _sessions.get(key)
    if session is None or _functions.get(key) is not fn or session.limit != limit:
        session = _sessions[key] = _Session(name, limit)
        if fn is not None:
            try:
                _functions[key] = fn
            except TypeError:  # an object without weak references: the session lives as long as the process
                pass
    return session


# PyTorch/XLA's words for an execution inside a full_graph region; its tests match them.
_UNEXPECTED = "Unexpected execution happens inside the compiled function, exiting: "


@contextlib.contextmanager
def _region(name: str | None, full_graph: bool, session: _Session | None):
    with graph_names.naming(f"{name}_clear_pending" if name else None):
        mark_step(Cause(CauseKind.COMPILE_PENDING))
    reason = f"xladev.compile(full_graph=True) of {name!r}" if name else "xladev.compile(full_graph=True)"
    with graph_names.naming(name), config.override(eager_debug_mode=False):
        # This thread only: another thread's steps run as usual. A region that raises is not synced (its ops
        # stay pending), so nothing follows the yield then.
        with _refusing(reason) if full_graph else contextlib.nullcontext():
            yield
        with admission.admitting(session.admit if session is not None else None):
            mark_step(Cause(CauseKind.COMPILE_REGION))


@contextlib.contextmanager
def _refusing(reason: str):
    """No execution in this thread inside the block; a refusal starts with PyTorch/XLA's sentence and names `reason`."""
    with config.override(allow_execution=False), admission.refusing_because(reason, _UNEXPECTED):
        yield


class _CompiledRegion(contextlib.ContextDecorator):
    """What `compile()` returns without a function: a context manager, also usable as a decorator."""

    def __init__(self, name: str | None, full_graph: bool, limit: int | None) -> None:
        self._args = (name, full_graph, _Session(name, limit) if limit is not None else None)
        self._active: list = []

    def __enter__(self) -> "_CompiledRegion":
        cm = _region(*self._args)
        cm.__enter__()
        self._active.append(cm)
        return self

    def __exit__(self, *exc) -> bool:
        return bool(self._active.pop().__exit__(*exc))


def compile(f: Callable | None = None, full_graph: bool = False, name: str | None = None,
            max_different_graphs: int | None = None):
    """Traces `f` (or the `with` block) into one graph of its own: a sync before it and one after.

    Args:
      f: the step function to wrap (forward, backward and optimizer step); None returns a context manager
        (also a decorator).
      full_graph: refuse any execution inside the region (`ExecutionNotAllowedError`, naming the cause and
        the line): a value read or a CPU fallback there would split the region's graph.
      name: the graph name shown in the debug analysis (`Graph Name`), the event log and the TUI; by default
        `f`'s name.
      max_different_graphs: raise `GraphLimitError` when the wrapped function would run more different graphs
        than this (a changing shape or Python number retraces a new graph each call), before compiling it.

    Returns:
      The wrapped function, or the context manager when `f` is None.

    Raises:
      ValueError: `max_different_graphs` is not a positive integer.
    """
    if max_different_graphs is not None and (not isinstance(max_different_graphs, int) or max_different_graphs < 1):
        raise ValueError(f"max_different_graphs must be a positive integer, got {max_different_graphs!r}")
    if f is None:
        return _CompiledRegion(name, full_graph, max_different_graphs)
    if name is None:
        name = getattr(f, "__name__", None) or str(f)
    key = f"{name}_{id(f)}"

    @functools.wraps(f)
    def compiled(*args, **kwargs):
        session = _session_for(key, name, max_different_graphs, f) if max_different_graphs is not None else None
        with _region(name, full_graph, session):
            return f(*args, **kwargs)

    return compiled
