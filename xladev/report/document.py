"""A format-neutral view of a report: summary, findings, then key tables.

`report_document` turns a `Report` into a `Document`; the terminal, Markdown and HTML renderers
only lay a `Document` out, so all three say the same thing in the same order.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from xladev import analysis
from xladev.analysis import wall_time
from xladev.schema import memory as memory_sizes, units
from xladev.schema.sites import short_site
from xladev.report import jsonout
from xladev.report.run_findings import auto_metrics_lines
from xladev.report.names import KEY_COUNTERS, KEY_METRICS, counter_category
from xladev.report.glance import run_view

SPARK_CHARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 48
MAX_TABLE_ROWS = 15
# The memory table shows the graphs that need most: the ones an out-of-memory question is about (JSON has them all).
MAX_MEMORY_ROWS = 5
MAX_WARNINGS_SHOWN = 10


@dataclasses.dataclass
class Table:
    """A table of text cells. ``align`` holds ``l`` or ``r`` per column."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    align: list[str]
    note: str = ""


@dataclasses.dataclass
class Section:
    """A titled part of the document: paragraphs (str), bullet lists (list[str]) and tables."""

    title: str
    items: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Document:
    """Everything a renderer lays out.

    Attributes:
      title: the heading.
      verdict: ``healthy``, ``info``, ``unknown``, ``warning`` or ``error``.
      headline: one sentence saying what matters most.
      summary: (label, value) pairs shown first.
      findings: findings, most severe first.
      sections: the tables and notes after the findings.
      views: what the HTML page draws (`xladev.report.glance.RunView`): one run's, or A's and B's.
      data_of: builds the machine-readable form the JSON renderer writes (`data()`); built only when asked,
        since the other renderers never need it.
    """

    title: str
    verdict: str
    headline: str
    summary: list[tuple[str, str]]
    findings: list[analysis.Finding]
    sections: list[Section]
    views: list = dataclasses.field(default_factory=list)
    data_of: Callable[[], dict] | None = None

    def data(self) -> dict:
        """The machine-readable form of the document (schema ``xladev.report/1`` or its comparison form).

        Raises:
          ValueError: the document was built without one.
        """
        if self.data_of is None:
            raise ValueError(f"{self.title!r} has no machine-readable form")
        return self.data_of()


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """Draws non-negative values as block characters, summing neighbours to fit ``width``.

    Args:
      values: the values, e.g. new compiles per report.
      width: the most characters to draw.

    Returns:
      The sparkline; spaces for zero.
    """
    if not values:
        return ""
    buckets = max(1, math.ceil(len(values) / width))
    sums = [sum(values[i:i + buckets]) for i in range(0, len(values), buckets)]
    top = max(sums)
    if top <= 0:
        return " " * len(sums)
    return "".join(" " if value <= 0 else SPARK_CHARS[min(7, int(value / top * 7.999))] for value in sums)


def _deltas(values: list[float]) -> list[float]:
    """New counts per report from cumulative values (the first report counts from zero)."""
    return [max(0.0, b - a) for a, b in zip([0.0] + values, values)]


def _count(value: float) -> str:
    return f"{int(value):,}" if value == value else "-"


def _summary(report) -> list[tuple[str, str]]:
    inputs = [f"{source.name} ({'; '.join(source.describe_kinds())})" for source in report.sources]
    summary = [("Input" if len(inputs) == 1 else "Inputs", "; ".join(inputs))]
    absent = list(dict.fromkeys(item for source in report.sources for item in source.absent))
    if absent:
        summary.append(("Not recorded", "; ".join(absent)))
    primary = report.primary_metrics(report.sources)
    if primary is not None:
        if sum(source.has_metrics for source in report.sources) > 1:
            summary.append(("Numbers from", primary.name))
        numbers = report.final_numbers(primary)
        steps = numbers["steps"]
        compile_time = numbers["compile_time_ns"]
        execute_time = numbers["execute_time_ns"]
        summary += [
            ("Steps", _count(steps)),
            ("Compiles", f"{_count(numbers['compiles'])} (cache hits {_count(numbers['cached_compiles'])}), "
                         f"{units.compact_time_ns(compile_time)} in total"),
            ("Executions", f"{_count(numbers['executions'])}, {units.compact_time_ns(execute_time)} in total"),
            ("Device→host", f"{_count(numbers['transfers_from_device'])} transfers, "
                            f"{_count(numbers['item_calls'])} .item() calls"),
            ("CPU fallbacks", f"{_count(numbers['fallback_calls'])} calls of "
                              f"{len(analysis.fallback_ops(primary.final.counters))} ops"),
        ]
    logs = [source for source in report.sources if source.has_debug]
    if logs:
        compiles = sum(source.debug.compiles for source in logs)
        executions = sum(source.run.executions for source in logs)
        summary.append(("Debug log", f"{compiles} compile and {executions} execution analyses"))
    summary += _memory_rows(report)
    if len(report.time_breakdowns) == 1:
        summary.append(("Wall time", next(iter(report.time_breakdowns.values())).headline()))
    summary += _profile_rows(report)
    if report.warning_count:
        summary.append(("Parse warnings", str(report.warning_count)))
    return summary


