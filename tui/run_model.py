"""The TUI's state: event-log records in, an immutable `RunView` out. No Textual here.

`RunModel.apply` takes what a source reads (log lines, the child's output, state changes) and
keeps running aggregates: steps and step times, compiles grouped by trigger site with their
recompilation alerts, device→host transfer hot spots, CPU fallback ops, graphs by hash (IR text,
memory analysis, compile time, the steps that ran them), counters and metrics named as the
runtime's metrics registry names them, the graphs compiling now, and the run's state. The same
records feed the report's reader (`tui.diagnosis`), whose findings and time breakdown are
recomputed at most once a second (`update_diagnosis`). `snapshot()` copies what the screen shows
(`tui.run_view`); the UI only ever reads snapshots, so the model can live in a reader thread.
"""

from __future__ import annotations

import collections
import time
from typing import Callable

from xladev.schema import records as rec
from xladev.schema import log_header
from xladev.schema.counters import updates
from xladev.schema.record_wording import layout_lines
from xladev.schema.records import RecordError, parse_line
from xladev.schema.sites import UNKNOWN_SITE, short_site
from xladev.schema.units import COUNT
from xladev_tui.live_findings import LiveDiagnosis
from xladev_tui.run_view import (
    DISCONNECTED, ENDED_STATES, ERROR, EXITED, FINISHED, RUNNING, WAITING, Alert, CounterRow, Diagnosis, FallbackRow,
    FindingView, GraphRow, HotSpot, OpenCompile, ProfileRow, RunView, SiteRow, TimeRow, TimeView,
)

# What a source hands the model (tuples, to stay cheap at thousands of records a second).
LINE = "line"          # (LINE, text): one complete log line
OUTPUT = "output"      # (OUTPUT, stream, text): a line the child printed
STATUS = "status"      # (STATUS, state, detail, exit_code)
TRUNCATED = "truncated"  # (TRUNCATED, text): the incomplete last line of a log whose writer is gone
NOTICE = "notice"      # (NOTICE, text): a message for the log pane

MAX_STEP_TIMES = 600
MAX_LOG_LINES = 2000
MAX_ALERTS = 200
MAX_STEP_RANGES = 64
MAX_PROFILES = 100
# The most often the report's diagnosis is recomputed while records arrive, in seconds.
DIAGNOSIS_INTERVAL = 1.0


# ---------------------------------------------------------------- mutable aggregates

class _Graph:
    __slots__ = ("hash", "nodes", "inputs", "outputs", "compile_ns", "compiled_step", "site", "cause", "memory",
                 "executions", "execute_ns", "ranges", "ir", "recompile", "order", "failure", "shardings")

    def __init__(self, graph_hash: str, order: int):
        self.hash = graph_hash
        self.nodes = self.inputs = self.outputs = 0
        self.compile_ns: int | None = None
        self.compiled_step: int | None = None
        self.site = ""
        self.cause = ""
        self.memory: dict = {}
        self.shardings: tuple[str, ...] = ()  # an SPMD graph's layout, in words (`record_wording.layout_lines`)
        self.executions = 0
        self.execute_ns = 0
        self.ranges: list[list[int]] = []
        self.ir = ""
        self.recompile: Alert | None = None
        self.order = order
        self.failure = ""

    def ran_at(self, step: int) -> None:
        ranges = self.ranges
        if ranges and ranges[-1][0] <= step <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], step)
            return
        ranges.append([step, step])
        if len(ranges) > MAX_STEP_RANGES:
            del ranges[0]

    def steps_text(self) -> str:
        parts = [f"{a}" if a == b else f"{a}–{b}" for a, b in self.ranges]
        return ", ".join(parts)

    def row(self) -> GraphRow:
        return GraphRow(self.hash, self.nodes, self.inputs, self.outputs, self.compile_ns, self.compiled_step,
                        self.site, self.cause, tuple(sorted(self.memory.items())), self.executions, self.execute_ns,
                        self.steps_text(), self.ir, self.recompile, self.failure, self.shardings)


