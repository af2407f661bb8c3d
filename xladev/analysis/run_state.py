"""One run's records, folded once as they arrive: the state the report, the TUI and the PT_XLA_DEBUG analysis read.

`RunState.feed` takes event-log records (`xladev.schema.records`) one at a time, from a file, a live log or the
runtime's own events (the PT_XLA_DEBUG sink builds the same records the event log holds), and keeps what every
reader of a run needs:

- counters and metrics, counted through the schema's one table (`xladev.schema.counters`), as the runtime's
  registry counts them, or taken whole from a metrics report (`metrics_report`, a PyTorch/XLA report lifted);
- steps: their count, wall time, the time of each part of a step (`xladev.analysis.wall_time.PARTS`) and the
  device memory the runtime sampled at their ends;
- compiles in order (the first `Limits.compiles`), per trigger site and per graph, with each recompilation's
  cause; executions per graph;
- device→host reads per (kind, line), and which of them came after set-up;
- CPU fallback calls per (op, line), and their CPU time;
- the runtime's warnings (`run_warnings`), failures (`run_failures`), profiles, lost ranks, how the log ended.

Pure processing: no file, clock, thread or torch. What only one reader shows (the report's step timeline and
rank traces, the TUI's log pane) stays with that reader, fed the same records.
"""

from __future__ import annotations

import collections
import dataclasses

from xladev.analysis import wall_time
from xladev.analysis.execution_causes import ExecutionCauses
from xladev.analysis.run_failures import RunFailures, failure_verb
from xladev.analysis.run_parts import CompileSeen, GraphState, Recompilation, SiteCompiles, TransferSite
from xladev.analysis.run_warnings import RunWarnings
from xladev.analysis.finding_model import SETUP_STEPS
from xladev.schema import records as rec
from xladev.schema.counters import updates
from xladev.schema.units import COUNT

MAX_SAMPLES = 1024  # a metric's newest samples, kept for its percentiles (as PyTorch/XLA keeps them)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a state keeps at most, so a run of any length costs bounded memory.

    Attributes:
      step_times: steps whose time and memory sample are kept (the newest are dropped beyond it).
      recent_steps: the newest steps' wall times and memory samples, kept whatever the run's length (live views).
      graphs: distinct graphs followed (None: all).
      transfer_sites: distinct (kind, line) of device→host reads followed (None: all).
      profiles: profile records kept.
      failures: compile and execution failures kept.
      graph_texts: graphs whose IR text is kept, and the characters kept of each.
      compiles: compile records kept in order (`RunState.compiled`).
    """

    step_times: int = 100_000
    recent_steps: int = 600
    graphs: int | None = None
    transfer_sites: int | None = None
    profiles: int = 1000
    failures: int = 1000
    graph_texts: tuple[int, int] = (2_000, 200_000)
    compiles: int = 20_000


class MetricTotal:
    """One metric's samples: how many, their sum, and the newest `MAX_SAMPLES` of them; or, for a metric a
    metrics report gave, what the report printed (`printed`: its percentiles and rates, as the record holds them)."""

    __slots__ = ("kind", "count", "total", "samples", "line", "printed")

    def __init__(self, kind: str, line: int):
        self.kind, self.count, self.total, self.line = kind, 0, 0.0, line
        self.samples: collections.deque = collections.deque(maxlen=MAX_SAMPLES)
        self.printed: dict | None = None

    @classmethod
    def reported(cls, printed: dict, line: int) -> "MetricTotal":
        """A metric as a metrics report printed it: its samples' count and sum, and the rest as printed."""
        metric = cls(str(printed.get("kind") or "value"), line)
        metric.count = int(printed.get("total_samples") or 0)
        metric.total = float(printed.get("accumulator") or 0.0)
        metric.printed = printed
        return metric

    def add(self, value: float, count: int = 1) -> None:
        """`count` samples summing to `value` (each kept as their mean when more than one)."""
        self.count += count
        self.total += value
        if count == 1:
            self.samples.append(value)
        elif count > 1:
            self.samples.extend([value / count] * min(count, MAX_SAMPLES))


