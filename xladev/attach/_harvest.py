"""What a real torch_xla process did, step by step, as xladev's events.

PyTorch/XLA exposes no callback per graph. What it does expose, the harvest reads in two places:
- at each step barrier (`Harvester.at_barrier`), what only that moment can tell: the counters' change (ops
  traced, CPU fallbacks, `.item()` calls) and where the PT_XLA_DEBUG file the adapter reads ends (the analysis
  blocks appended by then, each compile's and execution's graph hash, cause and Python frames and each compile's
  memory sizes, are the step's that ends; they are parsed on the adapter's thread). The tracing time (`LazyTracing`, one sample per traced op) is read there too,
  every few barriers when steps are short, each sample going to its step by time;
- a little later (`Harvester.from_samples`, on the adapter's own thread), the metric samples, each with its time:
  one per compile, execution and transfer (`CompileTime`, `ExecuteTime`, `TransferFromDeviceTime`...).
  Reading them costs in proportion to the samples torch_xla keeps (1,024 per metric by default), not to the
  new ones, so they are read a few times a second rather than at every barrier.

Blocks and samples are paired in order: the n-th compile block with the n-th `CompileTime` sample, and so on.
A transfer goes to the step its time falls in (transfers run on the caller's thread, between barriers). A block
without its sample waits (an execution's time is recorded only when it ends, after the barrier returned), and
what is still unpaired at the end of the run is given without the missing part, never with an invented one.
"""

from __future__ import annotations

import bisect
import operator
import time
from collections import deque

from xladev.events import (
    Cause, CauseKind, Event, Fallback, Frame, Compile, Execute, Ops, TransferFromDevice,
    TransferToDevice,
)
from xladev.attach._graphs import GraphDumps
from xladev.attach._debug_tail import DebugFileTail
from xladev.schema.counters import ITEM_COUNTER, TENSORS_CREATED_COUNTER, TENSORS_DESTROYED_COUNTER
from xladev.schema.debug_text import FRAME_RE, GraphEvent
from xladev.sinks.pt_xla_debug.blocks import GUESSED_VALUE_ACCESS, PT_XLA_CAUSES
from xladev.schema import memory as memory_sizes
from xladev.schema.metric_names import metric_names

# Sizes of the Post Compilation Analysis, by the debug-log reader's column -> the compile record's key.

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


# Sets of counter names remembered with the ones read of them: a run makes new counters only as it meets new ops.
_MAX_COUNTER_SETS = 64
# The counters of torch_xla's tensors made and freed, which the ops events carry.
_TENSOR_COUNTERS = (TENSORS_CREATED_COUNTER, TENSORS_DESTROYED_COUNTER)


def step_counter(name: str) -> bool:
    """Whether a step's events use this counter: ops traced (`xla::`), ops run on the CPU and `.item()` calls
    (`aten::`), and tensors made and freed; not torch_xla's compile and handle counters, which the analysis blocks
    and metric samples tell with their times."""
    return name.startswith(("xla::", "aten::")) or name in _TENSOR_COUNTERS


class MetricsSource:
    """Counters and metric samples of torch_xla's `torch_xla.debug.metrics` module.

    Args:
      met: `torch_xla.debug.metrics`.
      xlac: `torch_xla._XLAC`, whose counter functions `met` wraps; None: `met`'s.
    """

    def __init__(self, met, xlac=None) -> None:
        self._met = met
        # `met`'s counter functions are one-line wrappers of these: called directly, a barrier saves a Python
        # call per counter.
        self._counter_names = getattr(xlac, "_xla_counter_names", met.counter_names)
        self._counter_value = getattr(xlac, "_xla_counter_value", met.counter_value)
        self._read: dict[tuple[str, ...], list[str]] = {}  # the counters that exist -> those a step's events use

    def counters(self) -> dict[str, int]:
        """The counters a step's events use (`step_counter`), by name: each read is a call into torch_xla, and a
        barrier makes one per counter."""
        names = tuple(self._counter_names())
        read = self._read.get(names)
        if read is None:
            if len(self._read) >= _MAX_COUNTER_SETS:
                self._read.clear()
            read = self._read[names] = [name for name in names if step_counter(name)]
        value = self._counter_value
        return {name: int(value(name) or 0) for name in read}

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
# The tracing time is read at a barrier this long after the last read, or when one more step like the one ending
# could fill what torch_xla keeps: a read copies every sample kept (XLA_METRICS_SAMPLES, 1,024 by default, one per
# traced op), so short steps share one, and no sample is dropped before it is read.
_TRACING_READ_S = 0.02
# How many times the ending step's ops the next step may trace before a sample it traced is dropped unread.
_NEXT_STEP_MARGIN = 2
# Frames of the blocks seen, by their printed lines: a steady step prints the same ones every time.
_MAX_FRAME_LISTS = 256


