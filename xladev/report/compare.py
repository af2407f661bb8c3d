"""Compares two runs: per-step metrics side by side, ratios, better or worse, findings that changed.

Each run is compared through its main metrics input (the one with the most reports). Counts and
totals are divided by the run's steps first, so a run of 100 steps compares fairly with one of
1000; means per sample are compared as they are.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import PurePath

import pandas as pd

from xladev import analysis
from xladev.schema import units
from xladev.report import jsonout
from xladev.report.document import Document, Section, Table, sparkline
from xladev.report.names import CANONICAL_COLUMNS, KEY_METRICS
from xladev.report.glance import run_view

SAME_BAND = 0.05
ROW_COLUMNS = ["item", "measure", "kind", "a", "b", "ratio", "verdict"]
CANONICAL_LABELS = {
    "steps": ("steps", "value"), "compiles": ("compiles per step", "value"),
    "cached_compiles": ("cache hits per step", "value"), "executions": ("executions per step", "value"),
    "transfers_from_device": ("device→host transfers per step", "value"),
    "transfers_to_device": ("host→device transfers per step", "value"), "item_calls": (".item() per step", "value"),
    "graph_syncs": ("graph syncs per step", "value"), "graph_nodes": ("IR nodes per step", "value"),
    "cache_misses": ("DeviceDataCacheMiss per step", "value"), "compile_time_ns": ("compile time per step", "time"),
    "execute_time_ns": ("execute time per step", "time"), "fallback_calls": ("CPU fallback calls per step", "value"),
}
LOWER_IS_BETTER_CANONICAL = frozenset(CANONICAL_COLUMNS) - {"steps", "cached_compiles", "graph_syncs"}


@dataclasses.dataclass
class Comparison:
    """Two runs side by side.

    Attributes:
      a: the first (baseline) run.
      b: the second run.
      rows: one row per compared number: item, measure, kind, a, b, ratio (b / a), verdict
        (``better``, ``worse``, ``same``, ``changed``, ``new`` or ``gone``).
    """

    a: object
    b: object
    rows: pd.DataFrame

    def findings_only_in(self, side: str) -> list[analysis.Finding]:
        """Findings (not ``healthy``) of one side whose rule and subject the other side lacks."""
        mine, other = (self.a, self.b) if side == "a" else (self.b, self.a)
        keys = {(f.rule, f.subject) for f in other.findings}
        return [f for f in mine.findings if f.rule != "healthy" and (f.rule, f.subject) not in keys]


def _verdict(a: float, b: float, lower_is_better: bool) -> tuple[float, str]:
    if a == 0 and b == 0:
        return 1.0, "same"
    if a == 0:
        return math.inf, "new"
    if b == 0:
        return 0.0, "gone"
    ratio = b / a
    if abs(ratio - 1.0) <= SAME_BAND:
        return ratio, "same"
    if not lower_is_better:
        return ratio, "changed"
    return ratio, "better" if ratio < 1.0 else "worse"


def _per_step(value: float, steps: float) -> float:
    return value / steps if steps else value


def compare(a, b) -> Comparison:
    """Compares two reports.

    Args:
      a: the baseline `Report`.
      b: the `Report` to compare with it.

    Returns:
      The comparison; runs without metrics give an empty table.
    """
    rows = []
    source_a, source_b = a.primary_metrics(a.sources), b.primary_metrics(b.sources)
    if source_a is not None and source_b is not None:
        numbers_a, numbers_b = a.final_numbers(source_a), b.final_numbers(source_b)
        steps_a, steps_b = numbers_a["steps"], numbers_b["steps"]
        for column in CANONICAL_COLUMNS:
            label, kind = CANONICAL_LABELS[column]
            value_a, value_b = numbers_a[column], numbers_b[column]
            if column != "steps":
                value_a, value_b = _per_step(value_a, steps_a), _per_step(value_b, steps_b)
            ratio, verdict = _verdict(value_a, value_b, column in LOWER_IS_BETTER_CANONICAL)
            rows.append([label, "summary", kind, value_a, value_b, ratio, verdict])
        rows += _metric_rows(source_a.final, source_b.final, steps_a, steps_b)
        rows += _counter_rows(source_a.final, source_b.final, steps_a, steps_b)
    return Comparison(a, b, pd.DataFrame(rows, columns=ROW_COLUMNS))


def _metric_rows(final_a, final_b, steps_a: float, steps_b: float) -> list[list]:
    rows = []
    names = [name for name in KEY_METRICS if name in final_a.metrics or name in final_b.metrics]
    names += sorted((set(final_a.metrics) | set(final_b.metrics)) - set(names))
    for name in names:
        block_a, block_b = final_a.metrics.get(name), final_b.metrics.get(name)
        kind = (block_a or block_b).kind
        lower = analysis.metric_preference(name) == "lower"
        total_a = block_a.accumulator or 0.0 if block_a else 0.0
        total_b = block_b.accumulator or 0.0 if block_b else 0.0
        samples_a = block_a.total_samples or 0 if block_a else 0
        samples_b = block_b.total_samples or 0 if block_b else 0
        for measure, value_a, value_b, measure_kind in (
                ("total per step", _per_step(total_a, steps_a), _per_step(total_b, steps_b), kind),
                ("mean", total_a / samples_a if samples_a else 0.0, total_b / samples_b if samples_b else 0.0, kind),
                ("samples per step", _per_step(samples_a, steps_a), _per_step(samples_b, steps_b), "value")):
            ratio, verdict = _verdict(value_a, value_b, lower)
            rows.append([name, measure, measure_kind, value_a, value_b, ratio, verdict])
    return rows


def _counter_rows(final_a, final_b, steps_a: float, steps_b: float) -> list[list]:
    rows = []
    for name in sorted(set(final_a.counters) | set(final_b.counters)):
        value_a = _per_step(final_a.counters.get(name, 0), steps_a)
        value_b = _per_step(final_b.counters.get(name, 0), steps_b)
        ratio, verdict = _verdict(value_a, value_b, analysis.metric_preference(name) == "lower")
        rows.append([name, "per step", "value", value_a, value_b, ratio, verdict])
    return rows


def _show(kind: str, value: float) -> str:
    if value != value:
        return "-"
    if kind == "value":
        return f"{value:,.2f}" if value != int(value) else f"{int(value):,}"
    return units.compact_value(kind, value)


def _ratio(ratio: float) -> str:
    if math.isinf(ratio):
        return "new"
    return f"×{ratio:.2f}"


def comparison_document(comparison: Comparison) -> Document:
    """Builds the view of a comparison: verdicts, key numbers, the biggest changes, changed findings."""
    rows = comparison.rows
    summary_rows = rows[rows["measure"] == "summary"]
    other = rows[(rows["measure"] != "summary") & rows["verdict"].isin(["better", "worse", "new", "gone", "changed"])]
    other = other.assign(size=[abs(math.log(r)) if 0 < r < math.inf else math.inf for r in other["ratio"]])
    other = other.sort_values("size", ascending=False)  # every row the headline counts
    key = Table("Per step", ["Number", "A", "B", "B/A"],
                [[row.item, _show(row.kind, row.a), _show(row.kind, row.b), f"{_ratio(row.ratio)} {row.verdict}"]
                 for row in summary_rows.itertuples(index=False)], ["l", "r", "r", "r"])
    changes = Table("Biggest other changes", ["Metric, measure", "A", "B", "B/A"],
                    [[f"{row.item}, {row.measure}", _show(row.kind, row.a), _show(row.kind, row.b),
                      f"{_ratio(row.ratio)} {row.verdict}"] for row in other.itertuples(index=False)],
                    ["l", "r", "r", "r"])
    worse = int((rows["verdict"] == "worse").sum()) + int(((rows["verdict"] == "new") & (rows["measure"] != "summary")
                                                          & rows["item"].str.contains("aten::")).sum())
    better = int((rows["verdict"] == "better").sum())
    only_a, only_b = comparison.findings_only_in("a"), comparison.findings_only_in("b")
    if len(rows):
        sections = [Section("Key numbers", [key])]
    else:
        sections = [Section("Key numbers", ["Only runs with a metrics report can be compared number by number; "
                                            "the findings of both runs are compared below."])]
    if len(other):
        sections.append(Section("Changes", [changes]))
    sections.append(Section("Findings", [
        [f"only in B (new): {f.severity} {f.title}" for f in only_b] or ["no new findings in B"],
        [f"only in A (resolved in B): {f.severity} {f.title}" for f in only_a] or ["nothing resolved"]]))
    verdict = comparison.b.verdict()
    headline = (f"B is better on {better} numbers and worse on {worse}; "
                f"{len(only_b)} new and {len(only_a)} resolved findings.")
    summary = [("A", f"{comparison.a.name} ({comparison.a.verdict()})"),
               ("B", f"{comparison.b.name} ({comparison.b.verdict()})")]
    steps = comparison.a.steps, comparison.b.steps
    for label, frame in zip(("A compiles", "B compiles"), steps):
        if len(frame) > 1 and "compiles" in frame:
            values = frame[frame["source"] == frame["source"].iloc[0]]["compiles"].tolist()
            summary.append((label, sparkline([max(0.0, y - x) for x, y in zip([0.0] + values, values)]) or "-"))
    label_a, label_b = distinguishing_labels(str(comparison.a.name), str(comparison.b.name))
    return Document(f"xladev report: {label_a} vs {label_b}", verdict, headline, summary, only_b, sections,
                    [run_view(comparison.a, "a-"), run_view(comparison.b, "b-")],
                    data_of=lambda: jsonout.comparison_data(comparison))


def distinguishing_labels(path_a: str, path_b: str) -> tuple[str, str]:
    """Short labels for two run paths: the parts after the folders they share.

    The title must fit one terminal line; the full paths stay in the summary rows A and B.

    Args:
      path_a: the first run's path (or name).
      path_b: the second run's path (or name).

    Returns:
      ``(label_a, label_b)``; ``runs/1/metrics.txt`` and ``runs/2/metrics.txt`` give
      ``1/metrics.txt`` and ``2/metrics.txt``.
    """
    parts_a, parts_b = PurePath(path_a).parts, PurePath(path_b).parts
    if not parts_a or not parts_b:
        return path_a, path_b
    shared = 0
    while shared < min(len(parts_a), len(parts_b)) - 1 and parts_a[shared] == parts_b[shared]:
        shared += 1
    return str(PurePath(*parts_a[shared:])), str(PurePath(*parts_b[shared:]))
