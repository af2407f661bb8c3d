"""Process-wide recording state: op counts and tracing time since the last barrier, source locations.

Backward ops arrive on autograd's device thread, so everything here is shared across threads.
Counting is a dict increment; events are built from these totals at each barrier, not per op.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time

from torch.optim.optimizer import register_optimizer_step_post_hook

from xladev import analysis  # pure and stdlib-only: thresholds and wording
from xladev._flags import config
from xladev.errors import XladevWarning
from xladev.events import GraphGrowing, bus
from xladev.runtime.graph import stack, steps
from xladev.runtime.graph.stack import user_frame, user_location


# The IR scope of the ops a gradient checkpoint's recomputation records (checkpoint.py); the debug analysis counts them.
RECOMPUTE_SCOPE = "checkpoint_recompute"


# Templates located at most (a run with ever new constants stops locating them, rather than growing for ever).
FIRST_SEEN_LIMIT = 100_000


class GraphGrowthWarning(XladevWarning):
    """Many ops were recorded with no barrier: the pending graph keeps growing (XLADEV_GRAPH_GROWTH_WARNING)."""


class Recorder:
    """Counts recorded ops and tracing time between barriers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.tracing_ns = 0
        self.tracing_samples: list[int] = []
        # Device tensors created (every XlaTensor: op outputs, views, uploads), PyTorch/XLA's CreateXlaTensor.
        self.tensors_created = 0
        # And freed, PyTorch/XLA's DestroyXlaTensor: counted by `count_freed`, C code only (see `tensors_destroyed`).
        self._freed = itertools.count()
        self._freed_base = 0
        self.count_freed = functools.partial(next, self._freed)
        # Where each (op, template) was first recorded (`stack.op_location`'s text): a template holds the op's
        # constants, so a recompilation for a changed one (a slice bound) names the line that passed it, without
        # XLA_IR_DEBUG. Filled when a new signature is derived, never per recorded op.
        self.first_seen_at: dict[tuple[str, object], str] = {}
        self.scope_stack = threading.local()
        self.scopes_used = False  # set for good by the first push_scope
        self.ir_debug = config.ir_debug
        self.eager_debug = config.eager_debug_mode
        # Ops recorded since the last graph ran, and when to warn that the pending graph keeps growing.
        self.pending_ops = 0
        self.largest_ops = 0
        self.growth_floor = config.graph_growth_warning
        self.warn_at = analysis.pending_ops_threshold(floor=self.growth_floor, largest_step_ops=0)
        # Optimizers that stepped since the last graph ran: one stepping twice means two training steps
        # in one graph, a missing barrier whatever the graph's size. Said once per pending graph: after
        # that, the graph's growth is warned about at twice its size (`warn_at`), never once per step.
        self.stepped_optimizers: set[int] = set()
        self.optimizer_warned = False
        # A loop without a barrier is one mistake: one Python warning (GraphGrowthWarning) for the pending graph,
        # and none again at a line that warned before, however many steps it runs or lines its body has. The
        # events (event log, PT_XLA_DEBUG) still follow the growth.
        self.graph_warned = False
        self.warned_sites: set[tuple[str, int] | None] = set()
        config.on_update(self._on_flag)

    def _on_flag(self, name, value) -> None:
        if name == "ir_debug":
            self.ir_debug = value
        elif name == "eager_debug_mode":
            self.eager_debug = value
        elif name == "graph_growth_warning":
            self.growth_floor = value
            self.warn_at = max(self.pending_ops + 1, analysis.pending_ops_threshold(floor=value, largest_step_ops=self.largest_ops))

    def count(self, name: str) -> None:
        counts = self.counts
        counts[name] = counts.get(name, 0) + 1
        self.pending_ops += 1
        if self.pending_ops >= self.warn_at:
            self._graph_growing()

    def optimizer_stepped(self, optimizer) -> None:
        """An optimizer with device parameters stepped: warn when it steps again before any graph ran."""
        key = id(optimizer)
        if key in self.stepped_optimizers and not self.optimizer_warned:
            self.optimizer_warned = True
            self._graph_growing()
        self.stepped_optimizers.add(key)

    def _graph_growing(self) -> None:
        """The pending graph passed the threshold: an event now and at twice as many ops again, and a Python
        warning at the user's line the first time this graph, and that line, grows too much."""
        ops = self.pending_ops
        self.warn_at = 2 * ops
        frame = user_frame()
        site = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"
        step = steps.current()
        message = analysis.graph_growing_message(ops=ops, step=step, site=site)
        if bus.active:
            bus.emit(GraphGrowing(time.perf_counter_ns(), step, ops, site,
                                  stack.capture_frames() if bus.wants_frames else None))
        key = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None
        if not self.graph_warned and key not in self.warned_sites:
            self.graph_warned = True
            self.warned_sites.add(key)
            stack.warn_at_user(message, GraphGrowthWarning)

    def locate(self, op_name: str, template) -> None:
        """Remembers where (op, template) is first recorded; called only when a new signature is derived."""
        key = (op_name, template)
        try:
            known = key in self.first_seen_at
        except TypeError:  # a template that cannot be hashed: not located (a diagnostic never fails an op)
            return
        if not known and len(self.first_seen_at) < FIRST_SEEN_LIMIT:
            location = stack.op_location()
            if location is not None:
                self.first_seen_at[key] = location

    def add_tracing_time(self, ns: int) -> None:
        self.tracing_ns += ns
        samples = self.tracing_samples
        if len(samples) < 4096:
            samples.append(ns)

    def debug_info(self) -> tuple:
        """(location, scope) for a new node: empty unless XLA_IR_DEBUG or a profiler scope is active."""
        if not self.scopes_used and not self.ir_debug:
            return None, None  # the common case: no thread-local lookup per op
        scopes = getattr(self.scope_stack, "names", None)
        scope = "/".join(scopes) if scopes else None
        if self.ir_debug:
            return user_location(), scope
        return None, scope

    def drain(self) -> tuple[dict[str, int], int, list[int], int, int]:
        """Returns and resets the counts, total tracing ns, tracing samples, and tensors created and destroyed
        since the last call.

        Called when a graph is about to run: the pending op count starts again, and the growth threshold
        follows the largest graph recorded so far.
        """
        with self.lock:
            self.largest_ops = max(self.largest_ops, self.pending_ops)
            self.pending_ops = 0
            self.stepped_optimizers.clear()
            self.optimizer_warned = self.graph_warned = False
            self.warn_at = analysis.pending_ops_threshold(floor=self.growth_floor, largest_step_ops=self.largest_ops)
            return self._take_counts()

    def take_counts(self) -> tuple[dict[str, int], int, list[int], int, int]:
        """Like `drain`, but the pending graph stays as it is (its size still counts towards the growth
        warning): for a metrics query in the middle of a step, which must see the ops recorded so far."""
        with self.lock:
            return self._take_counts()

    @property
    def tensors_destroyed(self) -> int:
        """Device tensors freed since the counts were last taken.

        A tensor's finalizer is `count_freed`, a C-level `next()` of an `itertools.count`, not a Python `__del__`:
        a Python finalizer runs bytecode, so a signal handler can run inside it, and an exception the handler raises
        there (a script's SIGTERM handler calling `sys.exit`) is printed as "ignored" and lost, leaving the run going.
        """
        return int(repr(self._freed)[len("count("):-1]) - self._freed_base

    @tensors_destroyed.setter
    def tensors_destroyed(self, value: int) -> None:
        self._freed_base = int(repr(self._freed)[len("count("):-1]) - value

    def _take_counts(self) -> tuple[dict[str, int], int, list[int], int, int]:
        counts, self.counts = self.counts, {}
        ns, self.tracing_ns = self.tracing_ns, 0
        samples, self.tracing_samples = self.tracing_samples, []
        created, self.tensors_created = self.tensors_created, 0
        destroyed, self.tensors_destroyed = self.tensors_destroyed, 0
        return counts, ns, samples, created, destroyed

    def push_scope(self, name: str) -> None:
        self.scopes_used = True
        names = getattr(self.scope_stack, "names", None)
        if names is None:
            names = self.scope_stack.names = []
        names.append(name)

    def pop_scope(self) -> None:
        self.scope_stack.names.pop()


recorder = Recorder()


def after_optimizer_step(optimizer, args, kwargs) -> None:
    """torch.optim's step post-hook: an optimizer stepping `xla` parameters counts the step for the debug tools."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.device.type == "xla":
                recorder.optimizer_stepped(optimizer)
            return  # the first parameter tells the optimizer's device


# Every optimizer's step, however it is called (optimizer.step(), xm.optimizer_step, a scheduler's wrapper).
register_optimizer_step_post_hook(after_optimizer_step)
