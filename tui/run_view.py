"""What the screen shows: immutable view records, copied out of the model. No Textual here.

`RunModel.snapshot()` (tui.run_model) returns a `RunView`; the widgets read nothing else, so the
model can keep changing in the reader thread while the screen draws an older view.
"""

from __future__ import annotations

import dataclasses

from xladev.schema.sites import short_site
from xladev.schema.record_wording import change_headline
from xladev.schema.units import COUNT, compact_time_ns

# Run states.
WAITING = "waiting"
RUNNING = "running"
FINISHED = "finished"
EXITED = "exited"
DISCONNECTED = "disconnected"
ERROR = "error"
# States after which no record can arrive: the job ended, one way or another.
ENDED_STATES = (FINISHED, EXITED, DISCONNECTED, ERROR)


@dataclasses.dataclass(frozen=True)
class Alert:
    """A recompilation: a site that had compiled before compiled a different graph."""

    step: int
    site: str
    graph_hash: str
    previous_hash: str
    changes: tuple[str, ...]
    cause: str
    graphs_at_site: int
    compile_ns: int

    @property
    def headline(self) -> str:
        return change_headline(self.changes)

    def text(self) -> str:
        """One line: where, when and what changed."""
        more = f" (+{len(self.changes) - 1} more)" if len(self.changes) > 1 else ""
        return f"step {self.step} {short_site(self.site)}: recompiled, {self.headline}{more}"


@dataclasses.dataclass(frozen=True)
class SiteRow:
    site: str
    compiles: int
    graphs: int
    compile_ns: int
    first_step: int
    last_step: int
    alerts: int
    last_cause: str


@dataclasses.dataclass(frozen=True)
class HotSpot:
    kind: str
    site: str
    count: int
    nbytes: int
    per_step: float
    last_step: int


@dataclasses.dataclass(frozen=True)
class FallbackRow:
    op: str
    site: str
    count: int
    per_step: float


@dataclasses.dataclass(frozen=True)
class GraphRow:
    graph_hash: str
    nodes: int
    inputs: int
    outputs: int
    compile_ns: int | None
    compiled_step: int | None
    site: str
    cause: str
    memory: tuple[tuple[str, int], ...]
    executions: int
    execute_ns: int
    steps: str
    ir: str
    recompile: Alert | None
    failure: str = ""  # why it failed to compile or to run, when it did
    shardings: tuple[str, ...] = ()  # an SPMD graph's inputs and outputs as split over the devices, in words


@dataclasses.dataclass(frozen=True)
class ProfileRow:
    """A profile the run wrote: the steps it covers (`steps 5–7`), the file, the call, the command to open it."""

    window: str
    path: str
    how: str
    command: str

    def text(self) -> str:
        return f"profile of {self.window}: {self.command}  ({self.path})"


@dataclasses.dataclass(frozen=True)
class CounterRow:
    name: str
    kind: str
    count: int
    total: float
    per_step: float | None

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.kind != COUNT and self.count else None


@dataclasses.dataclass(frozen=True)
class OpenCompile:
    """A graph whose ``compile_start`` record has no matching ``compile`` or ``compile_failed`` yet.

    Attributes:
      graph_hash: the graph being compiled.
      nodes: its IR nodes.
      site: the user's line that triggered it (``file:line (function)``).
      step: the step it belongs to.
      t: when it started, in ns since the log started (the log's clock).
      since: when its record reached the UI, in the model's clock (seconds): the live elapsed
        time is ``clock() - since``.
    """

    graph_hash: str
    nodes: int
    site: str
    step: int
    t: int
    since: float

    def text(self, now: float, ended: bool, died: bool, width: int | None = None) -> str:
        """One line: what compiles where, and for how long (or that it never finished).

        Args:
          now: the model's clock now.
          ended: no record can arrive any more (the log ended or its writer is gone).
          died: the writer is gone without an ``end`` record (killed or crashed).
          width: when given, the site is shortened so the line fits (the time is never cut).
        """
        site = short_site(self.site) if self.site else ""
        if not ended:
            head, tail = f"compiling graph {self.graph_hash[:8]} ({self.nodes} nodes)", \
                f" — {max(0.0, now - self.since):.1f} s"
        else:
            started = f"it started {compact_time_ns(self.t)} into the run"
            why = ("the process died while compiling it" if died else "the log ended while it compiled")
            head, tail = f"graph {self.graph_hash[:8]} ({self.nodes} nodes)", \
                f" never finished compiling: {why} ({started})"
        if site and width is not None:
            room = width - len(head) - len(tail) - len(" at ")
            site = site if len(site) <= room else (site[:max(9, room) - 1] + "…")
        return head + (f" at {site}" if site else "") + tail


