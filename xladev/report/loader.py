"""`load` and `Report`: what the readers found, as pandas DataFrames, plus the diagnosis.

A `Report` is one run: one or more inputs (a metrics file, its debug log, the printed output, or
per-rank files ``metrics.txt.0 … .N``). Its tables are built on first use; its grouping, findings and verdict are
`xladev.report.run_inputs.RunInputs`' (no pandas), which the live TUI diagnoses with.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable

import pandas as pd

from xladev.report import eventlog_input  # noqa: F401  (registers the event-log reader)
from xladev.report.inputs import expand_rank_paths, read_source
from xladev.report.model import SourceResult, UnreadableInputError
from xladev.report.names import counter_category
from xladev.report.run_inputs import RunInputs, inputs_from_sources
from xladev.report.series import DEFAULT_MAX_ROWS

METRIC_COLUMNS = ["source", "rank", "name", "kind", "total_samples", "accumulator", "value_rate", "rate",
                  "mean", "stddev", "p50", "largest_percentile", "line"]
COUNTER_COLUMNS = ["source", "rank", "name", "value", "category", "line"]
COMPILE_COLUMNS = ["source", "rank", "line", "step", "cause", "graph_hash", "inputs", "outputs", "site", "function",
                   "computation_hash", "input_bytes", "output_bytes", "aliased_bytes", "temp_bytes", "program_bytes"]
EXECUTION_COLUMNS = ["source", "rank", "site", "cause", "graph_hash", "executions", "first_line", "inputs", "outputs"]


class Report(RunInputs):
    """One run read from one or more inputs: its tables (pandas DataFrames, built on first use) and its diagnosis.

    Attributes:
      sources: what was read from each input, in the order given.
    """

    # ------------------------------------------------------------ tables

    @functools.cached_property
    def metrics(self) -> pd.DataFrame:
        """One row per metric of each input's last report (values in ns, bytes or plain)."""
        rows = []
        for source in self.sources:
            if source.final is None:
                continue
            for block in source.final.metrics.values():
                rows.append([source.name, source.rank, block.name, block.kind, block.total_samples, block.accumulator,
                             block.value_rate, block.rate, block.mean, block.stddev, block.median(),
                             block.largest_percentile(), block.line])
        return pd.DataFrame(rows, columns=METRIC_COLUMNS)

    @functools.cached_property
    def percentiles(self) -> pd.DataFrame:
        """Printed percentiles of each input's last report: source, name, label, percent, value."""
        rows = [[source.name, block.name, label, float(label.rstrip("%")), value]
                for source in self.sources if source.final is not None
                for block in source.final.metrics.values() for label, value in block.percentiles]
        return pd.DataFrame(rows, columns=["source", "name", "label", "percent", "value"])

    @functools.cached_property
    def counters(self) -> pd.DataFrame:
        """One row per counter of each input's last report, with its category (fallback, item, ...)."""
        rows = [[source.name, source.rank, name, value, counter_category(name), source.final.counter_lines.get(name, 0)]
                for source in self.sources if source.final is not None
                for name, value in source.final.counters.items()]
        return pd.DataFrame(rows, columns=COUNTER_COLUMNS)

    @functools.cached_property
    def steps(self) -> pd.DataFrame:
        """The per-report series of every input: steps, compiles, transfers, ``aten::`` counters..."""
        frames = []
        for source in self.sources:
            if source.series is None or not len(source.series):
                continue
            frame = pd.DataFrame(source.series.columns())
            frame.insert(0, "rank", source.rank)
            frame.insert(0, "source", source.name)
            frames.append(frame)
        if not frames:
            return pd.DataFrame(columns=["source", "rank", "snapshot", "step", "steps", "compiles"])
        frame = pd.concat(frames, ignore_index=True)
        leading = ["source", "rank", "snapshot", "step", "steps", "line"]
        return frame[leading + [column for column in frame.columns if column not in leading]]

    @functools.cached_property
    def compile_events(self) -> pd.DataFrame:
        """One row per Compilation Analysis block of the debug logs."""
        rows = []
        for source in self.sources:
            if source.debug is None:
                continue
            for event in source.run.compiled:
                sizes = event.sizes
                rows.append([source.name, source.rank, event.line, event.steps_before, event.cause, event.graph_hash,
                             event.inputs, event.outputs, event.site, event.function, event.computation_hash,
                             sizes.get("input_bytes"), sizes.get("output_bytes"), sizes.get("aliased_bytes"),
                             sizes.get("temp_bytes"), sizes.get("program_bytes")])
        return pd.DataFrame(rows, columns=COMPILE_COLUMNS)

    @functools.cached_property
    def executions(self) -> pd.DataFrame:
        """Execution Analysis blocks counted by site, cause and graph."""
        rows = [[source.name, source.rank, site, cause, graph_hash, count, line, inputs, outputs]
                for source in self.sources if source.debug is not None
                for (site, cause, graph_hash), (count, line, inputs, outputs) in source.run.causes.by_key.items()]
        return pd.DataFrame(rows, columns=EXECUTION_COLUMNS)

    @functools.cached_property
    def compile_sites(self) -> pd.DataFrame:
        """Compiles and executions per trigger site (the user's Python frame)."""
        compiles = self.compile_events
        executions = self.executions
        sites: dict[str, dict] = {}
        for row in compiles.itertuples(index=False):
            entry = sites.setdefault(row.site or "?", _site_entry(row.site or "?"))
            entry["compiles"] += 1
            entry["graphs"].add(row.graph_hash)
            entry["signatures"].add((row.inputs, row.outputs))
            entry["causes"].add(row.cause)
            entry["first_line"] = min(entry["first_line"], row.line)
        for row in executions.itertuples(index=False):
            entry = sites.setdefault(row.site or "?", _site_entry(row.site or "?"))
            entry["executions"] += row.executions
            entry["causes"].add(row.cause)
            entry["first_line"] = min(entry["first_line"], row.first_line)
        rows = [[entry["site"], entry["compiles"], len(entry["graphs"] - {""}), len(entry["signatures"]),
                 entry["executions"], "; ".join(sorted(entry["causes"])), entry["first_line"]]
                for entry in sites.values()]
        frame = pd.DataFrame(rows, columns=["site", "compiles", "graphs", "signatures", "executions", "causes",
                                            "first_line"])
        return frame.sort_values(["compiles", "executions"], ascending=False, ignore_index=True)

    @functools.cached_property
    def causes(self) -> pd.DataFrame:
        """The compile and execution causes printed by PT_XLA_DEBUG, with their counts."""
        compiles = self.compile_events.groupby("cause").size().rename("compiles")
        executions = self.executions.groupby("cause")["executions"].sum()
        frame = pd.concat([compiles, executions], axis=1).fillna(0).astype(int).reset_index()
        frame.columns = ["cause", "compiles", "executions"]
        return frame.sort_values(["compiles", "executions"], ascending=False, ignore_index=True)

    @functools.cached_property
    def profiler_lines(self) -> pd.DataFrame:
        """The latest ``pt-xla-profiler:`` line of each kind, with how often it was printed."""
        rows = [[source.name, kind, message, times, line]
                for source in self.sources if source.debug is not None
                for kind, (line, message, times) in source.debug.profiler.items()]
        return pd.DataFrame(rows, columns=["source", "kind", "message", "times", "line"])

    @functools.cached_property
    def fallback_sites(self) -> pd.DataFrame:
        """The CPU fallback calls by op and user's line, most first: an event log's fallback records, and
        PyTorch/XLA's unlowered-op usage summary (op ``?`` where it names none)."""
        rows = [[source.name, count, op, site] for source in self.sources if source.run is not None
                for op, site, count in source.run.fallback_sites()]
        return pd.DataFrame(rows, columns=["source", "count", "op", "site"])

    # ------------------------------------------------------------ diagnosis

    @functools.cached_property
    def time_breakdowns(self) -> dict:
        """Where each run's (or rank's) wall time went: rank (None for a single run) to `TimeBreakdown`."""
        from xladev.report.timing import group_breakdown

        out = {}
        for rank, sources in self.ranks().items():
            breakdown = group_breakdown(sources, self.primary_metrics(sources))
            if breakdown is not None:
                out[rank] = breakdown
        return out


