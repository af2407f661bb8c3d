"""The numbers of one run (or rank) that the rules need, read from its metrics inputs and debug logs."""

from __future__ import annotations

import dataclasses
from collections import Counter

from xladev import analysis, graphdiff
from xladev.analysis import fallback_reasons, wall_time
from xladev.report.model import SourceResult
from xladev.schema.metrics_text import MetricBlock
from xladev.schema.metric_names import metric_names
from xladev.schema.counters import SCALAR_READS
from xladev.schema.records import Fallback
from xladev.schema.sites import short_site


@dataclasses.dataclass
class RunFacts:
    """The numbers of one run (or rank) that the rules need."""

    source: SourceResult | None = None
    steps: int = 0
    compiles: int = 0
    cached_compiles: int = 0
    executions: int = 0
    transfers: int = 0
    item_calls: int = 0
    fallbacks: dict[str, int] = dataclasses.field(default_factory=dict)
    warmup_steps: int = analysis.WARMUP_STEPS
    compiles_at_warmup: int | None = None
    compile_steps_after_warmup: int | None = None
    last_compile_step: int | None = None
    # Graphs compiled after the last barrier (a final print reading a new value): one-time, not the loop's.
    compiles_after_last_step: int = 0
    stable_graph_size: bool | None = None
    # The steps are the barriers that ran a graph (a PyTorch/XLA debug log's execution blocks): a barrier with
    # nothing to run, such as a data loader's last, leaves no block, so the true count may be higher.
    steps_ran_a_graph: bool = False
    graph_hashes: set[str] = dataclasses.field(default_factory=set)
    # Device->host transfers and steps after set-up, up to the last barrier (None: the input cannot tell).
    steady_transfers: tuple[int, int] | None = None
    time: wall_time.TimeBreakdown | None = None
    repeated: analysis.RepeatedRecompiles | None = None

    def data_dependent_ops(self) -> list[str]:
        """The CPU fallback ops whose output shape depends on the data (nonzero...): a new graph per new count."""
        return [name for name in self.fallbacks if fallback_reasons.is_data_dependent(name)]


def where(source: SourceResult, line: float | int | None) -> str:
    return f"{source.name}:{int(line)}" if line else source.name


def metric_block(source: SourceResult | None, name: str) -> MetricBlock | None:
    """The last report's block of metric `name`, under whichever of its names (schema.metric_names) it has."""
    if source is None or source.final is None:
        return None
    for name in metric_names(name):
        if name in source.final.metrics:
            return source.final.metrics[name]
    return None


def metrics_facts(report, source: SourceResult) -> RunFacts:
    """Reads the rule inputs from an input's last report and its per-step series."""
    numbers = report.final_numbers(source)
    facts = RunFacts(source=source, steps=int(numbers["steps"]), compiles=int(numbers["compiles"]),
                     cached_compiles=int(numbers["cached_compiles"]), executions=int(numbers["executions"]),
                     transfers=int(numbers["transfers_from_device"]), item_calls=int(numbers["item_calls"]),
                     fallbacks={name: value for name, value in source.final.counters.items()
                                if name in analysis.fallback_ops(source.final.counters)})
    if facts.steps <= 0 and (source.step_records or source.final.step):
        # No MarkStep counter (older reports): XLA_METRICS_FILE's [MetricsData; step=N] records count the steps.
        facts.steps = max(source.step_records, source.final.step or 0)
    series = source.series
    if series is not None and len(series) > 1:
        baseline = series.at_warmup
        if baseline is None:  # the file starts after warm-up: its first report is the baseline
            baseline = series.first
            facts.warmup_steps = int(baseline["steps"])
        facts.compiles_at_warmup = int(baseline["compiles"])
        facts.compile_steps_after_warmup = series.increases_after_warmup["compiles"]
        last = series.last_increase_steps.get("compiles")
        facts.last_compile_step = None if last is None else int(last)
        facts.stable_graph_size = series.stable_graph_size()
        # A metrics file's last report is at the last barrier; an event log's final counters run to its end.
        facts.compiles_after_last_step = max(0, facts.compiles - int(series.last.get("compiles", 0.0)))
        reads = [series.after_setup(column) for column in ("transfers_from_device", "item_calls")]
        if reads[0] is not None:
            facts.steady_transfers = (max(count for count, _ in reads), reads[0][1])
    return facts


