"""What the HTML report draws of a run: step times, marks, the time breakdown, graphs and ranks, bucketed.

`run_view` reads a `Report` into a `RunView`; `xladev.report.svg_charts` draws it. Every input kind gives
what it holds, and the view says what is estimated or missing (`RunView.notes`):

- an event log: each step's measured wall time and parts, and exact marks (step, site, cause);
- a metrics file (XLA_METRICS_FILE, printed reports): the device time per report (compile, execution,
  transfers) and the new compiles, transfers and fallbacks per report, without sites;
- a PT_XLA_DEBUG log: each compile's step, site and cause; no times.

Device memory per step (live at the step's end, and the step's peak) comes from an event log's step records, for the
steps the runtime sampled; no other input has it.

A long run is drawn per bucket of steps (at most `MAX_BARS` bars), so the page stays small however long
the run: each bar is the mean step of its bucket, with its slowest step, and each mark sums its bucket.
"""

from __future__ import annotations

import dataclasses

from xladev.analysis import wall_time
from xladev.report.eventlog_input import MAX_STEP_TIMES
from xladev.analysis.run_parts import GraphState
from xladev.report.marks import KINDS, LABELS, MarkLog, StepMark
from xladev.schema.record_wording import step_window
from xladev.schema.sites import short_site
from xladev.schema.units import compact_time_ns

MAX_BARS = 400
# Lines of site and cause a mark's tooltip lists; the rest are counted.
MAX_MARK_LINES = 6
# Graphs whose IR text the page carries (each cut to MAX_IR_CHARS), so a run of many graphs stays small.
MAX_IR_GRAPHS, MAX_IR_CHARS = 30, 20_000
# Marks each finding links to.
MAX_FINDING_LINKS = 8
# The rules whose evidence is a kind of mark (a finding about an op links only to that op's fallbacks).
RULE_KINDS = {"recompilation": "compile", "compile-time": "compile", "slow-compile": "compile",
              "graph-growing": "compile", "graph-growth": "compile", "host-transfers": "transfer",
              "early-sync": "transfer", "cpu-fallback": "fallback", "graph-breaks": "graph-break"}
# Series columns whose growth is a mark, for a metrics file (which does not say where).
_SERIES_MARKS = (("compiles", "compile"), ("transfers_from_device", "transfer"), ("fallback_calls", "fallback"))
_SERIES_PARTS = (("compile_time_ns", "compile"), ("execute_time_ns", "execute"))


@dataclasses.dataclass
class StepBar:
    """One bar of the step timeline: a step, or a bucket of steps.

    Attributes:
      first: the first step it covers (0-based).
      last: the last step it covers.
      wall_ns: the mean step's wall time; None when the input does not measure it (then the parts' sum is drawn).
      peak_ns: the slowest step's wall time (or parts' sum) in the bucket.
      parts: mean ns per step of each part of `wall_time.PARTS` measured.
      steps: steps in the bucket that the input has numbers for.
    """

    first: int
    last: int
    wall_ns: float | None
    peak_ns: float
    parts: dict[str, float]
    steps: int = 1

    @property
    def height_ns(self) -> float:
        """What the bar's height shows: the wall time, else the measured parts."""
        return self.wall_ns if self.wall_ns is not None else sum(self.parts.values())

    def other_ns(self) -> float:
        """The mean step's time outside the measured parts (0 when the wall time is unknown)."""
        return 0.0 if self.wall_ns is None else wall_time.StepTime(self.first, self.wall_ns, self.parts).other_ns()


