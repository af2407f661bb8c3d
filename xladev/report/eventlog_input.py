"""`xladev report run.events.jsonl`: reads an xladev event log (`xladev.schema.records`).

The log's records are replayed into the structures the text readers fill, so every rule of the
report applies unchanged:

- counters and metrics counted through the schema's one table (`xladev.schema.counters`), the one
  the runtime's registry counts with, one snapshot per ``step`` record (the per-step series) and
  the last one in full;
- a `DebugLog` with one compile event per ``compile`` record (its cause, trigger site, sizes and,
  for a recompilation, the "Recompilation Cause" lines saying what changed), executions by site,
  cause and graph, and the CPU fallback calls by site.

This module reads files only: it never imports torch, jax or the runtime.
"""

from __future__ import annotations

import collections
import math
from typing import BinaryIO

from xladev import analysis
from xladev.analysis import wall_time
from xladev.dumps.debug_analysis import DebugLog, GraphEvent
from xladev.report.inputs import register_input_kind
from xladev.report.marks import MarkLog, graph_stat
from xladev.report.model import MetricBlock, RankTrace, ReportSnapshot, RunEnding, SourceResult
from xladev.report.names import canonical_numbers
from xladev.report.series import DEFAULT_MAX_ROWS, StepSeries
from xladev.schema import memory as memory_sizes, records as rec, units
from xladev.schema import record_wording
from xladev.schema import log_header
from xladev.schema.counters import updates
from xladev.schema.sites import short_site, split_site
from xladev.schema.units import COUNT

KIND_NAME = "event-log"
PERCENTILES = (0.01, 0.05, 0.1, 0.2, 0.5, 0.8, 0.9, 0.95, 0.99)
MAX_SAMPLES = 1024
MAX_STEP_TIMES = 100_000
MAX_PROFILES = 1000
# Bounds of what is kept to compare ranks: executions and compiles, and graph texts (count, characters each).
MAX_TRACE_RUNS = 200_000
MAX_TRACE_GRAPHS, MAX_GRAPH_TEXT = 2_000, 200_000


class _Metric:
    __slots__ = ("kind", "count", "total", "samples", "line")

    def __init__(self, kind: str, line: int):
        self.kind, self.count, self.total, self.line = kind, 0, 0.0, line
        self.samples: collections.deque = collections.deque(maxlen=MAX_SAMPLES)

    def add(self, value: float, count: int = 1) -> None:
        """`count` samples summing to `value` (each kept as their mean when more than one)."""
        self.count += count
        self.total += value
        if count == 1:
            self.samples.append(value)
        elif count > 1:
            self.samples.extend([value / count] * min(count, MAX_SAMPLES))

    def block(self, name: str) -> MetricBlock:
        ordered = sorted(self.samples)
        n = len(ordered)
        percentiles = [(f"{p * 100:g}%", ordered[min(int(math.floor(p * n)), n - 1)]) for p in PERCENTILES] if n else []
        return MetricBlock(name=name, kind=self.kind, total_samples=self.count, accumulator=self.total,
                           percentiles=percentiles, line=self.line)


# Distinct (kind, site) reads kept per log: the findings quote the few most frequent.
_MAX_HOT_SPOTS = 1000