def debug_facts(sources: list[SourceResult]) -> RunFacts | None:
    """Reads the rule inputs from PT_XLA_DEBUG logs alone (no metrics report)."""
    logs = [source.debug for source in sources if source.has_debug]
    if not logs:
        return None
    events = [event for log in logs for event in log.run.compiled]
    steps = sum(log.step_syncs for log in logs)
    facts = RunFacts(steps=steps, compiles=sum(log.compiles for log in logs),
                     executions=sum(log.run.executions for log in logs),
                     graph_hashes={event.graph_hash for event in events})
    for log in logs:  # xladev's end-of-run summary counts exactly what the blocks only sample
        summary = log.run_summary
        if summary is not None:
            facts.steps = max(facts.steps, summary["steps"])
            facts.compiles = max(facts.compiles, summary["compiles"])
            facts.transfers += summary["transfers"]
            if "steady_transfers" in summary:
                reads, steps = summary["steady_transfers"]
                counted, span = facts.steady_transfers or (0, 0)
                facts.steady_transfers = (counted + reads, max(span, steps))
            facts.item_calls += sum(s["count"] for s in summary["hot_spots"] if s["kind"] in SCALAR_READS)
            for entry in summary["fallbacks"]:
                facts.fallbacks[entry["op"]] = facts.fallbacks.get(entry["op"], 0) + entry["count"]
    for log in logs:  # PyTorch/XLA's old unlowered-op summary, lifted: each op that ran on the CPU, and the value reads
        if log.run_summary is not None:
            continue  # xladev's summary counted them already
        for name, _, count in log.run.fallback_sites():
            if name == analysis.ITEM_COUNTER:
                facts.item_calls += count
            elif name != Fallback.UNKNOWN_OP:  # PyTorch/XLA 2.x's entries name no op
                facts.fallbacks[name] = facts.fallbacks.get(name, 0) + count
    for log in logs:  # PyTorch/XLA's auto-analysis lines count steps, compiles and transfers (a lower bound)
        for kind, numbers in log.profiler_numbers.items():
            facts.steps = max(facts.steps, int(numbers.get("steps", 0)))
            if kind == "CompileTime too frequent":
                facts.compiles = max(facts.compiles, int(numbers["count"]))
            elif kind == "TransferFromDeviceTime too frequent":
                facts.transfers = max(facts.transfers, int(numbers["count"]))
    for log in logs:
        if log.run_summary is None and facts.steady_transfers is None:
            facts.steady_transfers = _steady_reads_of_a_cut_log(log)
    facts.steps_ran_a_graph = facts.steps == steps and not any(log.run_summary is not None for log in logs)
    _warmup_from_debug(facts, events)
    return facts


def _steady_reads_of_a_cut_log(log) -> tuple[int, int] | None:
    """(0, steps after set-up) when an xladev PT_XLA_DEBUG log with no summary (killed) shows that its reads were
    set-up only; None when it cannot tell, or they went on. Its `TransferFromDeviceTime too frequent` line is
    stated again once reads go on after set-up (`xladev.sinks.pt_xla_debug`), so a log whose compiles show the run got
    past set-up without that restatement read nothing after set-up (DDP's constructor, the first forward read)."""
    numbers = log.profiler_numbers.get("TransferFromDeviceTime too frequent")
    if numbers is None or "steady_transfers" in numbers:  # they went on: judged on the line's own counts
        return None
    reached = _step_reached(log)
    if reached is None or reached < analysis.SETUP_STEPS or int(numbers["steps"]) > analysis.SETUP_STEPS:
        return None  # still in set-up when it stopped; or a log written before the line was stated again
    return 0, reached - analysis.SETUP_STEPS + 1


def _step_reached(log) -> int | None:
    """The latest (0-based) step an xladev PT_XLA_DEBUG log with no summary names (its compile blocks say their
    step), None for any other log: one with a summary counts its steps exactly, PyTorch/XLA's names none."""
    events = log.run.compiled
    if log.run_summary is not None or not log.written_by_xladev or not events:
        return None
    return max((event.steps_before for event in events if event.step_known), default=0)