class _Site:
    __slots__ = ("compiles", "graphs", "compile_ns", "first_step", "last_step", "alerts", "last_cause")

    def __init__(self, step: int):
        self.compiles = 0
        self.graphs: set[str] = set()
        self.compile_ns = 0
        self.first_step = step
        self.last_step = step
        self.alerts = 0
        self.last_cause = ""


class RunModel:
    """Aggregates of one run's event log, fed record by record.

    Args:
      source: what is followed (a path or a command), shown until the header arrives.
      clock: seconds, monotonic: when a compile started, and how often to diagnose (tests pass a
        fake one).
      diagnosis_interval: the most often `update_diagnosis` recomputes the findings, in seconds.
    """

    def __init__(self, source: str = "", clock: Callable[[], float] = time.monotonic,
                 diagnosis_interval: float = DIAGNOSIS_INTERVAL):
        self.source = source
        self.clock = clock
        self.diagnosis = LiveDiagnosis(source or "event log")
        self.diagnosis_interval = diagnosis_interval
        self._diagnosed_at: float | None = None
        self.lines = 0  # log lines read, blank ones included: the report's line numbers
        self.compiling: dict[str, OpenCompile] = {}
        self.output_lines = 0
        self.version = 0
        self.header: rec.Header | None = None
        self.state = WAITING
        self.state_detail = "waiting for the event log"
        self.exit_code: int | None = None
        self.ended = False
        self.steps = 0
        self.last_step: int | None = None
        self.step_times: collections.deque = collections.deque(maxlen=MAX_STEP_TIMES)
        self.step_ns_total = 0
        # (step, live device bytes, peak bytes) of the steps the runtime sampled.
        self.memory: collections.deque = collections.deque(maxlen=MAX_STEP_TIMES)
        self.compiles = 0
        self.compile_ns = 0
        self.sites: dict[str, _Site] = {}
        self.alerts: collections.deque = collections.deque(maxlen=MAX_ALERTS)
        self.transfers: dict[tuple[str, str], list] = {}
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.graphs: dict[str, _Graph] = {}
        self.counters: dict[str, int] = {}
        self.metrics: dict[str, list] = {}   # name -> [kind, count, total]
        self.log: collections.deque = collections.deque(maxlen=MAX_LOG_LINES)
        self.log_total = 0
        self.records = 0
        self.bad_lines = 0
        self.truncated = False
        self.last_t = 0
        self.compile_failures: list[str] = []
        self.profiles: collections.deque = collections.deque(maxlen=MAX_PROFILES)
        self._snapshot: RunView | None = None

    # ---- input ------------------------------------------------------------------------------
    def apply(self, item: tuple) -> None:
        """Applies one item a source read (see LINE, OUTPUT, STATUS, TRUNCATED, NOTICE)."""
        tag = item[0]
        if tag is LINE or tag == LINE:
            self.feed_line(item[1])
        elif tag == OUTPUT:
            self.output_lines += 1
            self.add_log(item[2] if item[1] == "stdout" else f"[{item[1]}] {item[2]}")
        elif tag == STATUS:
            self.set_state(item[1], item[2], item[3] if len(item) > 3 else None)
        elif tag == TRUNCATED:
            self.truncated = True
            self.add_log(f"[xladev tui] the log's last line is incomplete ({len(item[1])} bytes, ignored): "
                         "the writer stopped in the middle of a line")
        elif tag == NOTICE:
            self.add_log(f"[xladev tui] {item[1]}")

    def apply_all(self, items) -> None:
        for item in items:
            self.apply(item)

    def add_log(self, text: str) -> None:
        self.log.append(text.rstrip("\n"))
        self.log_total += 1
        self.version += 1

    def set_state(self, state: str, detail: str = "", exit_code: int | None = None) -> None:
        if state == RUNNING and self.state in (FINISHED, EXITED, DISCONNECTED):
            return  # a late "running" never hides how the run ended
        if state == EXITED:
            self.exit_code = exit_code
        if state != self.state or detail != self.state_detail:
            self.state = state
            self.state_detail = detail
            self.version += 1
            self.diagnosis.set_complete(state in ENDED_STATES)
            if detail and state in (EXITED, DISCONNECTED, ERROR, FINISHED):
                self.add_log(f"[xladev tui] {self.state_text()}: {detail}" if detail != self.state_text()
                             else f"[xladev tui] {detail}")

    def state_text(self) -> str:
        if self.state == EXITED:
            return f"exited {self.exit_code}" if self.exit_code == 0 else f"exited with code {self.exit_code}"
        return self.state

    def feed_line(self, text: str) -> None:
        """One complete line of the event log."""
        self.lines += 1
        if not text.strip():
            return
        try:
            record = parse_line(text)
        except RecordError:
            self.bad_lines += 1
            self.version += 1
            return
        self.records += 1
        self.version += 1
        if record is not None:  # None: a record type of a newer writer
            self.feed_record(record)

    def feed_record(self, record: rec.Record) -> None:
        """One typed record (`xladev.schema.records`)."""
        t = getattr(record, "t", None)
        if isinstance(t, int) and t > self.last_t:
            self.last_t = t
        # Counters and metrics through the schema's one table, as the runtime's registry counts them.
        for update in updates(record):
            if update.kind == COUNT:
                self.counters[update.name] = self.counters.get(update.name, 0) + int(update.value)
            else:
                entry = self.metrics.get(update.name)
                if entry is None:
                    entry = self.metrics[update.name] = [update.kind, 0, 0]
                entry[1] += update.samples
                entry[2] += update.value
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            try:
                handler(self, record)
            except (TypeError, ValueError, KeyError, AttributeError):  # well-typed record, odd contents
                self.bad_lines += 1
        self.diagnosis.feed(self.lines, record)

    def update_diagnosis(self, force: bool = False) -> bool:
        """Recomputes the report's findings when records arrived since the last time and either a
        `diagnosis_interval` has passed, the run ended, or `force`.

        Returns:
          True when it recomputed.
        """
        # Records that arrived while the report's modules imported go first; until they are all in,
        # a diagnosis would be of part of the log (and would use up this second's turn).
        if not self.diagnosis.catch_up() or not self.diagnosis.stale:
            return False
        now = self.clock()
        due = (force or self._diagnosed_at is None or now - self._diagnosed_at >= self.diagnosis_interval
               or self.state in ENDED_STATES)
        if not due:
            return False
        self._diagnosed_at = now
        self.diagnosis.compute()
        self.version += 1
        return True

    # ---- records ----------------------------------------------------------------------------
    def _graph(self, graph_hash: str) -> _Graph:
        graph = self.graphs.get(graph_hash)
        if graph is None:
            graph = self.graphs[graph_hash] = _Graph(graph_hash, len(self.graphs))
        return graph

    def _on_header(self, record: rec.Header) -> None:
        if self.header is not None:
            self.add_log("[xladev tui] a second header: two runs in one file; counting on")
            return
        self.header = record
        note = log_header.newer_version_note(record)
        if note:
            self.add_log(f"[xladev tui] {note}")
        if self.state == WAITING:
            self.set_state(RUNNING, "")

    def _on_graph(self, record: rec.GraphText) -> None:
        graph = self._graph(record.hash)
        graph.ir = record.ir or graph.ir
        graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs

    def _on_compile_start(self, record: rec.CompileStart) -> None:
        graph = self._graph(record.hash)
        graph.nodes = graph.nodes or record.nodes
        graph.site = graph.site or record.site or ""
        self.compiling[record.hash] = OpenCompile(record.hash, record.nodes, record.site or "", record.step, record.t,
                                                  self.clock())

    def _on_compile(self, record: rec.Compile) -> None:
        self.compiling.pop(record.hash, None)
        site = record.site or UNKNOWN_SITE
        cause = record.cause.get("text", "")
        self.compiles += 1
        self.compile_ns += record.compile_ns
        graph = self._graph(record.hash)
        graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs
        graph.compile_ns = record.compile_ns
        graph.compiled_step = record.step
        graph.site = site
        graph.cause = cause
        graph.memory = dict(record.memory)
        graph.shardings = tuple(layout_lines(record.shardings)) if isinstance(record.shardings, dict) else ()
        entry = self.sites.get(site)
        if entry is None:
            entry = self.sites[site] = _Site(record.step)
        entry.compiles += 1
        entry.graphs.add(graph.hash)
        entry.compile_ns += record.compile_ns
        entry.last_step = record.step
        entry.last_cause = cause
        recompile = record.recompile
        if recompile:
            alert = Alert(record.step, site, graph.hash, str(recompile.get("previous", "")),
                          tuple(str(c) for c in recompile.get("changes") or ()), cause,
                          int(recompile.get("graphs_at_site", entry.compiles)), record.compile_ns)
            graph.recompile = alert
            entry.alerts += 1
            self.alerts.append(alert)

    def _on_compile_failed(self, record: rec.CompileFailed | rec.ExecuteFailed) -> None:
        message = record.message.splitlines()
        verb = "failed to compile" if isinstance(record, rec.CompileFailed) else "failed while running"
        text = (f"step {record.step} {short_site(record.site)}: graph {record.hash[:12]} "
                f"{verb}: {message[0] if message else ''} (HLO: {record.hlo_path or '?'})")
        self.compile_failures.append(text)
        self.add_log(f"[xladev tui] {text}")
        if isinstance(record, rec.CompileFailed):
            self.compiling.pop(record.hash, None)
        graph = self._graph(record.hash)
        graph.site = graph.site or record.site or ""
        graph.failure = f"{verb} at step {record.step}: {record.message} (HLO: {record.hlo_path or '?'})"

    def _on_execute(self, record: rec.Execute) -> None:
        graph = self._graph(record.hash)
        if not graph.nodes:
            graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs
        if not graph.site:
            graph.site = record.site or ""
        graph.executions += 1
        graph.execute_ns += record.execute_ns
        graph.ran_at(record.step)

    def _on_transfer(self, record: rec.Transfer) -> None:
        if record.dir == "to_device":
            return
        key = (record.kind or "?", record.site or UNKNOWN_SITE)
        spot = self.transfers.get(key)
        if spot is None:
            spot = self.transfers[key] = [0, 0, 0]
        spot[0] += 1
        spot[1] += record.bytes
        spot[2] = record.step

    def _on_fallback(self, record: rec.Fallback) -> None:
        key = (record.op, record.site or UNKNOWN_SITE)
        self.fallbacks[key] = self.fallbacks.get(key, 0) + 1

    def _on_step(self, record: rec.Step) -> None:
        self.steps += 1
        self.last_step = record.step
        self.step_times.append(record.interval_ns)
        self.step_ns_total += record.interval_ns
        sample = record.memory_sample()
        if sample is not None:
            self.memory.append(sample)

    def _on_profile(self, record: rec.Profile) -> None:
        row = ProfileRow(record.window(), record.path, record.how, record.open_command())
        self.profiles.append(row)
        self.add_log(f"[xladev tui] {row.window} profiled ({row.how or 'captured'}): {row.path}; "
                     f"open it with: {row.command}")

    def _on_end(self, record: rec.End) -> None:
        self.ended = True
        if self.state in (WAITING, RUNNING):
            self.set_state(FINISHED, f"the log ended ({record.describe()}) after {self.steps} steps")

    # ---- output -----------------------------------------------------------------------------
    def snapshot(self) -> RunView:
        """The current view (cached until something changes)."""
        if self._snapshot is not None and self._snapshot.version == self.version:
            return self._snapshot
        steps = max(self.steps, 1)
        header = self.header or rec.Header(pid=None)
        sites = tuple(sorted((SiteRow(site, s.compiles, len(s.graphs), s.compile_ns, s.first_step, s.last_step,
                                      s.alerts, s.last_cause) for site, s in self.sites.items()),
                             key=lambda r: (-r.compiles, -r.compile_ns, r.site)))
        spots = tuple(sorted((HotSpot(kind, site, v[0], v[1], v[0] / steps, v[2])
                              for (kind, site), v in self.transfers.items()), key=lambda s: (-s.count, s.site)))
        fallbacks = tuple(sorted((FallbackRow(op, site, n, n / steps) for (op, site), n in self.fallbacks.items()),
                                 key=lambda r: (-r.count, r.op, r.site)))
        graphs = tuple(g.row() for g in sorted(self.graphs.values(), key=lambda g: g.order))
        counters = [CounterRow(name, COUNT, value, value, value / steps if self.steps else None)
                    for name, value in self.counters.items()]
        counters += [CounterRow(name, kind, count, total, total / steps if self.steps else None)
                     for name, (kind, count, total) in self.metrics.items()]
        counters.sort(key=lambda r: r.name)
        times = tuple(self.step_times)
        snapshot = RunView(
            version=self.version, source=self.source,
            command=header.command or self.source, pid=header.pid,
            device=header.device or "", state=self.state, state_text=self.state_text(),
            exit_code=self.exit_code, steps=self.steps, last_step=self.last_step, step_times=times,
            last_step_ns=times[-1] if times else None,
            mean_step_ns=(sum(times[-50:]) / len(times[-50:])) if times else None,
            compiles=self.compiles, compile_ns=self.compile_ns, sites=sites, alerts=tuple(self.alerts),
            hot_spots=spots, fallbacks=fallbacks, graphs=graphs, counters=tuple(counters), log=tuple(self.log),
            log_total=self.log_total, records=self.records, bad_lines=self.bad_lines, truncated=self.truncated,
            elapsed_ns=self.last_t, compile_failures=tuple(self.compile_failures[-20:]),
            compiling=tuple(self.compiling.values()), diagnosis=self.diagnosis.current,
            output_lines=self.output_lines, profiles=tuple(self.profiles), memory=tuple(self.memory))
        self._snapshot = snapshot
        return snapshot