class RunState:
    """One run's records, folded as they arrive.

    Args:
      limits: what is kept at most (`Limits`).
    """

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits
        self.line = 0  # the input line of the record being folded
        self.records = 0
        self.header: rec.Header | None = None
        self.headers = 0  # more than one: logs concatenated
        self.end: rec.End | None = None
        self.last_t = 0
        # counters and metrics, named as the runtime's registry names them, and the line each first appeared on
        self.counters: dict[str, int] = {}
        self.counter_lines: dict[str, int] = {}
        self.metrics: dict[str, MetricTotal] = {}
        # steps
        self.steps = 0
        self.last_step: int | None = None
        self.step_ns_total = 0
        self.step_times: list[wall_time.StepTime] = []
        self.memory: list[tuple[int, int, int]] = []  # (step, live bytes, peak bytes) of sampled steps
        self.recent_step_ns: collections.deque = collections.deque(maxlen=limits.recent_steps)
        self.recent_memory: collections.deque = collections.deque(maxlen=limits.recent_steps)
        # where the time went: ns per part, overall and in the step in progress
        self.parts: dict[str, float] = dict.fromkeys(wall_time.PARTS, 0.0)
        self._step_parts: dict[str, float] = {}
        # compiles and graphs
        self.compiles = 0
        self.compile_ns = 0
        self.longest_compile_ns = 0
        self.compile_ns_by_step: list[tuple[int, int]] = []
        self.executions = 0
        self.causes = ExecutionCauses()  # executions by (user site, cause, graph)
        self.longest_execute_ns = 0
        self.sites: dict[str, SiteCompiles] = {}
        self.graphs: dict[str, GraphState] = {}
        self.graph_texts: dict[str, str] = {}
        self.recompilations: list[Recompilation] = []
        self.compiled: list[CompileSeen] = []  # the first `limits.compiles`, in order
        self.compiling: dict[str, rec.CompileStart] = {}  # started, not yet compiled or failed
        # the last graph the log names: (hash, user's line, compiling / compiled / ran / failed)
        self.last_graph: tuple[str, str, str] = ("", "", "")
        # device→host reads
        self.reads = 0
        self.transfers: dict[tuple[str, str], TransferSite] = {}
        self.fallback_transfer_ns = 0.0  # operands of CPU fallback ops read to the host
        # Reads after set-up (SETUP_STEPS), and those of the latest step that read: the reads after the last
        # barrier (a final print) are one-time too, known once the run ends.
        self._later_reads = 0
        self._latest_read_step = -1
        self._latest_step_reads = 0
        # CPU fallbacks
        self.fallbacks: dict[tuple[str, str], int] = {}
        self.fallback_ns_by_op: dict[str, int] = {}
        # the rest
        self.profiles: list[rec.Profile] = []
        self.failures = RunFailures(limits.failures)  # and the out-of-memory messages
        self.lost: list[rec.RankLost] = []
        self.wait_ns_by_step: dict[int, int] = {}
        self.warnings = RunWarnings()

    # ------------------------------------------------------------ input
    def feed(self, record: rec.Record, line: int = 0) -> None:
        """Folds one record.

        Args:
          record: a record of the event log.
          line: its line in the input (0 when it has none): the first line of each counter and graph.
        """
        self.line = line
        self.records += 1
        for update in updates(record):  # the schema's table, as the runtime's registry counts
            if update.kind == COUNT:
                if update.name not in self.counters:
                    self.counters[update.name] = 0
                    self.counter_lines[update.name] = line
                self.counters[update.name] += int(update.value)
            else:
                metric = self.metrics.get(update.name)
                if metric is None:
                    metric = self.metrics[update.name] = MetricTotal(update.kind, line)
                metric.add(float(update.value), update.samples)
        t = getattr(record, "t", None)
        if isinstance(t, int) and t > self.last_t:
            self.last_t = t
        fold = _FOLDS.get(type(record))
        if fold is not None:
            fold(self, record)

    # ------------------------------------------------------------ questions
    def time_breakdown(self, wall_ns: float | None, basis: str, exact: bool = True) -> wall_time.TimeBreakdown:
        """The run's time by part.

        Args:
          wall_ns: the run's wall time so far (None when unknown).
          basis: how the parts were measured, in words.
          exact: whether the parts are measured (not estimated).

        Returns:
          A breakdown owning copies of the state's numbers (the state may go on folding).
        """
        measured = ("tracing", "compile", "execute", "to_device", "from_device")
        parts = {part: ns for part, ns in self.parts.items() if part in measured or ns}
        return wall_time.TimeBreakdown(parts=parts, wall_ns=wall_ns, steps=self.steps, exact=exact, basis=basis,
                                       step_times=list(self.step_times))

    def steady_reads(self) -> tuple[int, int]:
        """(device→host reads, steps) after set-up up to the last barrier, as `analysis.host_transfer_finding`
        judges them."""
        after_end = (self._latest_step_reads if self._latest_read_step >= max(self.steps, SETUP_STEPS) else 0)
        return self._later_reads - after_end, max(0, self.steps - SETUP_STEPS)

    def hot_spots(self) -> list[TransferSite]:
        """The device→host reads by (kind, line), most frequent first."""
        return sorted(self.transfers.values(), key=lambda s: (-s.count, s.site))

    def fallback_sites(self) -> list[tuple[str, str, int]]:
        """(op, line, calls) of the CPU fallbacks, most frequent first."""
        return sorted(((op, site, n) for (op, site), n in self.fallbacks.items()), key=lambda t: (-t[2], t[0]))

    def compiles_per_site(self) -> list[tuple[str, int, int]]:
        """(site, compiles, compile ns) per trigger site, most compiles first."""
        return sorted(((site, s.compiles, s.compile_ns) for site, s in self.sites.items()),
                      key=lambda t: (-t[1], t[0]))

    # ------------------------------------------------------------ folds, one per record kind
    def _spent(self, part: str, ns: float) -> None:
        if ns > 0:
            self.parts[part] += ns
            self._step_parts[part] = self._step_parts.get(part, 0.0) + ns

    def _graph(self, graph_hash: str) -> GraphState | None:
        graph = self.graphs.get(graph_hash)
        if graph is None:
            if self.limits.graphs is not None and len(self.graphs) >= self.limits.graphs:
                return None
            graph = self.graphs[graph_hash] = GraphState(graph_hash, len(self.graphs))
        return graph

    def _counted(self, record: rec.Compile | rec.Execute) -> GraphState | None:
        """The graph of a compile or execution record, its first step and line set at its first."""
        graph = self._graph(record.hash)
        if graph is not None and not graph.compiles and not graph.executions:
            graph.first_step, graph.first_line = record.step, self.line
        return graph

    def _on_header(self, record: rec.Header) -> None:
        self.headers += 1
        if self.header is None:
            self.header = record

    def _on_graph_text(self, record: rec.GraphText) -> None:
        count, chars = self.limits.graph_texts
        if record.hash in self.graph_texts or len(self.graph_texts) < count:
            self.graph_texts[record.hash] = record.ir[:chars]
        graph = self._graph(record.hash)
        if graph is not None:
            graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs

    def _on_compile_start(self, record: rec.CompileStart) -> None:
        self.last_graph = (record.hash, record.site or "", "compiling")
        self.compiling[record.hash] = record
        graph = self._graph(record.hash)
        if graph is not None:
            graph.nodes = graph.nodes or record.nodes
            graph.site = graph.site or record.site or ""

    def _on_compile(self, record: rec.Compile) -> None:
        self.last_graph = (record.hash, record.site or "", "compiled")
        self.compiling.pop(record.hash, None)
        cause = record.cause.get("text", "")
        site = record.site or ""
        self.compiles += 1
        self.compile_ns += record.compile_ns
        self.longest_compile_ns = max(self.longest_compile_ns, record.compile_ns)
        self.compile_ns_by_step.append((record.step, record.compile_ns))
        self._spent("compile", record.compile_ns)
        if len(self.compiled) < self.limits.compiles:
            self.compiled.append(CompileSeen(record, self.line, self.steps))
        entry = self.sites.get(site)
        if entry is None:
            entry = self.sites[site] = SiteCompiles(record.step, record.step)
        entry.compiles += 1
        entry.graphs.add(record.hash)
        entry.compile_ns += record.compile_ns
        entry.last_step = record.step
        entry.last_cause = cause
        recompilation = None
        if record.recompile:
            r = record.recompile
            recompilation = Recompilation(record.step, site, record.hash, str(r.get("previous", "")),
                                          tuple(str(c) for c in r.get("changes") or ()), cause,
                                          int(r.get("graphs_at_site", entry.compiles)), record.compile_ns,
                                          int(r.get("compile_ns_at_site", 0) or 0))
            entry.recompiles += 1
            self.recompilations.append(recompilation)
        graph = self._counted(record)
        if graph is not None:
            graph.site = site
            graph.name = graph.name or record.name or ""
            graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs
            graph.compiles += 1
            graph.compile_ns += record.compile_ns
            graph.last_compile_ns = record.compile_ns
            graph.compiled_step = record.step
            graph.cause = cause
            graph.memory = dict(record.memory)
            graph.shardings = record.shardings if isinstance(record.shardings, dict) else None
            if recompilation is not None:
                graph.recompile = recompilation

    def _on_execute(self, record: rec.Execute) -> None:
        self.last_graph = (record.hash, record.site or "", "ran")
        self.executions += 1
        self.causes.fold(record, self.line)
        self.longest_execute_ns = max(self.longest_execute_ns, record.execute_ns)
        self._spent("execute", record.execute_ns)
        graph = self._counted(record)
        if graph is not None:
            if not graph.nodes:
                graph.nodes, graph.inputs, graph.outputs = record.nodes, record.inputs, record.outputs
            graph.site = graph.site or record.site or ""
            graph.name = graph.name or record.name or ""
            graph.executions += 1
            graph.execute_ns += record.execute_ns
            graph.ran_at(record.step)

    def _on_failed(self, record: rec.CompileFailed | rec.ExecuteFailed) -> None:
        self.last_graph = (record.hash, record.site or "", "failed")
        if isinstance(record, rec.CompileFailed):
            self.compiling.pop(record.hash, None)
        self.failures.fold(record, self.line)
        graph = self._graph(record.hash)
        if graph is not None:
            verb = failure_verb(record)
            graph.site = graph.site or record.site or ""
            graph.failure = f"{verb} at step {record.step}: {record.message} (HLO: {record.hlo_path or '?'})"

    def _on_transfer(self, record: rec.Transfer) -> None:
        if record.dir != "from_device":
            self._spent("to_device", record.ns)
            return
        self._spent("from_device", record.ns)
        kind = record.kind or ""
        if kind.startswith("aten::"):
            self.fallback_transfer_ns += record.ns
        count = record.count or 1
        self.reads += count
        if record.step >= SETUP_STEPS:
            self._later_reads += count
        if record.step != self._latest_read_step:
            self._latest_read_step, self._latest_step_reads = record.step, 0
        self._latest_step_reads += count
        key = (kind, record.site or "")
        spot = self.transfers.get(key)
        if spot is None:
            if self.limits.transfer_sites is not None and len(self.transfers) >= self.limits.transfer_sites:
                return
            spot = self.transfers[key] = TransferSite(kind, key[1], first_line=self.line)
        spot.count += count
        spot.nbytes += record.bytes
        spot.last_step = record.step

    def _on_ops(self, record: rec.Ops) -> None:
        self._spent("tracing", record.tracing_ns)

    def _on_fallback(self, record: rec.Fallback) -> None:
        self._spent("fallback", record.cpu_ns)
        if record.cpu_ns > 0:
            self.fallback_ns_by_op[record.op] = self.fallback_ns_by_op.get(record.op, 0) + record.cpu_ns
        key = (record.op, record.site or "")
        self.fallbacks[key] = self.fallbacks.get(key, 0) + record.calls

    def _on_step(self, record: rec.Step) -> None:
        if len(self.step_times) < self.limits.step_times:
            self.step_times.append(wall_time.StepTime(record.step, float(record.interval_ns), self._step_parts))
        self.recent_step_ns.append(record.interval_ns)
        sample = record.memory_sample()
        if sample is not None:
            self.recent_memory.append(sample)
            if len(self.memory) < self.limits.step_times:
                self.memory.append(sample)
        self._step_parts = {}
        self.steps += 1
        self.last_step = record.step
        self.step_ns_total += record.interval_ns

    def _on_profile(self, record: rec.Profile) -> None:
        if len(self.profiles) < self.limits.profiles:
            self.profiles.append(record)

    def _on_collective(self, record: rec.Collective) -> None:
        self.wait_ns_by_step[record.step] = self.wait_ns_by_step.get(record.step, 0) + record.wait_ns

    def _on_rank_lost(self, record: rec.RankLost) -> None:
        self.lost.append(record)

    def _on_end(self, record: rec.End) -> None:
        self.end = record

    def _on_metrics_report(self, record: rec.MetricsReport) -> None:
        # A report counts everything before it: its numbers replace those counted so far.
        self.counters = {name: int(value) for name, value in record.counters.items()}
        self.counter_lines = {name: record.counter_lines.get(name, self.line) for name in record.counters}
        self.metrics = {name: MetricTotal.reported(printed, record.metric_lines.get(name, self.line))
                        for name, printed in record.metrics.items()}

    def _on_warning(self, record: rec.GraphGrowing | rec.MemoryGrowing | rec.GraphBreak | rec.DynamoRecompile) -> None:
        self.warnings.fold(record, self.line)


# Every record kind has its entry (None: its counters, counted through the schema's table, are its whole fold): a
# kind added without one fails tests/schema/test_record_kinds.py.
_FOLDS = {
    rec.Header: RunState._on_header, rec.GraphText: RunState._on_graph_text,
    rec.CompileStart: RunState._on_compile_start, rec.Compile: RunState._on_compile,
    rec.CompileFailed: RunState._on_failed, rec.ExecuteFailed: RunState._on_failed,
    rec.Execute: RunState._on_execute, rec.Transfer: RunState._on_transfer, rec.Ops: RunState._on_ops,
    rec.Fallback: RunState._on_fallback, rec.Step: RunState._on_step, rec.Profile: RunState._on_profile,
    rec.Collective: RunState._on_collective, rec.RankLost: RunState._on_rank_lost, rec.End: RunState._on_end,
    rec.GraphGrowing: RunState._on_warning, rec.MemoryGrowing: RunState._on_warning,
    rec.GraphBreak: RunState._on_warning, rec.DynamoRecompile: RunState._on_warning, rec.CacheMiss: None,
    rec.MetricsReport: RunState._on_metrics_report,
}
