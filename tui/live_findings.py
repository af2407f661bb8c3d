"""The report's diagnosis, live: the same findings and time breakdown as `xladev report`, from the
same rules, on the records the TUI has read so far. No Textual here, and no pandas.

Every record the model reads is fed, once and at once, to the report's own event-log reader
(`xladev.report.eventlog_input.EventLogReplay`): its `RunState` is the run's one fold, which the screen reads
too. `compute()` then diagnoses the inputs (`xladev.report.run_inputs.inputs_from_sources`: the report's
grouping, rules and verdict, without its pandas tables), exactly as `xladev report run.events.jsonl` would on the
log so far, and copies what the screen shows into immutable views (`tui.run_view.Diagnosis`).

The replay's `finish()` may be called whenever: it changes nothing records fold into, only the report's view of
them. It runs in the one thread that feeds the replay (the reader thread), never concurrently with it.
"""

from __future__ import annotations

import os
import time

from xladev import analysis
from xladev.schema import records as rec
from xladev_tui.run_view import NO_DIAGNOSIS, Diagnosis, FindingView, TimeRow, TimeView

# Graph lines remembered to point findings at their graphs (compile and failure records only).
MAX_GRAPH_LINES = 50_000


class LiveDiagnosis:
    """The report's reader and rules, fed record by record.

    Args:
      name: the input's name in the report's ``file:line`` references.
    """

    def __init__(self, name: str = "event log"):
        from xladev.report.eventlog_input import KIND_NAME, EventLogReplay
        from xladev.report.model import SourceResult

        self.name = name
        self._sibling_cache: dict = {}
        self._source = SourceResult(path=name, name=name, input_kind=KIND_NAME)
        self._replay = EventLogReplay(self._source)
        self.state = self._replay.state  # the run's one fold, which the screen reads too
        self.lines = 0          # the last line number fed
        self.fed = 0            # records fed
        self.failed_feeds = 0   # records the report's reader could not take
        self.computed_for = 0   # `fed` when the current diagnosis was computed
        # True once the log will not grow (the run ended, or its writer is gone): only then can a log without an
        # end record say the run did not finish, as the report says of a log it reads whole.
        self.complete = False
        self.current: Diagnosis = NO_DIAGNOSIS
        # To point a finding at a graph: the log line of each compile (or failure) record -> its
        # graph, each graph's site, and each site's latest recompiled graph.
        self.graph_lines: dict[int, str] = {}
        self.site_of: dict[str, str] = {}
        self.last_recompile_at: dict[str, str] = {}

    def set_complete(self, complete: bool) -> None:
        """Says whether the log is complete (it will not grow); a change makes the diagnosis stale."""
        if complete != self.complete:
            self.complete = complete
            self.computed_for = -1

    @property
    def stale(self) -> bool:
        """True when records arrived since the current diagnosis was computed."""
        return self.fed != self.computed_for

    def feed(self, lineno: int, record: rec.Record) -> bool:
        """One record, read at line `lineno` of the log (1-based, blank lines counted).

        Returns:
          False when the report's reader could not take it (a well-typed record with odd contents).
        """
        self.lines = lineno
        self.fed += 1
        try:
            self._replay.feed(lineno, record)
        except (TypeError, ValueError, KeyError, AttributeError):  # odd contents: the TUI reads on
            self.failed_feeds += 1
            return False
        if isinstance(record, (rec.Compile, rec.CompileFailed, rec.ExecuteFailed)):
            if len(self.graph_lines) < MAX_GRAPH_LINES:
                self.graph_lines[lineno] = record.hash
            if record.site:
                self.site_of[record.hash] = record.site
            if isinstance(record, rec.Compile) and record.recompile and record.site:
                self.last_recompile_at[record.site] = record.hash
        return True

    def compute(self) -> Diagnosis:
        """Diagnoses the log so far (the report's findings, verdict and time breakdown).

        Returns:
          The new diagnosis (also kept as `current`). When the report cannot diagnose yet (no event
          after the header) it says so in `note`; when its rules fail, the previous findings stay
          and `note` says why.
        """
        if not self.fed:
            self.computed_for = self.fed  # nothing more to do until records come
            return self.current
        from xladev.report.model import UnreadableInputError
        from xladev.report.run_inputs import inputs_from_sources

        started = time.perf_counter()
        source, replay = self._source, self._replay
        source.lines = self.lines
        self.computed_for = self.fed
        try:
            replay.finish()
            source.ending = replay.ending() if self.complete else None
            inputs = inputs_from_sources([source] + self._siblings(source))
            findings = tuple(self._view(f) for f in inputs.findings)
            verdict = inputs.verdict()
            headline = analysis.headline(verdict, inputs.findings)
            time_view = _time_view(source.time)
        except UnreadableInputError:
            self.current = Diagnosis("", (), None, self.fed, "nothing to diagnose yet: no event after the log's header",
                                     time.perf_counter() - started)
            return self.current
        except Exception as exc:  # a rule that fails on a partial log must not stop the UI
            previous = self.current
            self.current = Diagnosis(previous.verdict, previous.findings, previous.time, previous.records,
                                     f"the diagnosis failed: {type(exc).__name__}: {exc}",
                                     time.perf_counter() - started)
            return self.current
        self.current = Diagnosis(verdict, findings, time_view, self.fed, "", time.perf_counter() - started, headline)
        return self.current

    def _siblings(self, source) -> list:
        """The other ranks' logs of this log's job (beside it, named by rank), read again when they grew: their
        findings across ranks (diverging graphs, a straggler) join this log's. None for a single process."""
        if source.rank is None or self._replay.header is None:
            return []
        from xladev.report.inputs import read_source
        from xladev.schema.ranks import sibling_paths

        world = self._replay.header.world_size or 1
        siblings = []
        for path in sibling_paths(self.name, source.rank, world):
            try:
                stat = os.stat(path)
                cached = self._sibling_cache.get(path)
                if cached is None or cached[0] != (stat.st_size, stat.st_mtime_ns):
                    cached = self._sibling_cache[path] = ((stat.st_size, stat.st_mtime_ns), read_source(path))
            except Exception:  # a sibling being written or unreadable: diagnose without it
                continue
            if cached[1].has_record:  # one with nothing to judge yet is left out, as `xladev report` refuses it
                siblings.append(cached[1])
        return siblings

    def _view(self, finding) -> FindingView:
        return FindingView(finding.rule, finding.severity, finding.title, finding.detail, finding.fix,
                           finding.cost_text(), tuple(finding.evidence), self.graph_of(finding))

    def graph_of(self, finding) -> str | None:
        """The graph a finding is about, from the log lines it cites; None when it is not about one.

        A recompilation points at the latest graph its site recompiled (whose details say what
        changed); a failure at the graph that failed.
        """
        for where in finding.sources:
            line = where.rpartition(":")[2]
            graph = self.graph_lines.get(int(line)) if line.isdigit() else None
            if graph is None:
                continue
            if finding.rule == "recompilation":
                return self.last_recompile_at.get(self.site_of.get(graph, ""), graph)
            return graph
        return None


def _time_view(breakdown) -> TimeView | None:
    """A copy of a `TimeBreakdown`: overall rows, with the last completed step's share of each part."""
    if breakdown is None or breakdown.is_empty():
        return None
    from xladev.analysis.wall_time import SHORT_LABELS

    last = breakdown.step_times[-1] if breakdown.step_times else None
    rows = []
    for part, label, total, share, per_step in breakdown.rows():
        if last is None:
            in_last = None
        elif part == "other":
            in_last = last.other_ns()
        else:
            in_last = last.parts.get(part, 0.0)
        rows.append(TimeRow(part, label, SHORT_LABELS.get(part, part), total, share, per_step, in_last))
    rows.append(TimeRow("wall", "wall time", "wall", breakdown.wall_ns, 1.0 if breakdown.wall_ns else None,
                        breakdown.wall_ns / breakdown.steps if breakdown.wall_ns and breakdown.steps else None,
                        last.wall_ns if last is not None else None))
    return TimeView(breakdown.headline(), tuple(rows), breakdown.steps, last.step if last is not None else None,
                    breakdown.overlaps())