# Every record kind has its entry: a kind added without one fails tests/schema/test_record_kinds.py.
_HANDLERS = {
    rec.Header: RunModel._on_header, rec.GraphText: RunModel._on_graph, rec.Compile: RunModel._on_compile,
    rec.CompileStart: RunModel._on_compile_start,
    rec.CompileFailed: RunModel._on_compile_failed, rec.ExecuteFailed: RunModel._on_compile_failed,
    rec.Execute: RunModel._on_execute,
    rec.Transfer: RunModel._on_transfer, rec.Fallback: RunModel._on_fallback, rec.Step: RunModel._on_step,
    rec.End: RunModel._on_end, rec.Profile: RunModel._on_profile,
    # Counted through the schema's table, and judged by the report's diagnosis (`diagnosis.feed`): no state here.
    rec.Ops: None, rec.CacheMiss: None, rec.GraphGrowing: None, rec.MemoryGrowing: None, rec.GraphBreak: None,
    rec.DynamoRecompile: None, rec.Collective: None, rec.RankLost: None,
}


def model_from_lines(lines, source: str = "", diagnose: bool = True) -> RunModel:
    """A model fed with these complete log lines (tests, replays), diagnosed at the end unless not `diagnose`."""
    model = RunModel(source)
    for line in lines:
        model.feed_line(line)
    model.diagnosis.set_complete(True)  # the lines are the whole log
    if diagnose:
        model.update_diagnosis(force=True)
    return model


__all__ = [
    "Alert", "CounterRow", "DISCONNECTED", "Diagnosis", "ERROR", "EXITED", "FINISHED", "FallbackRow", "FindingView",
    "GraphRow", "HotSpot", "LINE", "NOTICE", "OUTPUT", "OpenCompile", "ProfileRow", "RUNNING", "RunModel", "STATUS",
    "SiteRow",
    "RunView", "TRUNCATED", "TimeRow", "TimeView", "WAITING", "model_from_lines",
]
