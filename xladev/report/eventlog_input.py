"""`xladev report run.events.jsonl`: reads an xladev event log (`xladev.schema.records`).

The log's records are folded once into the run's state (`xladev.analysis.run_state.RunState`, which the TUI and
the PT_XLA_DEBUG analysis read too), as a metrics text's last report and a PT_XLA_DEBUG log's blocks and lines are
lifted into theirs. The replay adds what only the report shows: a row of the per-step series per ``step`` record,
the step timeline's marks and the ranks' traces; the run's counters and metrics at the end are the state's, as a
report (`ReportSnapshot.of_state`, as for a metrics text).

The compiles in order, the executions by site, cause and graph, the CPU fallbacks by op and line, the runtime's
warnings (graph growing, memory growing, graph breaks, TorchDynamo recompilations) and the graphs that failed are
not lowered: the rules read them from the state (`RunState.compiled`, `.causes`, `.fallbacks`, `.warnings`,
`.failures`), where a PT_XLA_DEBUG log's blocks and lines are lifted too.

This module reads files only: it never imports torch, jax or the runtime.
"""

from __future__ import annotations

from typing import BinaryIO

from xladev.analysis import run_state
from xladev.dumps.debug_analysis import DebugLog
from xladev.report.inputs import register_input_kind
from xladev.report.marks import MarkLog
from xladev.report.model import RankTrace, ReportSnapshot, RunEnding, SourceResult
from xladev.report.names import canonical_numbers
from xladev.report.series import DEFAULT_MAX_ROWS, StepSeries
from xladev.schema import records as rec
from xladev.schema import record_wording
from xladev.schema import log_header

KIND_NAME = "event-log"
# Bounds of what is kept to compare ranks: executions and compiles, and graph texts (count, characters each).
MAX_TRACE_RUNS = 200_000
MAX_GRAPHS = 2_000  # graphs followed (the HTML report's per-graph table)
MAX_STEP_TIMES = 100_000  # steps whose time and memory are kept
MAX_HOT_SPOTS = 1000  # distinct (kind, line) of device→host reads: the findings quote the few most frequent
MAX_TRACE_GRAPHS, MAX_GRAPH_TEXT = 2_000, 200_000