@dataclasses.dataclass
class MarkGroup:
    """The marks of one kind in one bar's steps: one mark on the timeline.

    Attributes:
      anchor: the mark's id in the page (findings link to it).
      kind: one of `xladev.report.marks.KINDS`.
      first: the first step it covers.
      last: the last step it covers.
      count: events in it.
      ns: their time, 0 when not measured.
      lines: ``site: cause ×count`` per site and cause, most events first (at most `MAX_MARK_LINES`).
      more: sites and causes not listed.
      causes: every cause in it (to match findings about one op).
    """

    anchor: str
    kind: str
    first: int
    last: int
    count: int
    ns: float
    lines: list[str]
    more: int = 0
    causes: frozenset = frozenset()

    def steps_text(self) -> str:
        """``step 4`` or ``steps 4–7``."""
        return step_window(self.first, self.last)

    def tooltip(self) -> str:
        """What hovering the mark shows: its steps, kind, count and time, then each site and cause."""
        head = f"{self.steps_text()}: {LABELS[self.kind]} ×{self.count:,}"
        if self.ns:
            head += f", {compact_time_ns(self.ns)}"
        more = [f"… {self.more} more sites or causes"] if self.more else []
        return "\n".join([head] + self.lines + more)


@dataclasses.dataclass
class MemoryPoint:
    """Device memory in one bar's steps: the most held at a sampled step's end, and the highest peak.

    Attributes:
      first: the first step it covers.
      last: the last step it covers.
      live: the most bytes live at the end of a sampled step in it.
      peak: the highest peak in it (the most a step held while its graphs ran; estimated, see
        `xladev.schema.records.Step`).
      samples: sampled steps in it.
    """

    first: int
    last: int
    live: int
    peak: int
    samples: int = 1

    def steps_text(self) -> str:
        """``step 4`` or ``steps 4–7``."""
        return step_window(self.first, self.last)


@dataclasses.dataclass
class RankSeries:
    """One rank's work per step on the run's axis.

    Attributes:
      rank: the rank.
      bars: its bucketed steps (the same buckets as the other ranks'), each step's wall time less its wait for the
        other ranks at the collectives.
      wait_ns: mean wait per step for the other ranks at the collectives, per bar.
      total_ns: its wall time.
      marks: its compiles, device→host reads, CPU fallbacks and graph breaks as marks (a graph one rank compiles
        alone, or a read only one rank makes, stands out on the shared axis).
    """

    rank: int
    bars: list[StepBar]
    wait_ns: list[float]
    total_ns: float
    marks: list[MarkGroup] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RunView:
    """What the HTML report draws of one run.

    Attributes:
      name: the run's name (its inputs).
      prefix: prepended to every id in the page (two runs compared share a page).
      bucket: steps per bar (1 unless the run is long).
      bars: the step timeline's bars, in step order.
      measured: what a bar's height is, in words.
      exact: True when steps and marks were measured (an event log).
      marks: the timeline's marks, in step order.
      breakdown: the run's time breakdown (`xladev.analysis.wall_time`), None when no input times anything or the run has
        several ranks.
      breakdowns: (label, breakdown) per bar of the time-by-part chart: ``run``, or ``rank N`` per rank.
      graphs: per graph: compiles, compile time, executions (an event log's), most compile time first.
      graph_ir: graph hash -> its IR text (cut), for the graphs the page links to.
      ranks: per rank, for a run of several ranks with step times.
      memory: device memory per bar's steps, for the bars with a sampled step (an event log's).
      notes: what the input does not give, or gives only estimated, in words.
    """

    name: str
    prefix: str = ""
    bucket: int = 1
    bars: list[StepBar] = dataclasses.field(default_factory=list)
    measured: str = ""
    exact: bool = False
    marks: list[MarkGroup] = dataclasses.field(default_factory=list)
    breakdown: wall_time.TimeBreakdown | None = None
    breakdowns: list[tuple[str, wall_time.TimeBreakdown]] = dataclasses.field(default_factory=list)
    graphs: list[GraphState] = dataclasses.field(default_factory=list)
    graph_ir: dict[str, str] = dataclasses.field(default_factory=dict)
    ranks: list[RankSeries] = dataclasses.field(default_factory=list)
    memory: list[MemoryPoint] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def finding_marks(self, finding) -> list[MarkGroup]:
        """The marks that are a finding's evidence (of its rule's kind; a fallback finding: its op's).

        Args:
          finding: a `xladev.analysis.Finding`.

        Returns:
          The marks, in step order.
        """
        kind = RULE_KINDS.get(finding.rule)
        if kind is None:
            return []
        groups = [group for group in self.marks if group.kind == kind]
        if kind == "fallback" and finding.subject:
            op = finding.subject.split(".")[0]
            groups = [group for group in groups if any(cause.split(".")[0] == op for cause in group.causes)]
        return groups


