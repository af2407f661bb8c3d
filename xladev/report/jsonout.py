"""The JSON form of a report (schema ``xladev.report/1``), documented in docs/report.md: one more renderer of the
`Document`, whose ``data()`` gives the machine-readable numbers this module gathers.

Values are in base units: nanoseconds for time metrics, bytes for byte metrics, plain numbers
otherwise; each metric says which in ``unit``. Missing or not-a-number values are ``null``.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from xladev.report.run_findings import auto_metrics_lines

SCHEMA = "xladev.report/1"
COMPARE_SCHEMA = "xladev.report.compare/1"
MAX_COMPILE_EVENTS_IN_JSON = 1000
UNITS = {"time": "ns", "bytes": "bytes", "value": ""}


def _clean(value):
    """Makes a value JSON-safe: nan/inf become None, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(key): _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    if value is pd.NA:
        return None
    return value


def _records(frame: pd.DataFrame, limit: int | None = None) -> list[dict]:
    if limit is not None:
        frame = frame.head(limit)
    return [_clean(dict(zip(frame.columns, row))) for row in frame.itertuples(index=False)]


def _inputs(report) -> list[dict]:
    return [{"path": source.path, "name": source.name, "rank": source.rank, "reader": source.input_kind,
             "contents": source.describe_kinds(), "bytes": source.size_bytes, "lines": source.lines,
             "reports": source.snapshots, "step_records": source.step_records,
             "debug_compiles": source.debug.compiles if source.debug else 0,
             "debug_executions": source.run.executions if source.run is not None else 0,
             "warning_count": source.warning_count, "damage": source.damage, "problem": source.problem,
             # Who ran the graphs when not xladev (an `xladev attach` log's torch_xla), and what its log cannot hold.
             "runtime": source.runtime, "not_recorded": list(source.absent)}
            for source in report.sources]


def summary_numbers(report) -> dict:
    """The canonical numbers of the report's main metrics input, with its name under ``source``."""
    primary = report.primary_metrics(report.sources)
    if primary is None:
        return {"source": None}
    return _clean({"source": primary.name, **report.final_numbers(primary)})


def _metrics(report) -> list[dict]:
    rows = []
    for source in report.sources:
        if source.final is None:
            continue
        for block in source.final.metrics.values():
            rows.append({"source": source.name, "rank": source.rank, "name": block.name, "kind": block.kind,
                         "unit": UNITS.get(block.kind, ""), "total_samples": block.total_samples,
                         "accumulator": block.accumulator, "value_rate": block.value_rate, "rate": block.rate,
                         "mean": block.mean, "stddev": block.stddev,
                         "percentiles": dict(block.percentiles), "line": block.line})
    return _clean(rows)


def _steps(report) -> list[dict]:
    series = []
    for source in report.sources:
        if source.series is None or not len(source.series):
            continue
        series.append({"source": source.name, "rank": source.rank, "reports": len(source.series),
                       "stride": source.series.stride, "columns": source.series.columns()})
    return _clean(series)


def report_data(report, verdict: str, headline: str) -> dict:
    """The JSON form of a report (its Document's ``data()``).

    Args:
      report: a `xladev.report.Report`.
      verdict: the Document's verdict.
      headline: the Document's headline.

    Returns:
      A dict ready for ``json.dumps`` (no nan or inf inside).
    """
    compile_events = report.compile_events
    return {
        "schema": SCHEMA,
        "verdict": verdict,
        "headline": headline,
        "inputs": _clean(_inputs(report)),
        "summary": summary_numbers(report),
        "findings": _clean([finding.to_dict() for finding in report.findings]),
        "time": _clean([{"rank": rank, **breakdown.to_dict()} for rank, breakdown in report.time_breakdowns.items()]),
        "auto_metrics": auto_metrics_lines(report),
        "metrics": _metrics(report),
        "counters": _records(report.counters),
        "steps": _steps(report),
        "compile_sites": _records(report.compile_sites),
        "causes": _records(report.causes),
        "compile_events": _records(compile_events, MAX_COMPILE_EVENTS_IN_JSON),
        "compile_events_total": sum(source.debug.compiles for source in report.sources if source.debug),
        "profiler_lines": _records(report.profiler_lines),
        "fallback_sites": _records(report.fallback_sites),
        "profiles": [{"rank": source.rank, "path": p.path, "logdir": p.logdir, "first_step": p.first_step,
                      "last_step": p.last_step, "how": p.how, "open": p.open_command()}
                     for source in report.sources for p in source.profiles],
        "warnings": [{"source": w.source, "line": w.line, "message": w.message} for w in report.warnings],
        "warning_count": report.warning_count,
    }


def comparison_data(comparison) -> dict:
    """The JSON form of a comparison (schema ``xladev.report.compare/1``; its Document's ``data()``)."""
    return {
        "schema": COMPARE_SCHEMA,
        "a": {"name": comparison.a.name, "verdict": comparison.a.verdict(), "summary": summary_numbers(comparison.a),
              "findings": _clean([finding.to_dict() for finding in comparison.a.findings])},
        "b": {"name": comparison.b.name, "verdict": comparison.b.verdict(), "summary": summary_numbers(comparison.b),
              "findings": _clean([finding.to_dict() for finding in comparison.b.findings])},
        "rows": _records(comparison.rows),
    }


def dumps(data: dict) -> str:
    """Serialises a JSON form strictly (no NaN), indented, ending with a newline."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_json(document) -> str:
    """The JSON renderer: a Document's machine-readable form (``document.data()``), serialised."""
    return dumps(document.data())
