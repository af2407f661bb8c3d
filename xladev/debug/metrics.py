"""Counters and metrics, PyTorch/XLA style: `import xladev.debug.metrics as met`.

    print(met.metrics_report())            # the full report, PyTorch/XLA's grammar
    print(met.short_metrics_report())      # the usual suspects, plus any CPU fallback
    before = met.snapshot(); train_one_epoch(); print(met.diff(before, met.snapshot()))
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any

from xladev._flags import config
from xladev.schema.metrics_text import report_text
from xladev.sinks.metrics_registry import SNAPSHOT_SCHEMA, Registry, registry

__all__ = [
    "metrics_report", "short_metrics_report", "counter_names", "counter_value", "metric_names", "metric_data",
    "clear_counters", "clear_metrics", "clear_all", "executed_fallback_ops", "snapshot", "diff", "to_dataframe",
    "Snapshot",
]

_SHORT_COUNTERS = ("CachedCompile", "MarkStep")
_SHORT_METRICS = ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime")


def _settle_executions() -> None:
    """Counts the graphs still running first, so a query right after `mark_step()` sees its execution,
    and the ops recorded so far, so a query in mid-step sees them (as PyTorch/XLA counts them)."""
    execution_module = sys.modules.get("xladev.runtime.execute.execution")
    if execution_module is not None:
        execution_module.execution.settle()
        execution_module.execution.publish_recorded_ops()


def _settled_copy():
    _settle_executions()
    return registry.copy()


def metrics_report() -> str:
    """The full report: every metric block, then every non-zero counter."""
    counters, metrics = _settled_copy()
    return report_text(counters, metrics, config.metrics_percentiles)


def short_metrics_report(counter_names: list[str] | None = None, metric_names: list[str] | None = None) -> str:
    """A short report: the named counters and metrics, plus every non-zero `aten::` counter.

    Args:
      counter_names: counters to show; CachedCompile and MarkStep when None.
      metric_names: metrics to show; CompileTime, ExecuteTime and the transfer times when None.
    """
    counters, metrics = _settled_copy()
    wanted_counters = set(counter_names if counter_names is not None else _SHORT_COUNTERS)
    wanted_counters |= {n for n in counters if n.startswith("aten::")}
    wanted_metrics = set(metric_names if metric_names is not None else _SHORT_METRICS)
    return report_text(counters, metrics, config.metrics_percentiles, metric_names=wanted_metrics,
                       counter_names=wanted_counters)


def counter_names() -> list[str]:
    """Names of the counters that have been incremented."""
    return sorted(_settled_copy()[0])


def counter_value(name: str) -> int | None:
    """The value of a counter, or None if it was never incremented."""
    return _settled_copy()[0].get(name)


def metric_names() -> list[str]:
    return sorted(_settled_copy()[1])


def metric_data(name: str) -> tuple[int, float, list[tuple[int, float]]] | None:
    """`(total_samples, accumulator, samples)` of a metric, samples as `(timestamp_ns, value)`; None if unknown."""
    metric = _settled_copy()[1].get(name)
    if metric is None:
        return None
    return metric.total_samples, metric.accumulator, list(metric.samples)


def clear_counters() -> None:
    _settle_executions()
    registry.clear_counters()


def clear_metrics() -> None:
    _settle_executions()
    registry.clear_metrics()


def clear_all() -> None:
    _settle_executions()
    registry.clear_counters()
    registry.clear_metrics()


def executed_fallback_ops() -> list[str]:
    """Ops that ran on the CPU fallback, as `aten::op.overload` counter names."""
    return sorted(n for n, v in _settled_copy()[0].items() if n.startswith("aten::") and v)


@dataclasses.dataclass
class Snapshot:
    """A plain, JSON-ready copy of every counter and metric at one moment.

    Attributes:
      time_ns: wall-clock time of the snapshot.
      counters: name → value.
      metrics: name → {"kind", "total_samples", "accumulator", "samples": [[timestamp_ns, value], ...]}.
    """

    time_ns: int
    counters: dict[str, int]
    metrics: dict[str, dict[str, Any]]
    schema: str = SNAPSHOT_SCHEMA

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Snapshot":
        if data.get("schema") != SNAPSHOT_SCHEMA:
            raise ValueError(f"not an xladev metrics snapshot (schema {data.get('schema')!r})")
        return cls(int(data["time_ns"]), {k: int(v) for k, v in data["counters"].items()},
                   {k: dict(v) for k, v in data["metrics"].items()})

    def report(self) -> str:
        """The metrics report text of this snapshot."""
        reg = Registry()
        for name, m in self.metrics.items():
            for stamp, value in m["samples"]:
                reg.add(name, m["kind"], value, stamp)
            reg.metrics[name].total_samples = m["total_samples"]
            reg.metrics[name].accumulator = m["accumulator"]
        reg.counters.update(self.counters)
        return report_text(*reg.copy(), config.metrics_percentiles)


def snapshot() -> Snapshot:
    """Every counter and metric now, as a Snapshot."""
    counters, metrics = _settled_copy()
    return Snapshot(
        time.time_ns(), counters,
        {k: {"kind": m.kind, "total_samples": m.total_samples, "accumulator": m.accumulator,
             "samples": [list(s) for s in m.samples]} for k, m in metrics.items()},
    )


def diff(before: Snapshot, after: Snapshot) -> Snapshot:
    """What happened between two snapshots: counter deltas, and per metric the new samples.

    Returns:
      A Snapshot whose counters are differences (zero deltas dropped) and whose metrics hold the
      samples added after `before` (by count), with their accumulators.
    """
    counters = {k: v - before.counters.get(k, 0) for k, v in after.counters.items() if v - before.counters.get(k, 0)}
    metrics = {}
    for name, m in after.metrics.items():
        old = before.metrics.get(name, {"total_samples": 0, "accumulator": 0.0})
        added = m["total_samples"] - old["total_samples"]
        if added <= 0:
            continue
        samples = m["samples"][-added:] if added <= len(m["samples"]) else m["samples"]
        metrics[name] = {"kind": m["kind"], "total_samples": added,
                         "accumulator": m["accumulator"] - old["accumulator"], "samples": samples}
    return Snapshot(after.time_ns, counters, metrics)


def to_dataframe(snap: Snapshot | None = None):
    """A pandas DataFrame with one row per counter and metric.

    Columns: name, type (counter/metric), kind (time/bytes/value/count), total_samples, value
    (counter value, or the metric's accumulator), mean, and the p50/p90/p99 of kept samples.
    """
    import pandas as pd

    snap = snap or snapshot()
    rows = []
    for name, value in sorted(snap.counters.items()):
        rows.append({"name": name, "type": "counter", "kind": "count", "total_samples": None, "value": value,
                     "mean": None, "p50": None, "p90": None, "p99": None})
    for name, m in sorted(snap.metrics.items()):
        values = sorted(v for _, v in m["samples"])
        pick = (lambda p: values[min(int(p * len(values)), len(values) - 1)]) if values else (lambda p: None)
        rows.append({"name": name, "type": "metric", "kind": m["kind"], "total_samples": m["total_samples"],
                     "value": m["accumulator"], "mean": m["accumulator"] / m["total_samples"] if m["total_samples"] else None,
                     "p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)})
    return pd.DataFrame(rows)