MAX_PROFILE_ROWS = 5


def _memory_rows(report) -> list[tuple[str, str]]:
    """A summary row per input that sampled device memory: live at the last sample, and the highest peak."""
    rows = []
    for source in report.sources:
        samples = source.device_memory
        if not samples:
            continue
        last_step, last_live, _ = samples[-1]
        peak_step, _, peak = max(samples, key=lambda sample: sample[2])
        rank = f"rank {source.rank}: " if source.rank is not None and len(report.sources) > 1 else ""
        rows.append(("Device memory", f"{rank}{units.format_bytes(last_live)} live after step {last_step}, peak "
                                      f"{units.format_bytes(peak)} in step {peak_step} ({len(samples)} steps sampled)"))
    return rows


def _profile_rows(report) -> list[tuple[str, str]]:
    """A summary row per profile the run wrote (its steps, file, and how to open it), the last few."""
    profiles = [(source, profile) for source in report.sources for profile in source.profiles]
    rows = []
    for source, profile in profiles[-MAX_PROFILE_ROWS:]:
        rank = f"rank {source.rank}: " if source.rank is not None and len(report.sources) > 1 else ""
        rows.append(("Profile", f"{rank}{profile.window()} ({profile.how or 'captured'}): {profile.path}; "
                                f"open it with `{profile.open_command()}`, tab Profile"))
    if len(profiles) > MAX_PROFILE_ROWS:
        rows.insert(0, ("Profiles", f"{len(profiles)} written; the last {MAX_PROFILE_ROWS}:"))
    return rows


def _metrics_table(source) -> Table:
    blocks = source.final.metrics
    names = [name for name in KEY_METRICS if name in blocks]
    names += sorted(set(blocks) - set(names))
    rows = []
    for name in names[:MAX_TABLE_ROWS]:
        block = blocks[name]
        samples, total = block.total_samples, block.accumulator
        mean = total / samples if samples and total is not None else None
        rows.append([name, "-" if samples is None else f"{samples:,}", _fmt(block.kind, total), _fmt(block.kind, mean)])
    note = f"{len(names) - MAX_TABLE_ROWS} more in --format json" if len(names) > MAX_TABLE_ROWS else ""
    return Table("Key metrics (last report)", ["Metric", "Samples", "Total", "Mean"], rows,
                 ["l", "r", "r", "r"], note)