class EventLogReplay:
    """Replays event-log records into a `SourceResult` (metrics snapshots, series and debug log)."""

    def __init__(self, source: SourceResult, max_rows: int = DEFAULT_MAX_ROWS):
        self.source = source
        source.series = StepSeries(max_rows=max_rows)
        source.debug = DebugLog(source.warn)
        source.trace = self.trace = RankTrace()
        source.marks = self.marks = MarkLog()
        self.counters: dict[str, int] = {}
        self.counter_lines: dict[str, int] = {}
        self.metrics: dict[str, _Metric] = {}
        self.header: rec.Header | None = None
        self.line = 0
        self.step: int | None = None
        self.steps = 0
        self.ended = False
        self.end_record: rec.End | None = None
        # The last graph the log names: (hash, user's line, compiling / compiled / ran / failed).
        self.last_graph: tuple[str, str, str] = ("", "", "")
        self._fallback_sites: dict[tuple[str, str], int] = {}
        # Where the time went: ns per part, overall and in the step in progress.
        self.parts: dict[str, float] = dict.fromkeys(wall_time.PARTS, 0.0)
        self._step_parts: dict[str, float] = {}
        self.step_times: list[wall_time.StepTime] = []
        self.last_t = 0
        self.end_t: int | None = None
        self.compile_ns_by_step: list[tuple[int, int]] = []  # (step, compile_ns)
        self.fallback_transfer_ns = 0.0
        self.fallback_ns_by_op: dict[str, int] = {}

    # ------------------------------------------------------------ records
    def feed(self, lineno: int, record: rec.Record) -> None:
        self.line = lineno
        for update in updates(record):  # the schema's table, as the runtime's registry counts
            if update.kind == COUNT:
                if update.name not in self.counters:
                    self.counters[update.name] = 0
                    self.counter_lines[update.name] = lineno
                self.counters[update.name] += int(update.value)
            else:
                metric = self.metrics.get(update.name)
                if metric is None:
                    metric = self.metrics[update.name] = _Metric(update.kind, lineno)
                metric.add(float(update.value), update.samples)
        t = getattr(record, "t", None)
        if isinstance(t, int) and t > self.last_t:
            self.last_t = t
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            handler(self, record)

    def _spent(self, part: str, ns: float) -> None:
        if ns > 0:
            self.parts[part] += ns
            self._step_parts[part] = self._step_parts.get(part, 0.0) + ns

    def _on_ops(self, record: rec.Ops) -> None:
        self._spent("tracing", record.tracing_ns)

    def _on_transfer(self, record: rec.Transfer) -> None:
        self._spent("from_device" if record.dir == "from_device" else "to_device", record.ns)
        if record.dir == "from_device" and (record.kind or "").startswith("aten::"):
            self.fallback_transfer_ns += record.ns  # operands of a CPU fallback op
        elif record.dir == "from_device" and record.site:  # a read of the user's: its line, for the findings
            self.marks.add(record.step, "transfer", record.site, record.kind or "read", self.line, record.ns,
                           record.count or 1)
            spots = self.source.hot_spots
            key = (record.kind or "read", record.site)
            if key in spots:
                spots[key][0] += record.count or 1
            elif len(spots) < _MAX_HOT_SPOTS:
                spots[key] = [record.count or 1, self.line]

    def _on_header(self, record: rec.Header) -> None:
        if self.header is None:
            self.header = record
            self.source.run_id = record_wording.run_identity(record.host, record.pid, record.start_unix)
            self.source.run_label = record_wording.run_label(record.host, record.pid, record.start_unix)
            self.source.api = record.api
            if record.runtime and record.runtime != "xladev":
                version = (record.versions or {}).get(record.runtime)
                self.source.runtime = f"{record.runtime} {version}" if version else record.runtime
            self.source.absent = [str(item) for item in record.absent or []]
            if self.source.rank is None and (record.world_size or 1) > 1:
                self.source.rank = record.rank
        else:
            self.source.warn(self.line, "a second header: two logs concatenated? read as one run")

    def _on_compile_start(self, record: rec.CompileStart) -> None:
        self.last_graph = (record.hash, record.site or "", "compiling")

    def _on_compile(self, record: rec.Compile) -> None:
        self.last_graph = (record.hash, record.site or "", "compiled")
        site, function = split_site(record.site)
        memory = {key: float(v) for key, v in record.memory.items()
                  if key in memory_sizes.SIZES and isinstance(v, (int, float))}
        event = GraphEvent("compile", self.line, cause=record.cause.get("text", ""), graph_hash=record.hash,
                           inputs=record.inputs, outputs=record.outputs,
                           frames=[record.site] if record.site else [], site=site, function=function,
                           sizes={memory_sizes.SIZES[k].column: v for k, v in memory.items()},
                           steps_before=self.steps, name=record.name or "", step_known=True)
        recompile = record.recompile
        if recompile:  # the lines of xladev's "Recompilation Cause" section, as the debug-log reader keeps them
            event.recompilation = record_wording.recompilation_lines(
                record.site, recompile.get("previous", "?"), recompile.get("changes"),
                recompile.get("graphs_at_site", "?"), recompile.get("compile_ns_at_site", 0), record.step)
        self._spent("compile", record.compile_ns)
        self.compile_ns_by_step.append((record.step, record.compile_ns))
        self.marks.add(record.step, "compile", record.site or "", event.cause or "?", self.line, record.compile_ns)
        stat = graph_stat(self.source.graphs, record.hash, site=record.site or "", name=record.name or "",
                          nodes=record.nodes, step=record.step, line=self.line)
        if stat is not None:
            stat.compiles += 1
            stat.compile_ns += record.compile_ns
            need = memory_sizes.need_bytes(memory)
            if need is not None:
                stat.memory_bytes = need
        if len(self.trace.compiles) < MAX_TRACE_RUNS:
            self.trace.compiles.append((record.step, record.hash, record.site or "?"))
        debug = self.source.debug
        debug.compiles += 1
        debug._last_compile = event
        if len(debug.compile_events) < 20_000:
            debug.compile_events.append(event)

    def _on_execute(self, record: rec.Execute) -> None:
        self.last_graph = (record.hash, record.site or "", "ran")
        self._spent("execute", record.execute_ns)
        stat = graph_stat(self.source.graphs, record.hash, site=record.site or "", name=record.name or "",
                          nodes=record.nodes, step=record.step, line=self.line)
        if stat is not None:
            stat.executions += 1
            stat.execute_ns += record.execute_ns
        if len(self.trace.runs) < MAX_TRACE_RUNS:
            self.trace.runs.append((record.step, record.hash, record.site or "?"))
        debug = self.source.debug
        debug.execution_count += 1
        site, _ = split_site(record.site)
        key = (site, record.cause.get("text", ""), record.hash)
        entry = debug.executions.get(key)
        if entry is not None:
            entry[0] += 1
        elif len(debug.executions) < 50_000:
            debug.executions[key] = [1, self.line, record.inputs, record.outputs]

    def _on_fallback(self, record: rec.Fallback) -> None:
        self._spent("fallback", record.cpu_ns)
        self.marks.add(record.step, "fallback", record.site or "", record.op, self.line, record.cpu_ns)
        if record.cpu_ns > 0:
            self.fallback_ns_by_op[record.op] = self.fallback_ns_by_op.get(record.op, 0) + record.cpu_ns
        self.source.debug.not_lowered_ops.add(record.op)
        key = (record.op, record.site or "")
        self._fallback_sites[key] = self._fallback_sites.get(key, 0) + 1

    def _on_graph_growing(self, record: rec.GraphGrowing) -> None:
        # The same words PT_XLA_DEBUG prints, so one reader and one rule serve both inputs.
        site = split_site(record.site)[0] or "?"
        self.source.debug.add_profiler_line(self.line, analysis.graph_growing_message(ops=record.ops, step=record.step,
                                                                                   site=site))

    def _on_memory_growing(self, record: rec.MemoryGrowing) -> None:
        # The runtime's PT_XLA_DEBUG line for it, so one reader and one rule serve both inputs (as for graph growth).
        if record.space not in analysis.MEMORY_SPACES:
            return  # a memory this reader does not know (a newer writer's): no finding rather than a wrong one
        self.source.debug.add_profiler_line(self.line, analysis.memory_growing_message(
            from_step=record.from_step, from_bytes=record.from_bytes, to_step=record.step, to_bytes=record.to_bytes,
            per_step_bytes=record.per_step_bytes, holders=record.holders, format_bytes=units.format_bytes,
            space=record.space))

    def _on_graph_break(self, record: rec.GraphBreak) -> None:
        self.marks.add(record.step, "graph-break", record.site or "", record.reason or "?", self.line)
        # PT_XLA_DEBUG's line for it, so one reader and one rule serve both inputs (as for graph growth).
        self.source.debug.add_profiler_line(self.line, analysis.graph_break_message(
            site=short_site(record.site), reason=record.reason, by=record.by))

    def _on_dynamo_recompile(self, record: rec.DynamoRecompile) -> None:
        self.source.debug.add_profiler_line(self.line, analysis.dynamo_recompile_message(
            function=record.function, site=short_site(record.site), guard=record.guard, compiles=record.compiles))

    def _on_step(self, record: rec.Step) -> None:
        if len(self.step_times) < MAX_STEP_TIMES:
            self.step_times.append(wall_time.StepTime(record.step, float(record.interval_ns), self._step_parts))
        sample = record.memory_sample()
        if sample is not None and len(self.source.device_memory) < MAX_STEP_TIMES:
            self.source.device_memory.append(sample)
        self._step_parts = {}
        self.steps += 1
        self.source.debug.step_syncs = self.steps
        self.step = record.step
        self._snapshot()

    def _on_failed(self, record: rec.CompileFailed | rec.ExecuteFailed) -> None:
        kind = "compile" if isinstance(record, rec.CompileFailed) else "execute"
        self.last_graph = (record.hash, record.site or "", "failed")
        if kind == "execute" and len(self.trace.runs) < MAX_TRACE_RUNS:
            self.trace.runs.append((record.step, record.hash, record.site or "?"))
        first, *details = record.message.split("\n")
        self.source.debug.add_failure(self.line, kind, record.hash, first, record.hlo_path,
                                      split_site(record.site)[0], tuple(details))

    def _on_profile(self, record: rec.Profile) -> None:
        if len(self.source.profiles) < MAX_PROFILES:
            self.source.profiles.append(record)

    def _on_graph(self, record: rec.GraphText) -> None:
        if len(self.trace.graph_ir) < MAX_TRACE_GRAPHS:
            self.trace.graph_ir[record.hash] = record.ir[:MAX_GRAPH_TEXT]

    def _on_collective(self, record: rec.Collective) -> None:
        waits = self.trace.wait_ns_by_step
        waits[record.step] = waits.get(record.step, 0) + record.wait_ns

    def _on_rank_lost(self, record: rec.RankLost) -> None:
        self.trace.lost.append((record.rank, record.reason, record.step))

    def _on_end(self, record: rec.End) -> None:
        self.ended = True
        self.end_record = record
        self.end_t = record.t
        if record.signal:  # the run did not end on its own: say how (SIGTERM, e.g. torchrun ending a job)
            self.source.warn(self.line, f"the log ended ({record.describe()}) after {record.steps} steps",
                             always=True)

    def ending(self) -> RunEnding | None:
        """How the run stopped, when it did not end on its own (read once the whole log is read)."""
        end = self.end_record
        if self.header is None or (end is not None and not end.signal):
            return None
        start = self.header.start_unix
        last_t = self.end_t if self.end_t is not None else self.last_t
        graph, site, doing = self.last_graph
        return RunEnding(how=end.describe() if end is not None else "no end record", killed=end is None,
                         steps=self.steps, graph=graph, site=site, doing=doing, line=self.line,
                         ended_unix=start + last_t / 1e9 if start else None)

    # ------------------------------------------------------------ snapshots
    def _numbers(self) -> tuple[dict, dict, dict]:
        samples = {name: m.count for name, m in self.metrics.items()}
        accumulators = {name: m.total for name, m in self.metrics.items()}
        return dict(self.counters), samples, accumulators

    def _snapshot(self) -> None:
        counters, samples, accumulators = self._numbers()
        row = canonical_numbers(counters, samples, accumulators)
        for name, value in counters.items():
            if "aten::" in name:
                row[name] = float(value)
        row["snapshot"] = float(self.source.snapshots)
        row["step"] = float("nan") if self.step is None else float(self.step)
        row["line"] = float(self.line)
        row["steps"] = float(self.steps)
        self.source.series.append(row)
        self.source.snapshots += 1

    def finish(self) -> None:
        """Makes the last snapshot (the counters at the end of the log) and the fallback summary."""
        if self.header is None:
            return
        if self.counters or self.metrics:
            metrics = {name: metric.block(name) for name, metric in self.metrics.items()}
            self.source.final = ReportSnapshot(metrics, dict(self.counters), dict(self.counter_lines), self.step,
                                         self.line, max(0, self.source.snapshots - 1))
            if self.source.snapshots == 0:
                self._snapshot()
        self.source.debug.fallback_sites = [
            {"count": count, "op": op, "frames": [site] if site else []}
            for (op, site), count in sorted(self._fallback_sites.items(), key=lambda kv: -kv[1])]
        self._time_breakdown()

    def _time_breakdown(self) -> None:
        wall = self.end_t if self.end_t is not None else self.last_t
        measured = ("tracing", "compile", "execute", "to_device", "from_device")
        parts = {part: ns for part, ns in self.parts.items() if part in measured or ns}
        basis = ("measured: every compile, execution, transfer and traced op of the event log"
                 + ("" if self.end_t is not None else "; the log has no end record, so the wall time runs to its "
                                                       "last record"))
        self.source.time = wall_time.TimeBreakdown(parts=parts, wall_ns=float(wall) if wall else None,
                                                   steps=self.steps, exact=True, basis=basis,
                                                   step_times=list(self.step_times))
        # Copies: a live reader (the TUI) calls finish() on a log that keeps growing.
        self.source.compile_ns_by_step = list(self.compile_ns_by_step)
        self.source.fallback_transfer_ns = self.fallback_transfer_ns
        self.source.fallback_ns_by_op = dict(self.fallback_ns_by_op)


