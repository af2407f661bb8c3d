"""What a real torch_xla process did since the last step, as xladev's events.

PyTorch/XLA exposes no callback per graph. What it does expose, the harvest reads at each step barrier:
- its metrics (`torch_xla.debug.metrics`): counters, and metric samples with their time, one per compile,
  execution and transfer (`CompileTime`, `ExecuteTime`, `TransferFromDeviceTime`...);
- its PT_XLA_DEBUG analysis blocks, written to a file the adapter reads on (each compile's and execution's
  graph hash, cause and Python frames; each compile's memory sizes).

The two are paired in order: the n-th compile block of a step with its n-th `CompileTime` sample, and so on.
A sample or a block without its partner is kept for the next harvest (an execution's time is recorded only
when it ends, after the barrier returned), and what is still unpaired at the end of the run is given
without the missing part, never with an invented one.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable

from xladev.events import (
    Cause, CauseKind, Event, FallbackOp, Frame, GraphCompiled, GraphExecuted, OpsRecorded, TransferFromDevice,
    TransferToDevice,
)
from xladev.attach._graphs import GraphDumps
from xladev.dumps.debug_analysis import FRAME_RE, DebugLog, GraphEvent
from xladev.schema.counters import ITEM_COUNTER
from xladev.sinks.analysis.blocks import GUESSED_VALUE_ACCESS, PT_XLA_CAUSES
from xladev.schema.memory import SIZES
from xladev.schema.metric_names import metric_names

# Sizes of the Post Compilation Analysis, by the debug-log reader's column -> the compile record's key.
_MEMORY_KEYS = {size.column: key for key, size in SIZES.items()}

# PyTorch/XLA's cause lines as xladev writes them (`PT_XLA_CAUSES`, 2.8+'s words), read in either era's words (2.5 to
# 2.7 said `mark_step` where 2.8 says `torch_xla.sync`) once that one word is made the same. Its guess at a value read
# comes first: a line xladev's parser rewrote (dynamo's input sync) still holds it. Where two kinds share a line
# (`optimizer_step`'s barrier prints as the user's), the first one is the line's.
_CAUSES = ((GUESSED_VALUE_ACCESS.lower(), CauseKind.VALUE_ACCESS),
           *((text.lower(), kind) for kind, text in PT_XLA_CAUSES.items()))


def cause_of(text: str) -> Cause:
    """xladev's cause for one of PyTorch/XLA's cause lines, 2.5's wording or 2.9's.

    Args:
      text: the line after "Compilation Cause" or "Execution Cause".

    Returns:
      The cause; an unknown line is kept as its text, as a value access (PyTorch/XLA's own catch-all).
    """
    words = text.lower().replace("mark_step", "torch_xla.sync")
    for phrase, kind in _CAUSES:
        if phrase in words:
            return Cause(kind)
    return Cause(CauseKind.VALUE_ACCESS, text)


def frames_of(lines: list[str]) -> tuple[Frame, ...]:
    """The frames of an analysis block (``fn (file:line)``, innermost first) as xladev's frames."""
    frames = []
    for line in lines:
        match = FRAME_RE.match(line)
        if match:
            frames.append(Frame(match.group(1), match.group(2), int(match.group(3))))
    return tuple(frames)


class DebugFileTail:
    """Reads the analysis blocks PyTorch/XLA appends to its PT_XLA_DEBUG_FILE, from where it stood at start.

    Only whole lines are parsed; a line still being written waits for the next read.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._offset = 0
        if path and os.path.exists(path):
            self._offset = os.path.getsize(path)  # an earlier run's blocks in an appended file are not this run's
        self._rest = b""
        self._lineno = 0
        self.blocks: deque[GraphEvent] = deque()
        self._reader = _BlockReader(self.blocks.append)

    def read(self) -> None:
        """Parses what was appended since the last read; new blocks go to `blocks`."""
        if not self.path:
            return
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except OSError:
            return
        self._offset += len(data)
        data = self._rest + data
        cut = data.rfind(b"\n") + 1
        self._rest = data[cut:]
        for line in data[:cut].decode("utf-8", "replace").splitlines():
            self._lineno += 1
            self._reader.feed(self._lineno, line)


class _BlockReader(DebugLog):
    """The report's PT_XLA_DEBUG reader, handing on each block as it closes."""

    def __init__(self, sink: Callable[[GraphEvent], None]) -> None:
        super().__init__(warn=lambda *args, **kwargs: None)  # a damaged block is skipped, the run goes on
        self._sink = sink

    def _emit(self, event: GraphEvent) -> None:
        super()._emit(event)
        self._sink(event)


class MetricsSource:
    """Counters and metric samples of torch_xla's `torch_xla.debug.metrics` module."""

    def __init__(self, met) -> None:
        self._met = met

    def counters(self) -> dict[str, int]:
        met = self._met
        return {name: int(met.counter_value(name) or 0) for name in met.counter_names()}

    def metric(self, name: str) -> tuple[int, float, list]:
        """(count, total, the latest samples as (unix seconds, value)); zeros for a metric not yet made."""
        data = self._met.metric_data(name)
        if not data:
            return 0, 0.0, []
        count, total, *rest = data
        return int(count), float(total), list(rest[0]) if rest else []


# How far apart torch_xla may stamp a read and the execution it forced, beyond that execution's own duration.
_PAIRING_SLACK_NS = 50_000_000
# Barriers a compile or execution block waits for its metric sample before it goes out without it.
MAX_WAIT_STEPS = 3
# A graph's run is timed under one of these names (SPMD mode's, for one; schema.metric_names).
_EXECUTE_TIMES = metric_names("ExecuteTime")
# The metrics whose samples become events, one sample each.
_SAMPLED = ("CompileTime", *_EXECUTE_TIMES, "TensorsGraphSize", "TransferFromDeviceTime", "InboundData",
            "TransferToDeviceTime", "OutboundData")


class Harvester:
    """Turns torch_xla's metrics and analysis blocks since the last call into xladev's events.

    Args:
      source: the metrics (`MetricsSource`).
      debug: the tail of PyTorch/XLA's debug file, or one with no path when its output cannot be read.
      graphs: PyTorch/XLA's graph dumps (XLADEV_ATTACH_GRAPHS), for each compile's IR and what changed; None: off.
    """

    def __init__(self, source: MetricsSource, debug: DebugFileTail, graphs: GraphDumps | None = None) -> None:
        self.source = source
        self.debug = debug
        self.graphs = graphs
        self._counters = source.counters()
        self._seen = {name: source.metric(name)[0] for name in _SAMPLED}
        self._seen_tracing = source.metric("LazyTracing")[:2]
        self._executed: set[str] = set()  # graphs run since their compile: a later run is a cache hit
        self._samples: dict[str, deque] = {name: deque() for name in _SAMPLED}
        self._compiles: deque[tuple[int, GraphEvent]] = deque()  # (step, block) waiting for its sample
        self._executions: deque[tuple[int, GraphEvent]] = deque()
        self._step = 0
        # Samples torch_xla no longer kept when read (more than XLA_METRICS_SAMPLES in one step): the blocks after
        # them get the wrong times, so the end of the run says how many (`Steps.finish`).
        self.lost_samples = 0

    def collect(self, step: int, at_ns: int, final: bool = False) -> list[Event]:
        """The events since the last call, in time order, all stamped with `step` except late executions.

        Args:
          step: the step that is ending.
          at_ns: when it ended (`perf_counter_ns`): the time of what torch_xla gives no time of its own.
          final: the end of the run: blocks still waiting for their sample are given without it.

        Returns:
          Ops, compile, execute, transfer and fallback events (the barrier's own StepMarked is the caller's).
        """
        self._step = step
        now_perf, now_unix = time.perf_counter_ns(), time.time()  # torch_xla stamps its samples with time.time()
        to_perf = lambda unix: now_perf - int((now_unix - unix) * 1e9)  # noqa: E731
        self.debug.read()
        if self.graphs is not None:
            self.graphs.read()
        for _ in range(len(self.debug.blocks)):
            block = self.debug.blocks.popleft()
            (self._compiles if block.kind == "compile" else self._executions).append((step, block))
        for name in _SAMPLED:
            self._take_samples(name)
        counters = self.source.counters()
        # A counter lower than before was cleared (`met.clear_counters()`, which torch_xla's dynamo bridge
        # calls): all of its value is new.
        delta = {name: value - before if value >= before else value
                 for name, value in counters.items() if value != (before := self._counters.get(name, 0))}
        self._counters = counters
        graphs = self._graphs(to_perf, at_ns, final)
        ops = self._ops(step, at_ns, delta)
        events: list[Event] = ([ops] if ops.counts or ops.tracing_count else []) + graphs
        events += self._transfers(step, to_perf, delta.get(ITEM_COUNTER, 0), graphs)
        events += [FallbackOp(at_ns, step, name, None)
                   for name, count in delta.items() if name.startswith("aten::") and name != ITEM_COUNTER
                   for _ in range(count)]
        events.sort(key=lambda event: event.time_ns)  # stable: ops first among events of the barrier's time
        return events

    def first_waiting_step(self) -> int | None:
        """The earliest step with a compile or execution still waiting for its time; None when none waits."""
        steps = [queue[0][0] for queue in (self._compiles, self._executions) if queue]
        return min(steps) if steps else None

    def _take_samples(self, name: str) -> None:
        count, _, samples = self.source.metric(name)
        new = count - self._seen[name] if count >= self._seen[name] else count  # cleared: `met.clear_metrics()`
        self._seen[name] = count
        if new <= 0:
            return
        if new > len(samples):
            self.lost_samples += new - len(samples)
        self._samples[name].extend(samples[-new:] if new <= len(samples) else samples)

    def _ops(self, step: int, now: int, delta: dict[str, int]) -> OpsRecorded:
        count, total = self.source.metric("LazyTracing")[:2]
        seen_count, seen_total = self._seen_tracing if count >= self._seen_tracing[0] else (0, 0.0)
        self._seen_tracing = (count, total)
        ops = {name: n for name, n in delta.items() if name.startswith("xla::")}
        # torch_xla keeps each trace's time only as a sample among its last ones: the count and total are
        # exact, so the event carries them as a log read back does (no per-op samples).
        return OpsRecorded(now, step, ops, int(total - seen_total), [], delta.get("CreateXlaTensor", 0),
                           delta.get("DestroyXlaTensor", 0), tracing_count=count - seen_count)

    def _graphs(self, to_perf, at_ns: int, final: bool) -> list[Event]:
        events: list[Event] = []
        compile_times = self._samples["CompileTime"]
        # A block still without its sample after MAX_WAIT_STEPS barriers never gets one (a compile that failed):
        # it goes out without, so that the steps after it are not held back for ever.
        stale = lambda queue: queue[0][0] < self._step - MAX_WAIT_STEPS  # noqa: E731
        while self._compiles and (compile_times or final or stale(self._compiles)):
            step, block = self._compiles.popleft()
            when, ns = compile_times.popleft() if compile_times else (None, 0)
            self._executed.discard(block.graph_hash)
            memory = {_MEMORY_KEYS[column]: int(size) for column, size in block.sizes.items()
                      if column in _MEMORY_KEYS}
            t, frames = to_perf(when) if when else at_ns, frames_of(block.frames)
            graph, recompiled = (self.graphs.compiled(block.graph_hash, frames, step, t, int(ns), block.name or None)
                                 if self.graphs is not None else (None, None))
            if recompiled is not None:
                events.append(recompiled)
            events.append(GraphCompiled(t, step, block.graph_hash, graph.nodes if graph is not None else 0,
                                        block.inputs or 0, block.outputs or 0, int(ns), memory,
                                        cause_of(block.cause), frames, None, graph=graph,
                                        graph_name=block.name or None))
        execute_times = next((self._samples[name] for name in _EXECUTE_TIMES if self._samples[name]),
                             self._samples[_EXECUTE_TIMES[0]])
        sizes = self._samples["TensorsGraphSize"]
        while self._executions and (execute_times or final or stale(self._executions)):
            step, block = self._executions.popleft()
            when, ns = execute_times.popleft() if execute_times else (None, 0)
            nodes = int(sizes.popleft()[1]) if sizes else 0
            cached = block.graph_hash in self._executed
            self._executed.add(block.graph_hash)
            events.append(GraphExecuted(to_perf(when) if when else at_ns, step, block.graph_hash, int(ns), cached,
                                        nodes, block.inputs or 0, block.outputs or 0, cause_of(block.cause),
                                        frames_of(block.frames), graph_name=block.name or None))
        if final:  # samples without a block: PT_XLA_DEBUG's output was not readable
            compile_times.clear()
            execute_times.clear()
        return events

    def _transfers(self, step: int, to_perf, item_reads: int, graphs: list[Event]) -> list[Event]:
        """Reads and uploads. A read that made a graph run takes that execution's frames (PyTorch/XLA's block names
        the user's line): each such execution goes to the read nearest it in time, within the execution's own
        duration (torch_xla stamps the two samples at slightly different moments, either first). A read of data
        already on the device has no execution, and no frames."""
        events: list[Event] = []
        reads, inbound = self._samples["TransferFromDeviceTime"], self._samples["InboundData"]
        while reads:
            when, ns = reads.popleft()
            nbytes = int(inbound.popleft()[1]) if inbound else 0
            kind = ".item()" if item_reads > 0 else "to host"
            item_reads -= 1
            events.append(TransferFromDevice(to_perf(when), step, nbytes, int(ns), kind, None))
        for forced in graphs:
            if not isinstance(forced, GraphExecuted) or forced.cause.kind is not CauseKind.VALUE_ACCESS:
                continue
            free = [read for read in events if read.frames is None]
            if not free:
                break
            nearest = min(free, key=lambda read: abs(read.time_ns - forced.time_ns))
            if abs(nearest.time_ns - forced.time_ns) <= forced.execute_ns + _PAIRING_SLACK_NS:
                nearest.frames = forced.frames
        inbound.clear()
        uploads, outbound = self._samples["TransferToDeviceTime"], self._samples["OutboundData"]
        while uploads:
            when, ns = uploads.popleft()
            nbytes = int(outbound.popleft()[1]) if outbound else 0
            events.append(TransferToDevice(to_perf(when), step, nbytes, int(ns)))
        outbound.clear()
        return events