def _fmt(kind: str, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    # Rendered for people: `3m49s`, `12.4 ms` (the PyTorch/XLA grammar stays in met.metrics_report()).
    return units.compact_value(kind, float(value))


def _counters_table(source) -> Table:
    values = source.final.counters
    steps = values.get("MarkStep", 0)
    names = [name for name in KEY_COUNTERS if name in values]
    names += sorted(name for name in values if "aten::" in name)
    rows = [[name, f"{values[name]:,}", f"{values[name] / steps:.2f}" if steps else "-",
             {"fallback": "CPU fallback", "item": ".item()"}.get(counter_category(name), "")] for name in names]
    return Table("Key counters (last report)", ["Counter", "Value", "Per step", "Note"], rows, ["l", "r", "r", "l"])


def _timeline(report, source) -> list:
    steps = report.steps[report.steps["source"] == source.name]
    if len(steps) < 2:
        return []
    stride = source.series.stride if source.series is not None else 1
    lines = [f"{len(steps)} reports shown" + (f" (one in {stride})" if stride > 1 else "")
             + f", steps {_count(steps['steps'].iloc[0])}–{_count(steps['steps'].iloc[-1])}; "
               "each mark is the new count per report:"]
    rows = []
    for column, label in (("compiles", "new compiles"), ("transfers_from_device", "device→host"),
                          ("item_calls", ".item()"), ("fallback_calls", "CPU fallbacks"), ("executions", "executions")):
        if column in steps and steps[column].max() > 0:
            deltas = _deltas(steps[column].tolist())
            rows.append([label, sparkline(deltas), _count(sum(deltas))])
    return lines + [Table("", ["Per report", "Timeline", "Total"], rows, ["l", "l", "r"])]


def _debug_tables(report) -> list:
    items = []
    sites = report.compile_sites
    if len(sites):
        rows = [[short_site(row.site), _count(row.compiles), _count(row.graphs), _count(row.executions)]
                for row in sites.head(MAX_TABLE_ROWS).itertuples(index=False)]
        items.append(Table("Compiles and executions by Python site", ["Site", "Compiles", "Graphs", "Executions"],
                           rows, ["l", "r", "r", "r"]))
    graphs = _graphs_table(report)
    if graphs is not None:
        items.append(graphs)
    causes = report.causes
    if len(causes):
        rows = [[row.cause, _count(row.compiles), _count(row.executions)]
                for row in causes.head(MAX_TABLE_ROWS).itertuples(index=False)]
        items.append(Table("Causes (PT_XLA_DEBUG)", ["Cause", "Compiles", "Executions"], rows, ["l", "r", "r"]))
    return items


# The table's columns: XLA's memory analysis in PyTorch/XLA's order, under the debug-log reader's column names.
_SHORT_LABELS = {"temporaries": "Temps", "program": "Code"}  # so a row with its site fits 80 columns
_MEMORY_COLUMNS = tuple((size.column, _SHORT_LABELS.get(size.label, size.label.capitalize()))
                        for size in memory_sizes.SIZES.values())


def _size(value) -> str:
    # Compact, so the row fits 80 columns: 64MB, 8.16MB, 0B.
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return units.format_bytes(value).replace(".00", "")


def _graphs_table(report) -> Table | None:
    """One row per graph compiled: where, and XLA's memory analysis of it (its latest compile), the
    graphs that need most device memory first."""
    events = report.compile_events
    if not len(events):
        return None
    graphs: dict[str, dict] = {}
    for row in events.itertuples(index=False):
        graph = graphs.setdefault(row.graph_hash or "?", {"site": row.site})
        for column, _ in _MEMORY_COLUMNS:
            value = getattr(row, column)
            if value is not None and not math.isnan(value):
                graph[column] = value
    for graph in graphs.values():
        graph["need"] = memory_sizes.need_bytes(memory_sizes.from_columns(graph))
    ranked = sorted(graphs.items(), key=lambda kv: -(kv[1]["need"] or 0))
    rows = [[graph_hash[:12], short_site(graph["site"])]
            + [_size(graph.get(column)) for column, _ in _MEMORY_COLUMNS] + [_size(graph["need"])]
            for graph_hash, graph in ranked[:MAX_MEMORY_ROWS]]
    note = (f"{len(graphs) - MAX_MEMORY_ROWS} graphs that need less not shown (all in --format json). "
            if len(graphs) > MAX_MEMORY_ROWS else "")
    return Table("Graphs: device memory at compile (XLA's memory analysis)",
                 ["Graph", "Site"] + [label for _, label in _MEMORY_COLUMNS] + ["Needs"], rows,
                 ["l", "l"] + ["r"] * (len(_MEMORY_COLUMNS) + 1),
                 note + "Needs = inputs + outputs - aliased + temporaries + generated code: what the graph holds while it "
                 "runs.")


def _share(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _time_tables(breakdown: wall_time.TimeBreakdown, warmup_steps: int) -> list:
    """The breakdown overall and per step, and the first, median and slowest steps."""
    rows = [[label, units.compact_time_ns(total), _share(share), units.compact_time_ns(per_step)]
            for _, label, total, share, per_step in breakdown.rows()]
    rows.append(["wall time", units.compact_time_ns(breakdown.wall_ns), "100%" if breakdown.wall_ns else "-",
                 units.compact_time_ns(breakdown.wall_ns / breakdown.steps)
                 if breakdown.wall_ns is not None and breakdown.steps else "-"])
    note = breakdown.basis + (". The parts add up to more than the wall time: asynchronous work overlapped."
                              if breakdown.overlaps() else ".")
    items: list = [Table("Overall" + ("" if breakdown.exact else " (estimated)"),
                         ["Part", "Total", "Share", "Per step"], rows, ["l", "r", "r", "r"], note)]
    typical = breakdown.typical_steps(warmup_steps)
    if typical:
        parts = [part for part in wall_time.PARTS if any(step.parts.get(part) for _, step in typical)]
        items.append(Table("Per step", ["Step", "Wall"] + [wall_time.SHORT_LABELS[p] for p in parts] + ["other"],
                           [[f"{label}: {step.step + 1}", units.compact_time_ns(step.wall_ns)]
                            + [units.compact_time_ns(step.parts.get(p, 0.0)) for p in parts]
                            + [units.compact_time_ns(step.other_ns())] for label, step in typical],
                           ["l"] + ["r"] * (len(parts) + 2)))
    return items


def _time_section(report) -> Section | None:
    breakdowns = report.time_breakdowns
    if not breakdowns:
        if not report.sources or all(source.final is None and not source.has_debug for source in report.sources):
            return None
        return Section("Where the time went", [
            "These inputs hold no times (a PT_XLA_DEBUG log without xladev's end-of-run summary). A metrics "
            "report (met.metrics_report() or XLA_METRICS_FILE) gives an estimate; an xladev event log "
            "(XLADEV_EVENT_LOG) measures every part."])
    items: list = []
    for rank, breakdown in sorted(breakdowns.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0)):
        if len(breakdowns) > 1:
            items.append(f"Rank {rank}: {breakdown.headline()}")
            continue
        items += _time_tables(breakdown, analysis.WARMUP_STEPS)
    return Section("Where the time went", items)


def _ranks_table(report) -> Table | None:
    groups = {rank: sources for rank, sources in report.ranks().items() if rank is not None}
    if len(groups) < 2:
        return None
    rows = []
    for rank, sources in groups.items():
        primary = report.primary_metrics(sources)
        numbers = report.final_numbers(primary) if primary else {}
        rows.append([str(rank), _count(numbers.get("steps", float("nan"))), _count(numbers.get("compiles", float("nan"))),
                     _count(numbers.get("transfers_from_device", float("nan"))),
                     units.compact_time_ns(numbers["execute_time_ns"]) if numbers else "-"])
    return Table("Ranks", ["Rank", "Steps", "Compiles", "Device→host", "Execute time"], rows, ["r", "r", "r", "r", "r"])


def report_document(report) -> Document:
    """Builds the view of a report: summary, findings, then key tables.

    Args:
      report: a `xladev.report.Report`.

    Returns:
      The document to render.
    """
    findings = report.findings
    verdict = report.verdict()
    sections = []
    primary = report.primary_metrics(report.sources)
    time_section = _time_section(report)
    if time_section is not None:
        sections.append(time_section)
    ranks = _ranks_table(report)
    if ranks is not None:
        sections.append(Section("Ranks", [ranks]))
    if primary is not None:
        timeline = _timeline(report, primary)
        if timeline:
            sections.append(Section(f"Per step ({primary.name})", timeline))
        sections.append(Section(f"Metrics ({primary.name})", [_metrics_table(primary), _counters_table(primary)]))
    debug = _debug_tables(report)
    if debug:
        sections.append(Section("PT_XLA_DEBUG analysis", debug))
    auto = auto_metrics_lines(report)
    if auto:
        sections.append(Section("What PyTorch/XLA's own auto-metrics analysis prints",
                                [[analysis.PROFILER_PREFIX + line for line in auto]]))
    if report.warning_count:
        shown = [str(warning) for warning in report.warnings[:MAX_WARNINGS_SHOWN]]
        if report.warning_count > len(shown):
            shown.append(f"… {report.warning_count - len(shown)} more (see --format json)")
        sections.append(Section("Parse warnings", [shown]))
    headline = analysis.headline(verdict, findings)
    return Document(f"xladev report: {report.name}", verdict, headline, _summary(report), findings, sections,
                    [run_view(report)], data_of=lambda: jsonout.report_data(report, verdict, headline))