def _warmup_from_debug(facts: RunFacts, events: list) -> None:
    """Sets when the compiles happened (warm-up, later steps, after the last step) from the debug blocks' steps."""
    steps = facts.steps
    if steps <= facts.warmup_steps:
        return
    facts.compiles_at_warmup = sum(1 for event in events if event.steps_before < facts.warmup_steps)
    facts.compiles_after_last_step = sum(1 for event in events if event.steps_before >= steps)
    late = [event for event in events if facts.warmup_steps <= event.steps_before < steps]
    after = {event.steps_before for event in late}
    facts.compile_steps_after_warmup = len(after)
    facts.last_compile_step = max(after) + 1 if after else None
    if len(late) > 1 and len({(e.site, e.inputs, e.outputs) for e in late}) == 1:
        facts.stable_graph_size = len({event.graph_hash for event in late}) == len(late)


def with_summary_counts(facts: RunFacts, sources: list[SourceResult]) -> RunFacts:
    """A metrics report's facts, with the counts of xladev's end-of-run summary of the same run where they are
    further along: a metrics file's last report is at the last barrier, the summary at the process's end, so it
    also counts the reads after the loop (a final `.item()`), and the report would otherwise give a smaller
    number for the run when given both."""
    for source in sources:
        summary = source.debug.run_summary if source.has_debug else None
        if summary is not None:
            facts.transfers = max(facts.transfers, summary["transfers"])
            facts.steps = max(facts.steps, summary["steps"])
            facts.compiles = max(facts.compiles, summary["compiles"])
    return facts


def with_debug_warmup(facts: RunFacts, sources: list[SourceResult]) -> RunFacts:
    """A single metrics report's facts, with when each compile happened from a PT_XLA_DEBUG log of the same run.

    A single report (no per-step series) cannot tell warm-up from recompilation; the debug log's blocks can. Its
    blocks are used only when they saw every compile and every step the report counts (a log of another run, or
    one cut short, would place the compiles wrongly).
    """
    if facts.compiles_at_warmup is not None:
        return facts
    logs = [source.debug for source in sources if source.has_debug]
    events = [event for log in logs for event in log.run.compiled]
    if not events or len(events) != facts.compiles or sum(log.step_syncs for log in logs) != facts.steps:
        return facts
    _warmup_from_debug(facts, events)
    return facts


def compile_bursts(source: SourceResult | None) -> tuple[list[tuple[int, int]], float, list[float]]:
    """Steps after set-up that each compiled at least `analysis.COMPILE_BURST` graphs, from consecutive per-step
    reports (and the complete blocks of a last report cut short).

    Returns:
      ((0-based step, graphs compiled in it) per burst, their compile time in ns, the input line of each).
    """
    series = source.series if source is not None else None
    if series is None:
        return [], 0.0, []
    columns = series.columns()
    rows = [dict(zip(columns, values)) for values in zip(*columns.values())]
    cut = source.cut_row
    if cut is not None and "steps" in cut and "compiles" in cut:
        rows.append(cut)
    bursts, lines, spent = [], [], 0.0
    for before, after in zip(rows, rows[1:]):
        steps_before, new = before.get("steps", 0.0), after.get("compiles", 0.0) - before.get("compiles", 0.0)
        if after.get("steps", 0.0) - steps_before == 1 and steps_before >= analysis.SETUP_STEPS and new >= analysis.COMPILE_BURST:
            bursts.append((int(steps_before), int(new)))
            spent += max(0.0, after.get("compile_time_ns", 0.0) - before.get("compile_time_ns", 0.0))
            lines.append(after.get("line", 0.0))
    return bursts, spent, lines


def repeated_in_series(source: SourceResult | None, warmup_steps: int) -> analysis.RepeatedRecompiles | None:
    """Warm-up steps that compiled a graph of the same size as the step before: the same code, new shapes.

    From a per-step metrics file alone (no recompilation causes): the first two steps are skipped (the
    optimizer's state makes the second step's graph differ), then every later warm-up step whose
    graph compiled while its IR-node count per sync stayed the same counts.
    """
    series = source.series if source is not None else None
    if series is None or len(series) < 4:
        return None
    columns = series.columns()
    steps, compiles = columns.get("steps", []), columns.get("compiles", [])
    nodes, syncs = columns.get("graph_nodes", []), columns.get("graph_syncs", [])
    if not (steps and compiles and nodes and syncs):
        return None
    count, previous_size = 0, None
    for i in range(1, len(steps)):
        if steps[i] > warmup_steps or steps[i] - steps[i - 1] != 1:
            break  # only consecutive per-step reports inside warm-up
        new_syncs = syncs[i] - syncs[i - 1]
        size = (nodes[i] - nodes[i - 1]) / new_syncs if new_syncs > 0 else None
        if steps[i] > 2 and compiles[i] > compiles[i - 1] and size is not None and size == previous_size:
            count += int(compiles[i] - compiles[i - 1])
        previous_size = size
    if not count:
        return None
    return analysis.RepeatedRecompiles(site="one training step", count=count, kind="input shape or constant",
                                    example="warm-up steps compiled new graphs of the same size as the step before")


