"""The TUI's state: event-log records in, an immutable `RunView` out. No Textual here.

`RunModel.apply` takes what a source reads (log lines, the child's output, state changes). Each record is folded
once, by the report's own reader (`tui.live_findings`, whose `RunState` is the run's one fold: steps and step
times, compiles by trigger site with their recompilations, device→host hot spots, CPU fallbacks, graphs by hash,
counters and metrics as the runtime's registry names them); the model keeps what only the screen needs: the
run's state, the log pane, the graphs compiling now. The findings and time breakdown are recomputed at most once
a second (`update_diagnosis`). `snapshot()` copies what the screen shows (`tui.run_view`); the UI only ever reads
snapshots, so the model can live in a reader thread.
"""

from __future__ import annotations

import collections
import time
from typing import Callable

from xladev.analysis.run_failures import failure_verb
from xladev.analysis.run_parts import GraphState, Recompilation
from xladev.schema import records as rec
from xladev.schema import log_header
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

MAX_LOG_LINES = 2000
MAX_ALERTS = 200
MAX_PROFILES = 100
# The most often the report's diagnosis is recomputed while records arrive, in seconds.
DIAGNOSIS_INTERVAL = 1.0


class RunModel:
    """One run's screen state, fed item by item; its records folded once by the report's reader.

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
        self.run = self.diagnosis.state  # the run's one fold (`xladev.analysis.run_state.RunState`)
        self.diagnosis_interval = diagnosis_interval
        self._diagnosed_at: float | None = None
        self.lines = 0  # log lines read, blank ones included: the report's line numbers
        self.compile_seen: dict[str, float] = {}  # graph hash -> when its compile_start record reached the UI
        self.output_lines = 0
        self.version = 0
        self.state = WAITING
        self.state_detail = "waiting for the event log"
        self.exit_code: int | None = None
        self.log: collections.deque = collections.deque(maxlen=MAX_LOG_LINES)
        self.log_total = 0
        self.records = 0
        self.bad_lines = 0
        self.truncated = False
        self._snapshot: RunView | None = None

    @property
    def steps(self) -> int:
        return self.run.steps

    @property
    def ended(self) -> bool:
        return self.run.end is not None

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
        if not self.diagnosis.feed(self.lines, record):
            self.bad_lines += 1  # a well-typed record with odd contents
        handler = _HANDLERS.get(type(record))
        if handler is not None:
            handler(self, record)

    def update_diagnosis(self, force: bool = False) -> bool:
        """Recomputes the report's findings when records arrived since the last time and either a
        `diagnosis_interval` has passed, the run ended, or `force`.

        Returns:
          True when it recomputed.
        """
        if not self.diagnosis.stale:
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

    # ---- records: what the screen says of them beyond the fold ---------------------------------
    def _on_header(self, record: rec.Header) -> None:
        if self.run.headers > 1:
            self.add_log("[xladev tui] a second header: two runs in one file; counting on")
            return
        note = log_header.newer_version_note(record)
        if note:
            self.add_log(f"[xladev tui] {note}")
        if self.state == WAITING:
            self.set_state(RUNNING, "")

    def _on_compile_start(self, record: rec.CompileStart) -> None:
        self.compile_seen[record.hash] = self.clock()

    def _on_failed(self, record: rec.CompileFailed | rec.ExecuteFailed) -> None:
        self.add_log(f"[xladev tui] {_failure_text(record)}")

    def _on_profile(self, record: rec.Profile) -> None:
        row = _profile_row(record)
        self.add_log(f"[xladev tui] {row.window} profiled ({row.how or 'captured'}): {row.path}; "
                     f"open it with: {row.command}")

    def _on_end(self, record: rec.End) -> None:
        if self.state in (WAITING, RUNNING):
            self.set_state(FINISHED, f"the log ended ({record.describe()}) after {self.run.steps} steps")

    # ---- output -----------------------------------------------------------------------------
    def snapshot(self) -> RunView:
        """The current view (cached until something changes)."""
        if self._snapshot is not None and self._snapshot.version == self.version:
            return self._snapshot
        state = self.run
        steps = max(state.steps, 1)
        header = state.header or rec.Header(pid=None)
        sites = tuple(sorted((SiteRow(site or UNKNOWN_SITE, s.compiles, len(s.graphs), s.compile_ns, s.first_step,
                                      s.last_step, s.recompiles, s.last_cause) for site, s in state.sites.items()),
                             key=lambda r: (-r.compiles, -r.compile_ns, r.site)))
        spots = tuple(sorted((HotSpot(s.kind or "?", s.site or UNKNOWN_SITE, s.count, s.nbytes, s.count / steps,
                                      s.last_step) for s in state.transfers.values()),
                             key=lambda s: (-s.count, s.site)))
        fallbacks = tuple(sorted((FallbackRow(op, site or UNKNOWN_SITE, n, n / steps)
                                  for (op, site), n in state.fallbacks.items()), key=lambda r: (-r.count, r.op, r.site)))
        graphs = tuple(_graph_row(g, state.graph_texts.get(g.graph_hash, ""))
                       for g in sorted(state.graphs.values(), key=lambda g: g.order))
        counters = [CounterRow(name, COUNT, value, value, value / steps if state.steps else None)
                    for name, value in state.counters.items()]
        counters += [CounterRow(name, m.kind, m.count, m.total, m.total / steps if state.steps else None)
                     for name, m in state.metrics.items()]
        counters.sort(key=lambda r: r.name)
        times = tuple(state.recent_step_ns)
        compiling = tuple(OpenCompile(r.hash, r.nodes, r.site or "", r.step, r.t, self.compile_seen.get(r.hash, 0.0))
                          for r in state.compiling.values())
        snapshot = RunView(
            version=self.version, source=self.source,
            command=header.command or self.source, pid=header.pid,
            device=header.device or "", state=self.state, state_text=self.state_text(),
            exit_code=self.exit_code, steps=state.steps, last_step=state.last_step, step_times=times,
            last_step_ns=times[-1] if times else None,
            mean_step_ns=(sum(times[-50:]) / len(times[-50:])) if times else None,
            compiles=state.compiles, compile_ns=state.compile_ns, sites=sites,
            alerts=tuple(_alert(r) for r in state.recompilations[-MAX_ALERTS:]),
            hot_spots=spots, fallbacks=fallbacks, graphs=graphs, counters=tuple(counters), log=tuple(self.log),
            log_total=self.log_total, records=self.records, bad_lines=self.bad_lines, truncated=self.truncated,
            elapsed_ns=state.last_t,
            compile_failures=tuple(_failure_text(f.record) for f in state.failures.graphs[-20:]), compiling=compiling,
            diagnosis=self.diagnosis.current,
            output_lines=self.output_lines, profiles=tuple(_profile_row(r) for r in state.profiles[-MAX_PROFILES:]),
            memory=tuple(state.recent_memory))
        self._snapshot = snapshot
        return snapshot


def _alert(r: Recompilation) -> Alert:
    return Alert(r.step, r.site or UNKNOWN_SITE, r.graph_hash, r.previous, r.changes, r.cause, r.graphs_at_site,
                 r.compile_ns)


def _graph_row(g: GraphState, ir: str) -> GraphRow:
    steps = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in g.ran)
    site = (g.site or UNKNOWN_SITE) if g.compiles else g.site
    shardings = tuple(layout_lines(g.shardings)) if g.shardings else ()
    return GraphRow(g.graph_hash, g.nodes, g.inputs, g.outputs, g.last_compile_ns, g.compiled_step, site, g.cause,
                    tuple(sorted(g.memory.items())), g.executions, g.execute_ns, steps, ir,
                    _alert(g.recompile) if g.recompile is not None else None, g.failure, shardings)


def _failure_text(record: rec.CompileFailed | rec.ExecuteFailed) -> str:
    message = record.message.splitlines()
    verb = failure_verb(record)
    return (f"step {record.step} {short_site(record.site)}: graph {record.hash[:12]} "
            f"{verb}: {message[0] if message else ''} (HLO: {record.hlo_path or '?'})")


def _profile_row(record: rec.Profile) -> ProfileRow:
    return ProfileRow(record.window(), record.path, record.how, record.open_command())


# Every record kind has its entry (None: the run's fold, `RunState`, is all the screen needs of it): a kind added
# without one fails tests/schema/test_record_kinds.py.
_HANDLERS = {
    rec.Header: RunModel._on_header, rec.CompileStart: RunModel._on_compile_start,
    rec.CompileFailed: RunModel._on_failed, rec.ExecuteFailed: RunModel._on_failed,
    rec.End: RunModel._on_end, rec.Profile: RunModel._on_profile,
    rec.GraphText: None, rec.Compile: None, rec.Execute: None, rec.Transfer: None, rec.Fallback: None,
    rec.Step: None, rec.Ops: None, rec.CacheMiss: None, rec.GraphGrowing: None, rec.MemoryGrowing: None,
    rec.GraphBreak: None, rec.DynamoRecompile: None, rec.Collective: None, rec.RankLost: None,
    rec.MetricsReport: None,
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