def _site_entry(site: str) -> dict:
    return {"site": site, "compiles": 0, "graphs": set(), "signatures": set(), "executions": 0, "causes": set(),
            "first_line": math.inf}


def load(path_or_paths: str | os.PathLike | Iterable[str | os.PathLike], max_rows: int = DEFAULT_MAX_ROWS) -> Report:
    """Reads one run from one or more inputs, detecting what each contains.

    A path that does not exist but has per-rank siblings (``metrics.txt.0``, ``metrics.txt.1`` …)
    reads all of them as ranks of one run.

    Args:
      path_or_paths: a path or several paths.
      max_rows: rows of each input's per-step series kept before thinning.

    Returns:
      The report; its tables and findings are computed on first use.

    Raises:
      UnreadableInputError: when an input is missing or cannot be opened, or (`NoCompleteRecordError`)
        when no input holds a complete record.
    """
    if isinstance(path_or_paths, (str, os.PathLike)):
        path_or_paths = [path_or_paths]
    paths = [expanded for path in path_or_paths for expanded in expand_rank_paths(os.fspath(path))]
    if not paths:
        raise UnreadableInputError("no input given")
    return report_from_sources([read_source(path, max_rows=max_rows) for path in paths])


def report_from_sources(sources: list[SourceResult]) -> Report:
    """Makes one run of inputs already read (`xladev.report.run_inputs.inputs_from_sources`), with its tables.

    Raises:
      NoCompleteRecordError: when no input holds a complete record, or (`DifferentRunsError`) when inputs of the
        same rank come from different runs.
    """
    return inputs_from_sources(sources, Report)
