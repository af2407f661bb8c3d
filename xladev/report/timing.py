"""Where a run's time went, read from whichever of its inputs measures it best.

- an event log measures every compile, execution, transfer, traced op and CPU fallback: exact;
- xladev's PT_XLA_DEBUG end-of-run summary prints the same breakdown, rounded;
- a metrics report has the accumulated compile, execution, transfer and tracing times, but not the
  run's wall time: the parts are given, and their shares of the run and the remainder are not in this input (an
  estimate from the metrics' sample rates would be a different number from the event log's of the same run).

The split and the prices of findings are `xladev.analysis.wall_time`'s, shared with the TUI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from xladev.analysis import wall_time
from xladev.report.model import SourceResult
from xladev.schema.metric_names import metric_names

if TYPE_CHECKING:  # pragma: no cover
    from xladev.report.run_facts import RunFacts

# Part -> the metrics that time it, newest name first (XRT-era names last).
_METRIC_PARTS = {
    "tracing": ("LazyTracing",),
    "compile": metric_names("CompileTime") + ("EagerOpCompileTime",),
    "execute": metric_names("ExecuteTime") + ("EagerOpExecuteTime",),
    "to_device": metric_names("TransferToDeviceTime"),
    "from_device": metric_names("TransferFromDeviceTime"),
}


def metrics_breakdown(source: SourceResult) -> wall_time.TimeBreakdown | None:
    """The breakdown of a metrics report's last snapshot; None when it times nothing.

    Args:
      source: an input with at least one complete metrics report.

    Returns:
      The breakdown: the parts as accumulated, with no wall time (not in this input), or None when the report has
      no time metric.
    """
    final = source.final
    if final is None:
        return None
    totals = {}
    for part, names in _METRIC_PARTS.items():
        block = next((final.metrics[name] for name in names if name in final.metrics), None)
        if block is not None and block.accumulator is not None:
            totals[part] = block.accumulator
    if not totals:
        return None
    steps = int(final.counters.get("MarkStep", 0)) or (final.step or 0)
    return wall_time.from_metric_totals(totals, steps=steps, basis=(
        "the metrics report's accumulated times; the run's wall time is not in this input, so neither is a part's "
        "share of it nor the remainder"))


def group_breakdown(sources: list[SourceResult], primary: SourceResult | None) -> wall_time.TimeBreakdown | None:
    """The best breakdown of one run's inputs: an event log's, else xladev's summary's, else the metrics'."""
    for source in sources:
        if source.time is not None and not source.time.is_empty():
            return source.time
    for source in sources:
        summary = source.debug.run_summary if source.debug is not None else None
        if summary is not None and summary.get("time") is not None:
            return summary["time"]
    for source in [primary] + [s for s in sources if s is not primary]:
        if source is not None and source.final is not None:
            breakdown = metrics_breakdown(source)
            if breakdown is not None:
                return breakdown
    return None


def cost_facts(facts: RunFacts | None, sources: list[SourceResult],
               breakdown: wall_time.TimeBreakdown) -> wall_time.CostFacts:
    """The numbers `wall_time.price` needs, from the run's facts and inputs."""
    out = wall_time.CostFacts(breakdown=breakdown)
    if facts is None:
        return out
    out.compiles = facts.compiles
    out.compiles_at_warmup = facts.compiles_at_warmup
    logged = [source for source in sources if source.compile_ns_by_step]
    if logged:
        by_step = logged[0].compile_ns_by_step
        out.compile_ns_after_warmup = float(sum(ns for step, ns in by_step if step >= facts.warmup_steps))
        out.compiles_at_warmup = sum(1 for step, _ in by_step if step < facts.warmup_steps)
        out.fallback_transfer_ns = logged[0].fallback_transfer_ns
    elif facts.source is not None and facts.source.series is not None and len(facts.source.series) > 1:
        at_warmup = facts.source.series.at_warmup
        final = facts.source.series.last
        if at_warmup is not None and final is not None:
            out.compile_ns_after_warmup = max(0.0, final.get("compile_time_ns", 0.0)
                                              - at_warmup.get("compile_time_ns", 0.0))
    for source in sources:
        if source.fallback_ns_by_op:
            out.fallback_ns_by_op = dict(source.fallback_ns_by_op)
        if source.final is not None:
            out.persistent_cache_hits = max(out.persistent_cache_hits,
                                            int(source.final.counters.get("PersistentCacheHit", 0)))
    return out