def repeated_recompiles(sources: list[SourceResult], steps: int = 0) -> analysis.RepeatedRecompiles | None:
    """The site that recompiled most for a changed input shape or constant alone (xladev's causes).

    In a run of more steps than set-up (`analysis.SETUP_STEPS`), or an xladev debug log cut short whose compiles name
    a step after set-up, recompiles in set-up are one-time work (DDP's
    constructor reads its broadcasts one element at a time) and are left out; a run of fewer steps (or none: a
    loop without a barrier), or an input that does not count the steps between compiles, cannot tell set-up
    apart, and every recompile counts.
    """
    counts: Counter = Counter()
    examples: dict = {}
    signatures: dict = {}
    ops: dict = {}
    triggers: dict = {}
    for source in sources:
        if not source.has_debug:
            continue
        # A compile's step is known when the input names it, or counts the step syncs (level 2's execution blocks).
        counted = source.debug.step_syncs > analysis.SETUP_STEPS
        # A log cut short (killed) counts no steps; one whose compiles name a step after set-up got past it.
        reached = _step_reached(source.debug) if source.input_kind != "event-log" else None
        past_setup = steps > analysis.SETUP_STEPS or (reached is not None and reached >= analysis.SETUP_STEPS)
        for event in source.run.compiled:
            if past_setup and (event.step_known or counted) and event.steps_before < analysis.SETUP_STEPS:
                continue
            if not event.changes:  # PyTorch/XLA's blocks: new graphs of one site and signature
                signatures.setdefault((event.where, event.inputs, event.outputs), set()).add(event.graph_hash)
            changes = list(event.changes)
            kind = graphdiff.recompile_kind(changes) if changes else graphdiff.STRUCTURE
            if kind != graphdiff.STRUCTURE:
                # A changed constant is the line of the op it was passed to, when the runtime located it (the
                # slice bound's line), not the read or barrier that compiled the graph.
                op, line = _changed_op(changes) if kind == graphdiff.CONSTANT else ("", None)
                key = (line or event.where, kind)
                counts[key] += 1
                examples.setdefault(key, changes[0])
                ops.setdefault(key, (op, line is not None))
                triggers.setdefault(key, set()).add(short_site(event.site) if event.site else "?")
    if not counts:  # xladev's causes, when present, say exactly what changed: only without them
        for (site, inputs, outputs), hashes in signatures.items():
            key = (site, "input shape or constant")
            if len(hashes) >= 2 and len(hashes) - 1 > counts.get(key, 0):
                counts[key] = len(hashes) - 1
                examples[key] = (f"{len(hashes)} different graphs at {short_site(site)}, all with {inputs} "
                                 f"inputs and {outputs} outputs")
    if not counts:
        return None
    (site, kind), count = counts.most_common(1)[0]
    # The op whose constant changed; the graphs' trigger sites are told apart from its line only when the
    # runtime located it (a backward op is named without a line of its own).
    op, located = ops.get((site, kind), ("", False))
    return analysis.RepeatedRecompiles(site=short_site(site), count=count, kind=kind, example=examples[(site, kind)],
                                    op=op, triggers=tuple(sorted(triggers.get((site, kind), ()))) if located else ())


def _changed_op(changes: list[str]) -> tuple[str, str | None]:
    """The op whose constant changed and ``file.py:LINE`` where the user's code passed it: the first change the
    runtime located outside the backward pass (whose sizes follow the forward's); else the op of the first change
    with no line (a backward op's size still tells a size from a scalar); ``("", None)`` when none."""
    first = ""
    for change in changes:
        found = graphdiff.changed_constant(change)
        if found is not None and found[1] and not found[1].endswith(graphdiff.BACKWARD_SUFFIX):
            return found[0], found[1].partition("@")[2] or found[1]
        if found is not None and not first:
            first = found[0]
    return first, None