# Every record kind has its entry (None: its counters, counted above through the schema's table, are its whole
# fold): a kind added without one fails tests/schema/test_record_kinds.py.
_HANDLERS = {
    rec.Header: EventLogReplay._on_header, rec.Compile: EventLogReplay._on_compile,
    rec.CompileStart: EventLogReplay._on_compile_start,
    rec.Execute: EventLogReplay._on_execute, rec.Fallback: EventLogReplay._on_fallback,
    rec.GraphGrowing: EventLogReplay._on_graph_growing, rec.Step: EventLogReplay._on_step,
    rec.MemoryGrowing: EventLogReplay._on_memory_growing,
    rec.End: EventLogReplay._on_end, rec.CompileFailed: EventLogReplay._on_failed,
    rec.ExecuteFailed: EventLogReplay._on_failed, rec.Ops: EventLogReplay._on_ops,
    rec.Transfer: EventLogReplay._on_transfer, rec.Profile: EventLogReplay._on_profile,
    rec.GraphBreak: EventLogReplay._on_graph_break, rec.DynamoRecompile: EventLogReplay._on_dynamo_recompile,
    rec.GraphText: EventLogReplay._on_graph,
    rec.Collective: EventLogReplay._on_collective, rec.RankLost: EventLogReplay._on_rank_lost,
    rec.CacheMiss: None,  # its counter is all there is to fold
}