def bucket_for(first: int, last: int, max_bars: int = MAX_BARS) -> int:
    """Steps per bar so that steps `first`..`last` make at most `max_bars` bars.

    A bar holds the steps ``k * bucket`` to ``k * bucket + bucket - 1`` (so two runs bucketed alike line up); a
    run that starts late (resumed from a checkpoint) is bucketed by the steps it has, not from step 0.

    Args:
      first: the first step drawn.
      last: the last step drawn.
      max_bars: the most bars.

    Returns:
      Steps per bar: 1 for a short run.
    """
    span, bars = last - first + 1, max(1, max_bars)
    bucket = max(1, -(-span // bars))  # exact for steps of any size (a float would lose the last digits)
    for _ in range(1000):  # buckets aligned to multiples may make one bar more: a wider bucket removes it
        if last // bucket - first // bucket + 1 <= bars:
            return bucket
        bucket += 1
    # Steps far apart (a damaged log): one more step per bucket barely changes the count. This width fits the
    # steps in `bars - 1` buckets, so with the alignment's extra bar in `bars`.
    return max(bucket, -(-span // max(1, bars - 1)))


def _bars_from_steps(step_times: list[wall_time.StepTime], bucket: int) -> list[StepBar]:
    buckets: dict[int, list[wall_time.StepTime]] = {}
    for step in step_times:
        buckets.setdefault(step.step // bucket, []).append(step)
    bars = []
    for index in sorted(buckets):
        members = buckets[index]
        parts: dict[str, float] = {}
        for step in members:
            for part, ns in step.parts.items():
                parts[part] = parts.get(part, 0.0) + ns
        n = len(members)
        bars.append(StepBar(index * bucket, index * bucket + bucket - 1, sum(s.wall_ns for s in members) / n,
                            max(s.wall_ns for s in members), {part: ns / n for part, ns in parts.items()}, n))
    return bars


def _memory_points(samples: list[tuple[int, int, int]], bucket: int) -> list[MemoryPoint]:
    """The (step, live, peak) samples per bar: the most live and the highest peak of the bar's sampled steps."""
    points: dict[int, MemoryPoint] = {}
    for step, live, peak in samples:
        index = step // bucket
        point = points.get(index)
        if point is None:
            points[index] = MemoryPoint(index * bucket, index * bucket + bucket - 1, live, peak)
        else:
            point.live, point.peak, point.samples = max(point.live, live), max(point.peak, peak), point.samples + 1
    return [points[index] for index in sorted(points)]


def _rows_from_series(series) -> list[dict[str, float]]:
    columns = series.columns()
    if not columns:
        return []
    length = len(next(iter(columns.values())))
    return [{name: values[i] for name, values in columns.items()} for i in range(length)]


def _bars_from_series(rows: list[dict[str, float]], bucket: int) -> list[StepBar]:
    """Per report, its steps' device time (compile + execution), estimated evenly over the steps it covers."""
    buckets: dict[int, list[tuple[int, dict[str, float]]]] = {}
    for before, row in zip(rows, rows[1:]):
        steps = int(row.get("steps", 0) - before.get("steps", 0))
        if steps <= 0:
            continue
        parts = {part: max(0.0, row.get(column, 0.0) - before.get(column, 0.0)) / steps
                 for column, part in _SERIES_PARTS}
        last = int(row.get("steps", 0)) - 1
        buckets.setdefault(last // bucket, []).append((steps, parts))
    bars = []
    for index in sorted(buckets):
        members = buckets[index]
        n = sum(steps for steps, _ in members)
        parts = {part: sum(p[part] * steps for steps, p in members) / n for _, part in _SERIES_PARTS}
        bars.append(StepBar(index * bucket, index * bucket + bucket - 1, None,
                            max(sum(p.values()) for _, p in members), parts, n))
    return bars


def _series_marks(rows: list[dict[str, float]], log: MarkLog) -> None:
    for before, row in zip([{}] + rows, rows):
        step = max(0, int(row.get("steps", 0)) - 1)
        for column, kind in _SERIES_MARKS:
            grew = int(row.get(column, 0.0) - before.get(column, 0.0))
            if grew > 0:
                log.add(step, kind, "", "new in this report",
                        int(row.get("line", 0)), count=grew)


def _debug_marks(source, log: MarkLog) -> None:
    for event in source.run.compiled:
        log.add(event.steps_before, "compile", event.record.site or "", event.cause or "?", event.line)


def _group_marks(marks: list[StepMark], bucket: int, prefix: str) -> list[MarkGroup]:
    groups: dict[tuple[int, str], list[StepMark]] = {}
    for mark in marks:
        groups.setdefault((mark.step // bucket, mark.kind), []).append(mark)
    out = []
    for (index, kind), members in sorted(groups.items(), key=lambda kv: (kv[0][0], KINDS.index(kv[0][1]))):
        first = min(m.step for m in members)
        last = max(m.step + m.steps - 1 for m in members)
        by_line: dict[tuple[str, str], int] = {}
        for m in members:
            by_line[(m.site, m.cause)] = by_line.get((m.site, m.cause), 0) + m.count
        ranked = sorted(by_line.items(), key=lambda kv: (-kv[1], kv[0]))
        lines = [f"{short_site(site) if site else 'site not recorded'}: {cause} ×{count:,}"
                 for (site, cause), count in ranked[:MAX_MARK_LINES]]
        out.append(MarkGroup(f"{prefix}mark-{kind}-{first}", kind, first, last, sum(m.count for m in members),
                             sum(m.ns for m in members), lines, max(0, len(ranked) - MAX_MARK_LINES),
                             frozenset(cause for _, cause in by_line)))
    return out


def _rank_series(report, bucket: int, prefix: str) -> list[RankSeries]:
    out = []
    for rank, sources in report.ranks().items():
        timed = [s for s in sources if s.time is not None and s.time.step_times]
        if rank is None or not timed:
            continue
        source = timed[0]
        bars = _bars_from_steps(source.time.step_times, bucket)
        waits = source.trace.wait_ns_by_step if source.trace is not None else {}
        wait = [sum(waits.get(step, 0) for step in range(bar.first, bar.last + 1)) / max(1, bar.steps) for bar in bars]
        # Drawn: each step's own work (its time less its wait for the others), as the straggler rule weighs it;
        # the ranks' step times are all the straggler's.
        bars = [dataclasses.replace(bar, wall_ns=max(0.0, bar.wall_ns - w), peak_ns=max(0.0, bar.peak_ns - w))
                for bar, w in zip(bars, wait)]
        marks = source.marks.marks() if source.marks is not None else []
        out.append(RankSeries(rank, bars, wait, sum(s.wall_ns for s in source.time.step_times),
                              _group_marks(marks, bucket, f"{prefix}rank-{rank}-")))
    return out if len(out) > 1 else []


def run_view(report, prefix: str = "", max_bars: int = MAX_BARS) -> RunView:
    """Reads what the HTML report draws of a run.

    Args:
      report: a `xladev.report.Report`.
      prefix: prepended to the view's ids (``a-``, ``b-`` for two runs compared).
      max_bars: the most bars of the step timeline (a longer run is bucketed).

    Returns:
      The view; parts an input does not give are empty and said in ``notes``.
    """
    view = RunView(report.name, prefix)
    breakdowns = report.time_breakdowns
    view.breakdown = next(iter(breakdowns.values())) if len(breakdowns) == 1 else None
    view.breakdowns = ([("run", view.breakdown)] if view.breakdown is not None else
                       [(f"rank {rank}", b) for rank, b in sorted(breakdowns.items(), key=lambda kv: kv[0] or 0)
                        if rank is not None])
    timed = [s for s in report.sources if s.time is not None and s.time.step_times]
    logged = [s for s in report.sources if s.marks is not None]
    primary = report.primary_metrics(report.sources)
    rows = _rows_from_series(primary.series) if primary is not None and primary.series is not None else []
    marks = MarkLog()
    if logged:
        source = logged[0]
        view.exact = True
        step_times = timed[0].time.step_times if timed else []
        steps = [s.step for s in step_times] + [m.step for m in source.marks.marks()]
        last = max([s.step for s in step_times] + [m.step + m.steps - 1 for m in source.marks.marks()] + [0])
        view.bucket = bucket_for(min(steps, default=0), last, max_bars)
        view.bars = _bars_from_steps(step_times, view.bucket)
        view.measured = "each step's wall time, measured (end of one step barrier to the next)"
        view.graphs = sorted(source.graphs.values(), key=lambda g: (-g.compile_ns, -g.executions, g.first_line))
        ir = source.trace.graph_ir if source.trace is not None else {}
        view.graph_ir = {g.graph_hash: ir[g.graph_hash][:MAX_IR_CHARS] for g in view.graphs[:MAX_IR_GRAPHS]
                         if g.graph_hash in ir}
        merged = source.marks.marks()
        view.memory = _memory_points(source.device_memory, view.bucket)
        if step_times and not view.memory:
            view.notes.append("The event log holds no device memory per step (the torch_xla adapter and xladev "
                              "before its memory sampling do not write it), so there is no memory chart.")
        if len(step_times) >= MAX_STEP_TIMES:
            view.notes.append(f"The log keeps the times of its first {MAX_STEP_TIMES:,} steps: later steps have "
                              "marks but no bars.")
        if len(logged) > 1:
            view.notes.append(f"The timeline shows {source.name}; {len(logged) - 1} more event logs are in the "
                              "per-rank chart and the tables.")
    elif rows:
        steps = [int(row.get("steps", 0)) - 1 for row in rows]
        view.bucket = bucket_for(max(0, min(steps)), max(0, max(steps)), max_bars)
        view.bars = _bars_from_series(rows, view.bucket)
        _series_marks(rows, marks)
        merged = marks.marks()
        view.measured = ("the device time per step (compile + execution), estimated: the metrics' growth between "
                         "two reports, spread evenly over the steps between them")
        view.notes.append("From a metrics file: the wall time per step, the sites and causes of the marks, tracing "
                          "and transfer times and device memory per step are not in it; each mark is the growth of a "
                          "counter between two reports. An xladev event log (XLADEV_EVENT_LOG) measures them all.")
    else:
        merged = []
    debug = [s for s in report.sources if s.has_debug and s.marks is None]
    if debug and not logged:
        for source in debug:
            _debug_marks(source, marks)
        merged = [m for m in merged if m.kind != "compile"] + [m for m in marks.marks() if m.kind == "compile"]
        if not view.bars:
            steps = [m.step for m in merged]
            view.bucket = bucket_for(min(steps, default=0), max(steps, default=0), max_bars)
            view.notes.append("From a PT_XLA_DEBUG log: each compile's step, site and cause; no times and no "
                              "device memory, so the timeline has marks but no step times.")
    view.marks = _group_marks(merged, view.bucket, prefix)
    view.ranks = _rank_series(report, view.bucket, prefix)
    if view.breakdown is not None and not view.breakdown.exact:
        view.notes.append(f"Where the time went: {view.breakdown.basis}.")
    if not view.graphs and not logged and (debug or rows):
        view.notes.append("Per graph: only an xladev event log times each graph's compiles and executions.")
    if logged and not view.bars and not view.marks:
        view.notes.append("The event log holds no step and no compile, read, fallback or graph break to draw.")
    return view


def steps_axis(views: list[RunView]) -> tuple[int, int]:
    """The steps one shared axis spans.

    Args:
      views: the runs drawn on it.

    Returns:
      The first and last step any of them draws (a bar or a mark); (0, 0) when none draws anything.
    """
    firsts = [bar.first for v in views for bar in v.bars[:1]] + [m.first for v in views for m in v.marks[:1]]
    lasts = [bar.last for v in views for bar in v.bars[-1:]] + [m.last for v in views for m in v.marks[-1:]]
    return (min(firsts, default=0), max(lasts, default=0))