_when = operator.itemgetter(0)


def samples_by_barrier(samples: list, ends: list[float]) -> list[list]:
    """Each step's share of time-stamped samples: a sample goes to the first barrier at or after its time, and
    those after the last barrier to the last one.

    In time order, each step's samples are one slice, so the work is a bisect per barrier, not Python work per
    sample (a read of torch_xla's holds about a thousand).

    Args:
      samples: (unix seconds, value) pairs, sorted.
      ends: the barriers' times (unix seconds), ascending; at least one.

    Returns:
      [sum of the values, number of samples] per barrier, in the order of `ends`.
    """
    times = [when for when, _ in samples]
    values = [float(value) for _, value in samples]
    spent, lo = [], 0
    for end in ends[:-1]:
        hi = bisect.bisect_right(times, end, lo)
        spent.append([sum(values[lo:hi]), hi - lo])
        lo = hi
    spent.append([sum(values[lo:]), len(values) - lo])
    return spent


class Harvester:
    """Turns torch_xla's metrics and analysis blocks into xladev's events. Not thread-safe: the caller
    serializes its calls.

    Args:
      source: the metrics (`MetricsSource`).
      debug: the tail of PyTorch/XLA's debug file, or one with no path when its output cannot be read.
      graphs: PyTorch/XLA's graph dumps (XLADEV_ATTACH_GRAPHS), for each compile's IR and what changed; None: off.
      samples_kept: how many samples torch_xla keeps per metric (its XLA_METRICS_SAMPLES).
    """

    def __init__(self, source: MetricsSource, debug: DebugFileTail, graphs: GraphDumps | None = None,
                 samples_kept: int = 1024) -> None:
        self.source = source
        self.debug = debug
        self.graphs = graphs
        self._counters = source.counters()
        self._seen = {name: source.metric(name)[0] for name in _SAMPLED}
        self._seen_tracing = source.metric("LazyTracing")[:2]
        # Steps whose tracing time is not read yet: (step, barrier's ns, barrier's unix time, op counts, tensors
        # created, destroyed). Read every few barriers (`_TRACING_READ_S`), each sample placed in its step by time.
        self._untimed: list[tuple[int, int, float, dict, int, int]] = []
        self._ops_since_read = 0
        self._samples_kept = samples_kept
        self._tracing_read_at = time.monotonic()
        self._tracing_every_barrier = False  # samples were lost between two reads once: read at every barrier
        self._executed: set[str] = set()  # graphs run since their compile: a later run is a cache hit
        self._samples: dict[str, deque] = {name: deque() for name in _SAMPLED}
        self._debug_ends: list[tuple[int, int | None]] = []  # (step, the debug file's size at its barrier)
        self._compiles: deque[tuple[int, GraphEvent]] = deque()  # (step, block) waiting for its sample
        self._executions: deque[tuple[int, GraphEvent]] = deque()
        self._step = 0
        # The barriers whose transfers are not all placed: when each ended (unix seconds, torch_xla's clock for
        # its samples), its step, and the `.item()` calls the counters saw in it.
        self._barrier_ends: list[float] = []
        self._barrier_steps: list[tuple[int, int]] = []
        self._frames: dict[tuple[str, ...], tuple[Frame, ...]] = {}
        # Samples torch_xla no longer kept when read (more than XLA_METRICS_SAMPLES between two reads): the blocks
        # after them get the wrong times, so the end of the run says how many (`Steps.finish`).
        self.lost_samples = 0

    def at_barrier(self, step: int, at_ns: int, final: bool = False) -> list[Event]:
        """What the barrier ending `step` can tell and no later read could: the counters' change since the last
        barrier and where the debug file ends (the blocks printed since are the step's, parsed by `from_samples`);
        the tracing time of the steps since the last read of it, when one is due (`_TRACING_READ_S`).

        Args:
          step: the step that is ending.
          at_ns: when it ended (`perf_counter_ns`): the time of what torch_xla gives no time of its own.
          final: the end of the run, not a barrier: its transfers are placed in `step` whatever their time.

        Returns:
          The step's CPU fallback events, and the ops events of the steps whose tracing time was read.
        """
        self._step = step
        # The analysis blocks printed so far are this step's: the barrier notes where the file ends, and the
        # adapter's thread parses up to there (`_read_debug`).
        self._debug_ends.append((step, None if final else self.debug.size()))
        if self.graphs is not None:
            self.graphs.read()
        counters = self.source.counters()
        # A counter lower than before was cleared (`met.clear_counters()`, which torch_xla's dynamo bridge
        # calls): all of its value is new.
        delta = {name: value - before if value >= before else value
                 for name, value in counters.items() if value != (before := self._counters.get(name, 0))}
        self._counters = counters
        unix = time.time()
        self._barrier_ends.append(float("inf") if final else unix)
        self._barrier_steps.append((step, delta.get(ITEM_COUNTER, 0)))
        ops = {name: n for name, n in delta.items() if name.startswith("xla::")}
        created, destroyed = (delta.get(name, 0) for name in _TENSOR_COUNTERS)
        self._untimed.append((step, at_ns, unix, ops, created, destroyed))
        step_ops = sum(ops.values())
        self._ops_since_read += step_ops
        events: list[Event] = [Fallback(at_ns, step, name, None)
                               for name, count in delta.items() if name.startswith("aten::") and name != ITEM_COUNTER
                               for _ in range(count)]
        if (final or self._tracing_every_barrier
                or self._ops_since_read + _NEXT_STEP_MARGIN * step_ops > self._samples_kept
                or time.monotonic() - self._tracing_read_at >= _TRACING_READ_S):
            events += self._timed_ops()
        return events

    def from_samples(self, at_ns: int, final: bool = False) -> list[Event]:
        """The analysis blocks the barriers noted, parsed; the compiles and executions whose samples arrived; the
        transfers of the steps ended so far, and their tracing time when it was not read for a while.

        Args:
          at_ns: now (`perf_counter_ns`): the time of a block given without its sample.
          final: the end of the run (after `at_barrier(..., final=True)`): blocks still waiting for their sample
            are given without it.

        Returns:
          Compile, execute, transfer and ops events, each stamped with its step.
        """
        self._read_debug()
        now_perf, now_unix = time.perf_counter_ns(), time.time()  # torch_xla stamps its samples with time.time()
        to_perf = lambda unix: now_perf - int((now_unix - unix) * 1e9)  # noqa: E731
        for name in _SAMPLED:
            self._take_samples(name)
        graphs = self._graphs(to_perf, at_ns, final)
        events = graphs + self._transfers(to_perf, graphs)
        if self._untimed and time.monotonic() - self._tracing_read_at >= _TRACING_READ_S:
            events += self._timed_ops()  # the job stopped stepping: its last steps need not wait for a barrier
        return events

    def _read_debug(self) -> None:
        """Parses the analysis blocks each barrier noted, each going to the step that barrier ended."""
        ends, self._debug_ends = self._debug_ends, []
        for step, upto in ends:
            self.debug.read(upto)
            for _ in range(len(self.debug.blocks)):
                block = self.debug.blocks.popleft()
                (self._compiles if block.kind == "compile" else self._executions).append((step, block))

    def first_waiting_step(self) -> int | None:
        """The earliest step with a compile, an execution or its tracing still waiting for its time; None when none
        waits."""
        steps = [queue[0][0] for queue in (self._compiles, self._executions, self._untimed) if queue]
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

    def _timed_ops(self) -> list[Event]:
        """The ops events of the steps since the last read, each with its tracing time: torch_xla keeps one
        `LazyTracing` sample per traced op, stamped when it ends, so each new sample goes to the step whose barrier
        came next. The count and total are exact; where more samples came than torch_xla keeps, the ones it no
        longer has (the oldest) go to the first of those steps, and from then on the time is read at every
        barrier."""
        count, total, samples = self.source.metric("LazyTracing")
        self._tracing_read_at = time.monotonic()
        self._ops_since_read = 0
        seen_count, seen_total = self._seen_tracing if count >= self._seen_tracing[0] else (0, 0.0)
        untimed, self._untimed = self._untimed, []
        new = count - seen_count
        kept = samples[-new:] if 0 < new <= len(samples) else samples if new > 0 else []
        kept.sort()
        ends = [unix for _, _, unix, *_ in untimed]
        # Traces after the last barrier are the running step's: left for the next read (the newest, so kept).
        later = len(kept) - bisect.bisect_right(kept, ends[-1], key=_when)
        if later:
            count, total, new = count - later, total - sum(ns for _, ns in kept[-later:]), new - later
            kept = kept[:-later]
        self._seen_tracing = (count, total)
        spent = samples_by_barrier(kept, ends)
        if new > len(kept):
            self._tracing_every_barrier = True
            spent[0][0] += (total - seen_total) - sum(ns for _, ns in kept)
            spent[0][1] += new - len(kept)
        events: list[Event] = []
        for (step, at_ns, _, ops, created, destroyed), (ns, traces) in zip(untimed, spent):
            if ops or traces:
                # The event carries the count and total, as a log read back does (no per-op samples).
                events.append(Ops(at_ns, step, ops, int(ns), [], created, destroyed, tracing_count=traces))
        return events

    def _frames_of(self, block: GraphEvent) -> tuple[Frame, ...]:
        key = tuple(block.frames)
        frames = self._frames.get(key)
        if frames is None:
            frames = frames_of(block.frames)
            if len(self._frames) < _MAX_FRAME_LISTS:
                self._frames[key] = frames
        return frames

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
            memory = {key: int(size) for key, size in memory_sizes.from_columns(block.sizes).items()}
            t, frames = to_perf(when) if when else at_ns, self._frames_of(block)
            graph, recompiled = (self.graphs.compiled(block.graph_hash, frames, step, t, int(ns), block.name or None)
                                 if self.graphs is not None else (None, None))
            if recompiled is not None:
                events.append(recompiled)
            events.append(Compile(t, step, block.graph_hash, graph.nodes if graph is not None else 0,
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
            events.append(Execute(to_perf(when) if when else at_ns, step, block.graph_hash, int(ns), cached,
                                        nodes, block.inputs or 0, block.outputs or 0, cause_of(block.cause),
                                        self._frames_of(block), graph_name=block.name or None))
        if final:  # samples without a block: PT_XLA_DEBUG's output was not readable
            compile_times.clear()
            execute_times.clear()
        return events

    def _step_of(self, unix: float) -> int | None:
        """The step a transfer at `unix` belongs to: that of the first barrier that ended after it; None when no
        barrier has yet (its step is still running)."""
        index = bisect.bisect_left(self._barrier_ends, unix)
        return self._barrier_steps[index][0] if index < len(self._barrier_ends) else None

    def _transfers(self, to_perf, graphs: list[Event]) -> list[Event]:
        """Reads and uploads of the steps ended so far. A read that made a graph run takes that execution's frames
        (PyTorch/XLA's block names the user's line): each such execution goes to the read nearest it in time,
        within the execution's own duration (torch_xla stamps the two samples at slightly different moments,
        either first). A read of data already on the device has no execution, and no frames."""
        events: list[TransferFromDevice] = []
        reads, inbound = self._samples["TransferFromDeviceTime"], self._samples["InboundData"]
        items: dict[int, int] | None = None  # `.item()` calls per step not yet given to a read
        while reads and (step := self._step_of(reads[0][0])) is not None:
            when, ns = reads.popleft()
            nbytes = int(inbound.popleft()[1]) if inbound else 0
            items = dict(self._barrier_steps) if items is None else items
            left = items.get(step, 0)
            items[step] = left - 1
            events.append(TransferFromDevice(to_perf(when), step, nbytes, int(ns), ".item()" if left > 0 else "to host",
                                             None))
        for forced in graphs:
            if not isinstance(forced, Execute) or forced.cause.kind is not CauseKind.VALUE_ACCESS:
                continue
            free = [read for read in events if read.frames is None and read.step == forced.step]
            if not free:
                continue
            nearest = min(free, key=lambda read: abs(read.time_ns - forced.time_ns))
            if abs(nearest.time_ns - forced.time_ns) <= forced.execute_ns + _PAIRING_SLACK_NS:
                nearest.frames = forced.frames
        uploads, outbound = self._samples["TransferToDeviceTime"], self._samples["OutboundData"]
        moved: list[Event] = list(events)
        while uploads and (step := self._step_of(uploads[0][0])) is not None:
            when, ns = uploads.popleft()
            nbytes = int(outbound.popleft()[1]) if outbound else 0
            moved.append(TransferToDevice(to_perf(when), step, nbytes, int(ns)))
        # A size sample without its time sample (or the other way) must not shift every later pair: the sizes
        # kept are those of the transfers still waiting, the latest ones.
        for sizes, times in ((inbound, reads), (outbound, uploads)):
            while len(sizes) > len(times):
                sizes.popleft()
        self._forget_placed_barriers()
        return moved

    def _forget_placed_barriers(self) -> None:
        """Drops the barriers no waiting transfer can fall in any more (all before the oldest waiting one)."""
        waiting = [queue[0][0] for queue in (self._samples["TransferFromDeviceTime"],
                                             self._samples["TransferToDeviceTime"]) if queue]
        keep_from = bisect.bisect_left(self._barrier_ends, min(waiting)) if waiting else len(self._barrier_ends)
        if keep_from:
            del self._barrier_ends[:keep_from]
            del self._barrier_steps[:keep_from]
