"""Plain data parsed from one input: snapshots (of `xladev.schema.metrics_text.MetricBlock`s), warnings and
per-source results.

These classes hold what the readers found, before it becomes pandas DataFrames in `Report`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from xladev.errors import XladevError
from xladev.analysis import input_rules
from xladev.schema.metrics_text import DEFAULT_PERCENTILES, MetricBlock, sample_percentiles

if TYPE_CHECKING:  # pragma: no cover
    from xladev.dumps.debug_analysis import DebugLog
    from xladev.analysis.run_parts import GraphState
    from xladev.analysis.run_state import MetricTotal, RunState
    from xladev.report.marks import MarkLog
    from xladev.report.series import StepSeries
    from xladev.analysis.wall_time import TimeBreakdown

MAX_STORED_WARNINGS = 1000
# Why an input holds nothing readable (`SourceResult.problem`), in the words the report prints.
BINARY_DATA = "binary data, not a metrics file or log"
EMPTY_FILE = input_rules.EMPTY_FILE


class UnreadableInputError(XladevError):
    """Raised when an input cannot be read at all (missing, a directory, binary data).

    The message is one line and names the file; the CLI prints it and exits with status 2.
    """


class NoCompleteRecordError(UnreadableInputError):
    """Raised when inputs were read but none holds a complete record (empty, binary, damaged before its
    first record, cut inside its first report, an event log with only its header).

    Attributes:
      report: the inputs (`xladev.report.Report` from `load`; a `run_inputs.RunInputs` for a live reader), with
        the verdict ``unknown`` and a ``no-complete-record`` finding giving the reason, for a caller that shows
        it anyway (the CLI).
    """

    def __init__(self, message: str, report):
        super().__init__(message)
        self.report = report


def _metric_block(name: str, metric: MetricTotal) -> MetricBlock:
    """A metric of the run's state as a metrics report prints it: as a report printed it, or PyTorch/XLA's
    percentiles of its kept samples."""
    if metric.printed is not None:
        return MetricBlock.from_printed(name, metric.printed, metric.line)
    return MetricBlock(name=name, kind=metric.kind, total_samples=metric.count, accumulator=metric.total,
                       percentiles=sample_percentiles(metric.samples, DEFAULT_PERCENTILES), line=metric.line)


@dataclasses.dataclass(frozen=True)
class ParseWarning:
    """Something in the input that could not be read as expected.

    Attributes:
      source: the input's display name.
      line: 1-based line number in that input (0 when not tied to a line).
      message: what was wrong.
    """

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


@dataclasses.dataclass
class ReportSnapshot:
    """One complete metrics report.

    Attributes:
      metrics: metric name to block.
      counters: counter name to value.
      counter_lines: counter name to the line number of its header.
      step: N of the ``[MetricsData; step=N]`` record that introduced it, else None.
      line: line number where the report starts.
      index: 0-based position among the reports of the same input.
    """

    metrics: dict[str, MetricBlock]
    counters: dict[str, int]
    counter_lines: dict[str, int]
    step: int | None
    line: int
    index: int

    @classmethod
    def of_state(cls, state: RunState, step: int | None, line: int, index: int) -> "ReportSnapshot":
        """The run's counters and metrics now, as a report: a metric a report gave as it printed it, one counted
        from an event log's records with PyTorch/XLA's percentiles of its kept samples.

        Args:
          state: the run's state (`xladev.analysis.run_state.RunState`).
          step, line, index: which report it is (`ReportSnapshot`'s attributes).
        """
        metrics = {name: _metric_block(name, metric) for name, metric in state.metrics.items()}
        return cls(metrics, dict(state.counters), dict(state.counter_lines), step, line, index)


@dataclasses.dataclass
class RankTrace:
    """What an event log says each step ran: for comparing the ranks of a job (`xladev.report.across_ranks`).

    Attributes:
      runs: (step, graph hash, user's line) of every execution, and of every one refused (a mismatch).
      compiles: (step, graph hash, user's line) of every compile.
      graph_ir: graph hash -> its IR text (the log's ``graph`` records).
      wait_ns_by_step: step -> ns this rank waited for the others to reach its collectives.
      lost: (rank gone, reason, step) of each rank this rank saw go.
    """

    runs: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    compiles: list[tuple[int, str, str]] = dataclasses.field(default_factory=list)
    graph_ir: dict[str, str] = dataclasses.field(default_factory=dict)
    wait_ns_by_step: dict[int, int] = dataclasses.field(default_factory=dict)
    lost: list[tuple[int, str, int]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RunEnding:
    """How an event log's run stopped when it did not end on its own, and where it was then.

    Attributes:
      how: in words: ``no end record`` (killed, or still running), ``terminated by SIGTERM``, ``exit after SIGTERM``.
      killed: True when the log has no end record (nothing could write one: SIGKILL, a crash, the OOM killer).
      steps: steps completed (the step in progress, 0-based, is this number); None when the log counts no step
        (a PT_XLA_DEBUG_LEVEL=1 log prints compiles only).
      graph: the last graph the log names (compiled or run), "" when none.
      site: the user's line of that graph.
      doing: what that graph was doing last: ``compiling`` (its compile never ended), ``compiled``, ``ran``,
        ``failed``.
      line: the log's last line.
      ended_unix: when the log's last record was written (seconds since the epoch), None when unknown.
    """

    how: str
    killed: bool
    steps: int | None
    graph: str = ""
    site: str = ""
    doing: str = ""
    line: int = 0
    ended_unix: float | None = None


@dataclasses.dataclass
class SourceResult:
    """Everything read from one input file.

    Attributes:
      path: the path as given.
      name: short display name (the path as given).
      rank: the rank parsed from a ``.N`` suffix of a per-rank file, else None.
      input_kind: the reader that read it (``text``; later ``event-log``).
      size_bytes: the input's size on disk.
      lines: lines read.
      snapshots: complete metrics reports read.
      step_records: ``[MetricsData; step=N]`` records seen.
      final: the last complete report, or None when the input had none.
      series: per-report numbers (bounded; see `StepSeries`).
      debug: PT_XLA_DEBUG analysis read from the input.
      warnings: problems found, with line numbers (at most MAX_STORED_WARNINGS kept).
      warning_count: all problems found, stored or not.
      other_lines: lines that were neither report nor debug output.
      damage: what was wrong with the input's compression (a gzip file cut short or corrupt), where
        reading stopped; what came before it was read.
      problem: why the input holds no complete record (binary data, empty, damaged before its first
        record ...); None when it holds one or has not been judged yet (`report_from_sources` does).
      cut_report_line: the line of a last report dropped as cut short, when no report before it
        could be used instead (0 when none was dropped).
    """

    path: str
    name: str
    rank: int | None = None
    input_kind: str = "text"
    size_bytes: int = 0
    lines: int = 0
    snapshots: int = 0
    step_records: int = 0
    final: ReportSnapshot | None = None
    series: StepSeries | None = None
    debug: DebugLog | None = None
    warnings: list[ParseWarning] = dataclasses.field(default_factory=list)
    warning_count: int = 0
    other_lines: int = 0
    damage: str | None = None
    problem: str | None = None
    cut_report_line: int = 0
    # Input lines where the cumulative counters dropped back: a new run appended to the same file.
    restarts: list[int] = dataclasses.field(default_factory=list)
    # Where the wall time went, when the input measures it (an event log exactly; else estimated).
    time: TimeBreakdown | None = None
    # (step, compile ns) per compile, from an event log: the compile time after warm-up.
    compile_ns_by_step: list[tuple[int, int]] = dataclasses.field(default_factory=list)
    fallback_transfer_ns: float = 0.0
    fallback_ns_by_op: dict[str, int] = dataclasses.field(default_factory=dict)  # CPU kernel time per op
    # The run it came from (`xladev.schema.record_wording.run_identity`), when the input says: an event log's
    # header, xladev's end-of-run summary. Metrics reports and PyTorch/XLA's logs do not.
    run_id: str | None = None
    run_label: str = ""
    # The API the run's script used (`xladev.analysis.api_names`), when the input says: an event log's header.
    api: str | None = None
    # Who ran the graphs when not xladev (`torch_xla 2.9.0` for a log `xladev attach` wrote), and what such a log
    # cannot hold (the header's `absent`): said with the input, so that an absence is not read as a zero.
    runtime: str | None = None
    absent: list[str] = dataclasses.field(default_factory=list)
    # Device→host reads by (kind, user site) -> [count, first line], from an event log's transfer records (xladev's
    # PT_XLA_DEBUG summary lists its own as `debug.run_summary["hot_spots"]`).
    hot_spots: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)
    # Profiles of the run written while it logged (an event log's `profile` records), oldest first.
    profiles: list = dataclasses.field(default_factory=list)
    # An event log's per-step graphs, waits and lost ranks, for the diagnoses across ranks.
    trace: RankTrace | None = None
    # The first line with something malformed in it (0 when none): where a corrupt input turns to garbage.
    first_bad_line: int = 0
    # An event log read whole whose run did not end on its own (killed, terminated by a signal); None otherwise.
    ending: RunEnding | None = None
    # The event log of the same run that holds everything this debug output says (`run_identity`): counted once,
    # from there.
    counted_in: str | None = None
    # The numbers of the complete blocks of a last report that was cut short (as a series row), when the
    # report before it is used instead: evidence of what happened last, never the run's final numbers.
    cut_row: dict | None = None
    # What happened on which step (compiles, device→host reads, CPU fallbacks, graph breaks; an event log's,
    # bounded by bucketing steps) and each graph's compiles and executions: the HTML report's timeline and table.
    marks: MarkLog | None = None
    graphs: dict[str, GraphState] = dataclasses.field(default_factory=dict)
    # Device memory at the steps the runtime sampled (an event log's step records): (step, live bytes at its end,
    # the step's peak bytes), oldest first, bounded as the step times are.
    device_memory: list[tuple[int, int, int]] = dataclasses.field(default_factory=list)

    def warn(self, line: int, message: str, always: bool = False, at_end: bool = False) -> None:
        """Records a warning (keeps the first MAX_STORED_WARNINGS, counts all).

        Args:
          line: the 1-based line it is about.
          message: what was wrong.
          always: keep it past the cap (a warning about the whole input, such as damaged compression).
          at_end: it says the input ends early (a record or block cut short), not that a line is malformed.
        """
        self.warning_count += 1
        if not at_end and line > 0 and not 0 < self.first_bad_line <= line:
            self.first_bad_line = line
        if always or len(self.warnings) < MAX_STORED_WARNINGS:
            self.warnings.append(ParseWarning(self.name, line, message))

    @property
    def has_metrics(self) -> bool:
        """True when at least one metrics report was read."""
        return self.final is not None

    @property
    def run(self) -> RunState | None:
        """The run's records, folded: an event log's, and those lifted from PT_XLA_DEBUG lines (`DebugLog.run`)."""
        return self.debug.run if self.debug is not None else None

    @property
    def has_debug(self) -> bool:
        """True when PT_XLA_DEBUG output was read."""
        return self.debug is not None and not self.debug.is_empty()

    @property
    def has_record(self) -> bool:
        """True when the input holds a complete record: a metrics report, PT_XLA_DEBUG output or event-log events."""
        return self.has_metrics or self.has_debug

    @property
    def unreadable(self) -> bool:
        """True for an input that could not be read whole as text: binary, empty, or damaged compression (not
        one that is readable but merely has nothing of PyTorch/XLA in it, such as a program's output)."""
        return bool(self.damage) or self.problem in (BINARY_DATA, EMPTY_FILE)

    def describe_kinds(self) -> list[str]:
        """What the input contained, e.g. ``["XLA_METRICS_FILE, 24 step records", "PT_XLA_DEBUG log"]``."""
        if self.counted_in and not self.has_record:
            return [f"PT_XLA_DEBUG log of the same run as {self.counted_in}: counted once, from there"]
        if self.problem:
            return [f"no complete record: {self.problem}"]
        kinds = self._record_kinds()
        return kinds + [f"damaged: {self.damage}"] if self.damage else kinds

    def _record_kinds(self) -> list[str]:
        kinds = []
        if self.input_kind == "event-log":
            log = f"xladev attach log of {self.runtime}" if self.runtime else "xladev event log"
            # Its steps as the header's Steps line counts them (MarkStep), not its snapshots (one per step, and
            # the end's).
            steps = int(self.final.counters.get("MarkStep", 0)) if self.final is not None else 0
            return [f"{log}, {steps} step{'' if steps == 1 else 's'}"]
        if self.step_records:
            kinds.append(f"XLA_METRICS_FILE, {self.step_records} step records")
        elif self.snapshots > 1:
            kinds.append(f"{self.snapshots} metrics reports")
        elif self.snapshots == 1:
            kinds.append("metrics report")
        if self.has_debug:
            kinds.append("PT_XLA_DEBUG log")
        if not kinds:
            kinds.append("nothing recognised")
        return kinds
