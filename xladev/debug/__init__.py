"""Debugging APIs.

- `xladev.debug.metrics` (import as `met`): counters and metrics.
- `assert_no_recompiles(after_step=N)`: fail fast, with the cause, when a warmed-up loop recompiles.
- `allow_execution(False)`: fail fast, with the cause and the line, when any graph would run.
"""

from __future__ import annotations

import contextlib

from xladev._flags import config
from xladev.events import DynamoRecompile, Compile, PropagatingError, Recompile, Step, bus
from xladev.schema.record_wording import recompilation_lines
from xladev.schema.sites import short_site, site_of

__all__ = ["RecompilationError", "assert_no_recompiles"]


class RecompilationError(PropagatingError, AssertionError):
    """A graph compiled after warm-up. The message says what changed and where."""


class assert_no_recompiles(contextlib.ContextDecorator):
    """Raises at the first graph compile after `after_step` steps, naming what changed.

    Like `torch.compiler.set_stance("fail_on_recompile")`, but the error says why. It covers the lazy path's
    graphs and torch.compile (`backend="xladev"`): a TorchDynamo recompilation raises with the failed guard.

        with xladev.debug.assert_no_recompiles(after_step=2):
            for step in range(100):
                train_step(); xladev.mark_step()

    Also a decorator, and works in pytest (the error is an AssertionError).

    Args:
      after_step: steps (barriers) counted from entering the block that may compile freely.
    """

    def __init__(self, after_step: int = 1) -> None:
        self.after_step = after_step
        self.steps = 0
        self._sub = None

    def __enter__(self) -> "assert_no_recompiles":
        self.steps = 0
        self._recompiled: dict[str, Recompile] = {}
        self._sub = bus.subscribe(self._on_event, (Compile, Recompile, Step, DynamoRecompile),
                                  wants_frames=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._sub is not None:
            self._sub.close()
            self._sub = None

    def _on_event(self, event) -> None:
        if isinstance(event, Step):
            self.steps += 1
            return
        if isinstance(event, Recompile):  # published just before its graph's Compile
            self._recompiled[event.graph_hash] = event
            return
        if isinstance(event, DynamoRecompile):  # torch.compile traces a function again: a recompile too
            if self.steps >= self.after_step:
                raise RecompilationError(
                    f"torch.compile recompiled {event.function} after warm-up (step {self.steps} of this block, "
                    f"after_step={self.after_step}) at {short_site(site_of(event.frames))}:\n"
                    f"  guard failed: {event.guard}")
            return
        recompiled = self._recompiled.pop(event.graph_hash, None)
        if self.steps < self.after_step:
            return
        site = short_site(site_of(event.frames))
        if recompiled is not None:
            lines = recompilation_lines(recompiled.site, recompiled.previous_hash, recompiled.changes,
                                        recompiled.graphs_at_site, recompiled.compile_ns_at_site)
            detail = "\n".join("  " + line for line in lines)
        else:
            detail = "  a graph never seen before at this site (its first compile here)"
        raise RecompilationError(
            f"graph {event.graph_hash} compiled after warm-up (step {self.steps} of this block, "
            f"after_step={self.after_step}) at {site}:\n{detail}")


def get_tensors_text(tensors) -> str:
    """IR text (PyTorch/XLA's format) of the graph computing these pending tensors. Nothing runs."""
    from xladev.runtime.api.introspect import graph_of, text

    return text(graph_of(tensors))


def get_tensors_hlo(tensors) -> str:
    """HLO text of the graph computing these tensors. Nothing runs; the pending graph is unchanged."""
    from xladev.runtime.api.introspect import graph_of, lowered
    from xladev.runtime.lowering.graph_lowering import hlo_module_text

    from xladev._flags import config

    return hlo_module_text(lowered(graph_of(tensors)), config.hlo_debug)


def get_stablehlo(tensors=None) -> str:
    """StableHLO text of the graph for these tensors, or of everything pending when None."""
    from xladev.runtime.api.introspect import graph_of, lowered, pending_graph

    graph = pending_graph() if tensors is None else graph_of(tensors)
    return lowered(graph).as_text()


def get_graph_hash(tensors) -> str:
    """The hash the graph computing these tensors would have at a barrier."""
    from xladev.runtime.api.introspect import graph_of

    return graph_of(tensors).hash


def get_tensors_dot(tensors) -> str:
    """Graphviz (dot) text of the graph computing these tensors."""
    from xladev.runtime.api.introspect import graph_of, graph_to_dot

    return graph_to_dot(graph_of(tensors))


def get_tensor_debug_info(tensor) -> str:
    """What a device tensor holds now: storage id, device, shape, sharding, pending IR node or device buffer
    (PyTorch/XLA's `torch_xla._XLAC._get_xla_tensor_debug_info` block: `XLAData: None` while still pending).
    Nothing runs."""
    from xladev.runtime.api.introspect import tensor_debug_info

    return tensor_debug_info(tensor)


def memory_info(device=None) -> dict:
    """Device memory in bytes under PyTorch/XLA's keys: `bytes_used`, `bytes_limit`, `peak_bytes_used`.

    Args:
      device: an xla device (`xla:0` when None).

    Returns:
      The allocator's statistics on a GPU; on the CPU, the live device arrays and the host's memory (the peak is
      the largest use seen by these calls).

    Raises:
      ValueError: not an xla device of this process.
    """
    from xladev.runtime.graph.backend import device_index
    from xladev.runtime.execute.device_memory import memory_info as _memory_info

    return _memory_info(0 if device is None else device_index(device))


def memory_report(device=None):
    """What holds device memory now: each live buffer's kind and the user line that made it, biggest holders first.

    A census of the live device tensors, optimizers and autograd graphs (a walk of the Python heap: a fraction of a
    second, so call it between steps, not per op). `print(xladev.debug.memory_report())` shows the table; the
    object's `buffers`, `rows()` and `by_kind()` give the figures. Kinds: parameter, gradient, optimizer state,
    saved activation, batch, other (a loss kept in a list...), runtime (live arrays no tensor holds).

    Args:
      device: an xla device (`xla:0` when None).

    Returns:
      A `MemoryReport` (`xladev.runtime.api.memory_census`).

    Raises:
      ValueError: not an xla device of this process.
    """
    from xladev.runtime.api.memory_census import census
    from xladev.runtime.graph.backend import device_index

    return census(0 if device is None else device_index(device))


def memory_allocated(device=None) -> int:
    """Device memory in use now, in bytes (`memory_info(device)['bytes_used']`, as `torch.cuda.memory_allocated`).

    Raises:
      ValueError: not an xla device of this process.
    """
    return memory_info(device)["bytes_used"]


def max_memory_allocated(device=None) -> int:
    """The most device memory in use seen so far, in bytes (`memory_info(device)['peak_bytes_used']`).

    Raises:
      ValueError: not an xla device of this process.
    """
    return memory_info(device)["peak_bytes_used"]


def num_cached_graphs() -> int:
    """How many compiled graphs the in-memory cache holds (PyTorch/XLA's
    `xr.get_num_cached_compilation_graph()`)."""
    from xladev.runtime.compile.compilation import compile_cache

    return len(compile_cache.by_hash)


class allow_execution:
    """Allows or forbids graph executions: forbidden, any execution raises `ExecutionNotAllowedError`
    naming its cause and the user's line (PyTorch/XLA's ``torch_xla._XLAC._set_allow_execution``).

    A call sets it until changed; a ``with`` block restores the previous setting on exit:

        with xladev.debug.allow_execution(False):
            logits = model(x)          # tracing only: a hidden .item() or print(tensor) raises here
        xladev.mark_step()

    The flag is ``XLADEV_ALLOW_EXECUTION`` (``xladev.config.allow_execution``).

    Args:
      allowed: False to make every execution raise.
    """

    def __init__(self, allowed: bool) -> None:
        self._config = config
        self._previous = config.allow_execution
        config.update("allow_execution", bool(allowed))

    def __enter__(self) -> "allow_execution":
        return self

    def __exit__(self, *exc) -> bool:
        self._config.update("allow_execution", self._previous)
        return False


__all__ += ["allow_execution"]
__all__ += ["get_tensors_text", "get_tensors_hlo", "get_stablehlo", "get_graph_hash", "get_tensors_dot",
            "get_tensor_debug_info", "memory_info", "memory_report", "memory_allocated", "max_memory_allocated",
            "num_cached_graphs"]


_SUBMODULES = ("metrics", "profiler", "event_log")


def __getattr__(name: str):
    # `xladev.debug.metrics`, `.profiler` and `.event_log` without importing each one first.
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"xladev.debug.{name}")
    raise AttributeError(f"module 'xladev.debug' has no attribute {name!r}")