@dataclasses.dataclass(frozen=True)
class FindingView:
    """One finding of the report's rules (`xladev.analysis.Finding`), as the screen shows it.

    Attributes:
      rule, severity, title, detail, fix: as the report has them.
      cost: what it cost and what the fix saves (`Finding.cost_text()`), "" when not priced.
      evidence: the facts behind it.
      graph_hash: the graph it is about (a recompiled graph, a graph that failed), if any.
    """

    rule: str
    severity: str
    title: str
    detail: str
    fix: str
    cost: str
    evidence: tuple[str, ...]
    graph_hash: str | None = None


@dataclasses.dataclass(frozen=True)
class TimeRow:
    """One part of the wall time: overall total, share, mean per step, and in the last step."""

    part: str
    label: str
    short_label: str
    total_ns: float | None
    share: float | None
    per_step_ns: float | None
    last_step_ns: float | None


@dataclasses.dataclass(frozen=True)
class TimeView:
    """Where the time went (`xladev.analysis.wall_time.TimeBreakdown`), overall and in the last step.

    Attributes:
      headline: the wall time and its largest parts, in one line.
      rows: one per measured part, then ``other``, then ``wall`` (the whole).
      steps: steps completed.
      last_step: the last completed step's number, None before the first.
      overlaps: the parts add up to more than the wall time (asynchronous work overlapped).
    """

    headline: str
    rows: tuple[TimeRow, ...]
    steps: int
    last_step: int | None
    overlaps: bool


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """The report's diagnosis of the log so far.

    Attributes:
      verdict: ``healthy``, ``info``, ``warning``, ``error`` or ``unknown``; "" before there is anything
        to diagnose.
      findings: ranked as the report ranks them.
      time: where the time went, None before there is any.
      records: the log records it covers.
      note: why there is no diagnosis yet, or why the latest one failed ("" otherwise).
      seconds: how long computing it took.
      headline: the report's sentence for it (`xladev.analysis.headline`).
    """

    verdict: str
    findings: tuple[FindingView, ...]
    time: TimeView | None
    records: int
    note: str = ""
    seconds: float = 0.0
    headline: str = ""


NO_DIAGNOSIS = Diagnosis("", (), None, 0, "no events yet")


@dataclasses.dataclass(frozen=True)
class RunView:
    """What the screen shows at one moment. Everything is a copy; nothing changes later."""

    version: int
    source: str
    command: str
    pid: int | None
    device: str
    state: str
    state_text: str
    exit_code: int | None
    steps: int
    last_step: int | None
    step_times: tuple[float, ...]
    last_step_ns: int | None
    mean_step_ns: float | None
    compiles: int
    compile_ns: int
    sites: tuple[SiteRow, ...]
    alerts: tuple[Alert, ...]
    hot_spots: tuple[HotSpot, ...]
    fallbacks: tuple[FallbackRow, ...]
    graphs: tuple[GraphRow, ...]
    counters: tuple[CounterRow, ...]
    log: tuple[str, ...]
    log_total: int
    records: int
    bad_lines: int
    truncated: bool
    elapsed_ns: int
    compile_failures: tuple[str, ...]
    compiling: tuple[OpenCompile, ...] = ()
    diagnosis: Diagnosis = NO_DIAGNOSIS
    output_lines: int = 0  # lines of the job's own output seen (stdout and stderr)
    profiles: tuple[ProfileRow, ...] = ()  # profiles the run wrote, oldest first
    # (step, live device bytes, peak bytes) of the steps the runtime sampled, oldest first; empty when none was.
    memory: tuple[tuple[int, int, int], ...] = ()

    @property
    def ended(self) -> bool:
        """No record can arrive any more."""
        return self.state in ENDED_STATES

    @property
    def died(self) -> bool:
        """The job is gone without finishing its log (killed, crashed, or exited with an error)."""
        return self.state == DISCONNECTED or (self.state == EXITED and self.exit_code != 0)