class EventLogInput:
    """The `InputKind` of xladev event logs (``XLADEV_EVENT_LOG``)."""

    name = KIND_NAME

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS):
        self.max_rows = max_rows

    def sniff(self, head: bytes, path: str) -> bool:
        return log_header.sniff(head)

    def read(self, stream: BinaryIO, source: SourceResult) -> None:
        replay = EventLogReplay(source, self.max_rows)
        pending = b""
        lineno = 0
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for raw in lines:
                lineno += 1
                self._line(replay, source, lineno, raw)
        if pending.strip():
            lineno += 1
            try:
                record = rec.parse_line(pending)
            except rec.RecordError:
                source.warn(lineno, "last line is cut short (the process was killed while writing?); ignored",
                            at_end=True)
            else:
                if record is not None:
                    replay.feed(lineno, record)
        source.lines = lineno
        replay.finish()
        source.ending = replay.ending()
        if replay.header is not None and not replay.ended:
            source.warn(lineno, "the log has no end record: the process was killed or is still running", at_end=True)

    @staticmethod
    def _line(replay: EventLogReplay, source: SourceResult, lineno: int, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            record = rec.parse_line(raw)
        except rec.RecordError as exc:
            source.warn(lineno, f"{exc}; skipped")
            if "not a JSON object" in str(exc):
                source.other_lines += 1
            return
        if record is None:
            return  # a record type this reader does not know (a newer writer)
        if lineno == 1 and isinstance(record, rec.Header):
            note = log_header.newer_version_note(record)
            if note:
                source.warn(lineno, note)
        replay.feed(lineno, record)


register_input_kind(EventLogInput())