class EventLogReplay:
    """Replays event-log records into a `SourceResult`.

    The run's numbers are folded once, by `state` (`xladev.analysis.run_state.RunState`, the source's `run`); the
    replay adds what only the report shows: the per-step series, the step timeline's marks and the ranks' traces.

    Args:
      source: what the records are read into.
      max_rows: the per-step series' bound.
    """

    def __init__(self, source: SourceResult, max_rows: int = DEFAULT_MAX_ROWS):
        self.source = source
        self.state = run_state.RunState(run_state.Limits(
            step_times=MAX_STEP_TIMES, graphs=MAX_GRAPHS, transfer_sites=MAX_HOT_SPOTS,
            graph_texts=(MAX_TRACE_GRAPHS, MAX_GRAPH_TEXT)))
        self.max_rows = max_rows
        source.series = self.series = StepSeries(max_rows=max_rows)  # a row per step record
        self.step_rows = 0
        source.debug = DebugLog(source.warn, self.state)  # one state: the rules read its causes, warnings, failures
        source.trace = self.trace = RankTrace()
        source.marks = self.marks = MarkLog()
        self.line = 0

    @property
    def header(self) -> rec.Header | None:
        return self.state.header

    @property
    def ended(self) -> bool:
        return self.state.end is not None

    # ------------------------------------------------------------ records
    def feed(self, lineno: int, record: rec.Record) -> None:
        self.line = lineno
        self.state.feed(record, lineno)
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            handler(self, record)

    def _on_transfer(self, record: rec.Transfer) -> None:
        if record.dir == "from_device" and record.site and not (record.kind or "").startswith("aten::"):
            # a read of the user's: its line, for the step timeline
            self.marks.add(record.step, "transfer", record.site, record.kind or "read", self.line, record.ns,
                           record.count or 1)

    def _on_header(self, record: rec.Header) -> None:
        if self.state.headers > 1:
            self.source.warn(self.line, "a second header: two logs concatenated? read as one run")
            return
        self.source.run_id = record_wording.run_identity(record.host, record.pid, record.start_unix)
        self.source.run_label = record_wording.run_label(record.host, record.pid, record.start_unix)
        self.source.api = record.api
        if record.runtime and record.runtime != "xladev":
            version = (record.versions or {}).get(record.runtime)
            self.source.runtime = f"{record.runtime} {version}" if version else record.runtime
        self.source.absent = [str(item) for item in record.absent or []]
        if self.source.rank is None and (record.world_size or 1) > 1:
            self.source.rank = record.rank

    def _on_compile(self, record: rec.Compile) -> None:
        # the state keeps it in order (`RunState.compiled`), with its step and line
        self.marks.add(record.step, "compile", record.site or "", record.cause.get("text", "") or "?", self.line,
                       record.compile_ns)
        if len(self.trace.compiles) < MAX_TRACE_RUNS:
            self.trace.compiles.append((record.step, record.hash, record.site or "?"))

    def _on_execute(self, record: rec.Execute) -> None:
        if len(self.trace.runs) < MAX_TRACE_RUNS:
            self.trace.runs.append((record.step, record.hash, record.site or "?"))

    def _on_fallback(self, record: rec.Fallback) -> None:
        self.marks.add(record.step, "fallback", record.site or "", record.op, self.line, record.cpu_ns)

    def _on_graph_break(self, record: rec.GraphBreak) -> None:
        self.marks.add(record.step, "graph-break", record.site or "", record.reason or "?", self.line)

    def _on_step(self, record: rec.Step) -> None:
        self._snapshot()

    def _on_failed(self, record: rec.CompileFailed | rec.ExecuteFailed) -> None:
        # the state folds the failure (`RunState.failures`); a run that failed is one of the ranks' trace
        if isinstance(record, rec.ExecuteFailed) and len(self.trace.runs) < MAX_TRACE_RUNS:
            self.trace.runs.append((record.step, record.hash, record.site or "?"))

    def _on_end(self, record: rec.End) -> None:
        if record.signal:  # the run did not end on its own: say how (SIGTERM, e.g. torchrun ending a job)
            self.source.warn(self.line, f"the log ended ({record.describe()}) after {record.steps} steps",
                             always=True)

    def ending(self) -> RunEnding | None:
        """How the run stopped, when it did not end on its own (read once the whole log is read)."""
        state = self.state
        end = state.end
        if state.header is None or (end is not None and not end.signal):
            return None
        start = state.header.start_unix
        last_t = end.t if end is not None else state.last_t
        graph, site, doing = state.last_graph
        return RunEnding(how=end.describe() if end is not None else "no end record", killed=end is None,
                         steps=state.steps, graph=graph, site=site, doing=doing, line=self.line,
                         ended_unix=start + last_t / 1e9 if start else None)

    # ------------------------------------------------------------ snapshots
    def _snapshot(self) -> None:
        self._row_into(self.series, self.step_rows)
        self.step_rows += 1

    def _row_into(self, series: StepSeries, snapshot: int) -> None:
        """Appends the counters now as the series' row number `snapshot`."""
        state = self.state
        samples = {name: m.count for name, m in state.metrics.items()}
        accumulators = {name: m.total for name, m in state.metrics.items()}
        row = canonical_numbers(state.counters, samples, accumulators)
        for name, value in state.counters.items():
            if "aten::" in name:
                row[name] = float(value)
        row["snapshot"] = float(snapshot)
        row["step"] = float("nan") if state.last_step is None else float(state.last_step)
        row["line"] = float(self.line)
        row["steps"] = float(state.steps)
        series.append(row)

    def finish(self) -> None:
        """Makes the last snapshot (the counters at the end of the log), and lifts the run's state into the
        source: the time breakdown, graphs, hot spots, fallbacks and the ranks' trace.

        It may be called again as records go on arriving (a live reader: the TUI): it changes nothing the
        records fold into, only the source, which it sets afresh each time.
        """
        state = self.state
        if state.header is None:
            return
        self.source.series, self.source.snapshots = self.series, self.step_rows
        if state.counters or state.metrics:
            self.source.final = ReportSnapshot.of_state(state, state.last_step, self.line, max(0, self.step_rows - 1))
            if self.step_rows == 0:  # no step yet: the series is the one end-of-log row, not the steps' series
                self.source.series = StepSeries(max_rows=self.max_rows)
                self._row_into(self.source.series, 0)
                self.source.snapshots = 1
        wall = state.end.t if state.end is not None else state.last_t
        basis = ("measured: every compile, execution, transfer and traced op of the event log"
                 + ("" if state.end is not None else "; the log has no end record, so the wall time runs to its "
                                                     "last record"))
        self.source.time = state.time_breakdown(float(wall) if wall else None, basis)
        # Copies: a live reader (the TUI) calls finish() on a log that keeps growing.
        self.source.compile_ns_by_step = list(state.compile_ns_by_step)
        self.source.fallback_transfer_ns = state.fallback_transfer_ns
        self.source.fallback_ns_by_op = dict(state.fallback_ns_by_op)
        self.source.profiles = list(state.profiles)
        self.source.device_memory = list(state.memory)
        self.source.graphs = {h: g for h, g in state.graphs.items() if g.compiles or g.executions}
        spots: dict = {}
        for spot in state.transfers.values():
            if spot.site and not spot.kind.startswith("aten::"):
                key = (spot.kind or "read", spot.site)
                count, line = spots.get(key, (0, spot.first_line))
                spots[key] = [count + spot.count, min(line, spot.first_line)]
        self.source.hot_spots = spots
        self.trace.graph_ir = dict(state.graph_texts)
        self.trace.wait_ns_by_step = dict(state.wait_ns_by_step)
        self.trace.lost = [(r.rank, r.reason, r.step) for r in state.lost]


# Every record kind has its entry (None: the run's state, `run_state.RunState`, is its whole fold): a kind added
# without one fails tests/schema/test_record_kinds.py.
_HANDLERS = {
    rec.Header: EventLogReplay._on_header, rec.Compile: EventLogReplay._on_compile,
    rec.Execute: EventLogReplay._on_execute, rec.Fallback: EventLogReplay._on_fallback,
    rec.Step: EventLogReplay._on_step, rec.End: EventLogReplay._on_end, rec.CompileFailed: EventLogReplay._on_failed,
    rec.ExecuteFailed: EventLogReplay._on_failed, rec.Transfer: EventLogReplay._on_transfer,
    rec.GraphBreak: EventLogReplay._on_graph_break, rec.GraphGrowing: None, rec.MemoryGrowing: None,
    rec.DynamoRecompile: None, rec.CompileStart: None, rec.Ops: None, rec.Profile: None, rec.GraphText: None,
    rec.Collective: None, rec.RankLost: None, rec.CacheMiss: None, rec.MetricsReport: None,
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
