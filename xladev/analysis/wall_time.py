"""Where a run's wall time went, and what each finding costs and its fix would save.

One shared leaf, so the report and the TUI split time and price findings the same way:

- `TimeBreakdown`: the run's wall time split into tracing, XLA compile, execution, host↔device
  transfers and CPU fallback ops, and the remainder (input pipeline, Python), overall and per step.
  An event log measures every part (exact); a metrics report or a debug log gives what it printed
  (estimated, and marked so).
- `CostFacts` and `price`: the time a finding cost and an estimate of what its fix saves, so the
  findings can be ranked by time.

Pure functions of numbers: nothing here reads files or imports torch, jax or the runtime.
"""

from __future__ import annotations

import dataclasses
import math

from xladev import analysis
from xladev.schema.units import compact_time_ns, parse_compact_time

# The parts of a step's time, in the order a step spends them.
PARTS = ("tracing", "compile", "execute", "to_device", "from_device", "fallback")
LABELS = {
    "tracing": "tracing (Python, lazy ops)",
    "compile": "XLA compile",
    "execute": "execution",
    "to_device": "host→device transfers",
    "from_device": "device→host transfers",
    "fallback": "CPU fallback ops",
    "other": "other (input pipeline, Python)",
}
# Column headings where space is short (per-step tables, the TUI).
SHORT_LABELS = {"tracing": "tracing", "compile": "compile", "execute": "execute", "to_device": "to device",
                "from_device": "from device", "fallback": "fallback", "other": "other"}
# Compile time above this share of the wall time makes the persistent compilation cache worth it.
COMPILE_DOMINATES = 0.5
# Buckets a changing shape is padded to, in the recompilation saving.
SHAPE_BUCKETS = 3
# A finding that cost less than this share of the run is ranked after those of unknown cost.
NEGLIGIBLE_SHARE = 0.01
# Parts may overlap (an asynchronous execution runs while Python traces); a sum above the wall by
# more than this share is said so rather than hidden.
OVERLAP_TOLERANCE = 0.02


@dataclasses.dataclass
class StepTime:
    """One step's time.

    Attributes:
      step: the step number (0-based, as the event log counts).
      wall_ns: from the end of the previous step to the end of this one.
      parts: nanoseconds per part of `PARTS` spent in the step.
    """

    step: int
    wall_ns: float
    parts: dict[str, float] = dataclasses.field(default_factory=dict)

    def other_ns(self) -> float:
        """The step's time outside every measured part (never below 0)."""
        return max(0.0, self.wall_ns - sum(self.parts.values()))


@dataclasses.dataclass
class TimeBreakdown:
    """A run's wall time by part.

    Attributes:
      parts: nanoseconds per part of `PARTS`; a part the input does not measure is absent.
      wall_ns: the run's wall time, None when the input cannot tell.
      steps: steps completed (0 when unknown).
      exact: True when every number given was measured (an event log, a metrics report's accumulators), False when
        estimated or rounded.
      basis: one line saying where the numbers come from.
      step_times: per-step times (event logs; bounded), in step order.
    """

    parts: dict[str, float] = dataclasses.field(default_factory=dict)
    wall_ns: float | None = None
    steps: int = 0
    exact: bool = False
    basis: str = ""
    step_times: list[StepTime] = dataclasses.field(default_factory=list)

    @property
    def measured_ns(self) -> float:
        """The sum of the measured parts."""
        return float(sum(self.parts.values()))

    def is_empty(self) -> bool:
        """True when the input measured nothing."""
        return not self.parts and self.wall_ns is None

    def other_ns(self) -> float | None:
        """Wall time outside every measured part (input pipeline, Python); None when the wall is unknown."""
        if self.wall_ns is None:
            return None
        return max(0.0, self.wall_ns - self.measured_ns)

    def overlaps(self) -> bool:
        """True when the parts add up to more than the wall time (asynchronous work overlapped)."""
        return self.wall_ns is not None and self.measured_ns > self.wall_ns * (1 + OVERLAP_TOLERANCE)

    def share(self, part: str) -> float | None:
        """A part's share of the wall time; None when the input does not hold the wall time."""
        return self.share_of(self.parts[part]) if part in self.parts else None

    def share_of(self, ns: float) -> float | None:
        """`ns` as a share of the wall time; None when the input does not hold the wall time (a share of something
        else would be a different number from an input that holds it)."""
        return min(1.0, ns / self.wall_ns) if self.wall_ns else None

    def rows(self) -> list[tuple[str, str, float | None, float | None, float | None]]:
        """``(part, label, total ns, share of wall, mean per step ns)`` per part, then the remainder."""
        whole = self.wall_ns if self.wall_ns else None
        out = []
        for part in PARTS:
            if part in self.parts:
                total = self.parts[part]
                out.append((part, LABELS[part], total, total / whole if whole else None,
                            total / self.steps if self.steps else None))
        other = self.other_ns()
        out.append(("other", LABELS["other"], other, other / whole if whole and other is not None else None,
                    other / self.steps if self.steps and other is not None else None))
        return out

    def headline(self) -> str:
        """One line: the wall time and its largest parts, e.g. ``250 s: XLA compile 229 s (92%), ...``."""
        if self.is_empty():
            return "no times in this input"
        ranked = sorted(((total, label, share) for part, label, total, share, _ in self.rows()
                         if total is not None and total > 0), reverse=True)[:3]
        parts = ", ".join(f"{label} {compact_time_ns(total)}" + (f" ({share:.0%})" if share is not None else "")
                          for total, label, share in ranked)
        wall = f"{compact_time_ns(self.wall_ns)} wall" if self.wall_ns is not None else "wall time not in this input"
        return f"{wall}: {parts}" + ("" if self.exact else " (estimated)")

    def typical_steps(self, warmup_steps: int) -> list[tuple[str, StepTime]]:
        """The first step, the median step after warm-up and the slowest step after warm-up."""
        if not self.step_times:
            return []
        out = [("first step", self.step_times[0])]
        later = [s for s in self.step_times if s.step >= warmup_steps] or self.step_times[1:]
        if later:
            ordered = sorted(later, key=lambda s: s.wall_ns)
            median, slowest = ordered[len(ordered) // 2], ordered[-1]
            out.append(("median after warm-up" if later[0].step >= warmup_steps else "median", median))
            if slowest is not median:
                out.append(("slowest after warm-up" if later[0].step >= warmup_steps else "slowest", slowest))
        return out

    def to_dict(self) -> dict:
        """The breakdown as a JSON-ready dict (per-step times summarised by `typical_steps`)."""
        return {"wall_ns": self.wall_ns, "parts": dict(self.parts), "other_ns": self.other_ns(), "steps": self.steps,
                "exact": self.exact, "basis": self.basis, "overlaps": self.overlaps(),
                "typical_steps": [{"label": label, "step": s.step, "wall_ns": s.wall_ns, "parts": dict(s.parts)}
                                  for label, s in self.typical_steps(10)]}


# ---------------------------------------------------------------- the end-of-run summary's line
# xladev's PT_XLA_DEBUG end-of-run summary carries the breakdown as one line; written and read here.
SUMMARY_PREFIX = "Time: "


def summary_line(breakdown: TimeBreakdown) -> str:
    """``Time: 12.3 s wall; tracing (Python, lazy ops) 1.2 s; XLA compile 9.01 s; ...; other (...) 1.1 s``."""
    items = [f"{compact_time_ns(breakdown.wall_ns)} wall"]
    items += [f"{label} {compact_time_ns(total)}" for _, label, total, _, _ in breakdown.rows() if total is not None]
    return SUMMARY_PREFIX + "; ".join(items)


_PART_OF_LABEL = {label: part for part, label in LABELS.items()}


def parse_summary_line(text: str, steps: int = 0) -> TimeBreakdown | None:
    """The breakdown of a `summary_line` text (rounded as printed); None when `text` is not one."""
    if not text.startswith(SUMMARY_PREFIX):
        return None
    wall = None
    parts: dict[str, float] = {}
    for item in text[len(SUMMARY_PREFIX):].split("; "):
        if item.endswith(" wall"):
            wall = parse_compact_time(item[:-len(" wall")])
            continue
        for label, part in _PART_OF_LABEL.items():
            if item.startswith(label + " ") and part != "other":
                ns = parse_compact_time(item[len(label) + 1:])
                if ns is not None:
                    parts[part] = ns
    if wall is None:
        return None
    return TimeBreakdown(parts=parts, wall_ns=wall, steps=steps, exact=False,
                         basis="xladev's end-of-run summary (PT_XLA_DEBUG_LEVEL), rounded as printed")


def from_metric_totals(totals: dict[str, float | None], *, steps: int, basis: str) -> TimeBreakdown:
    """A breakdown of a report's accumulated times, without the wall time (a metrics report does not hold it).

    Args:
      totals: nanoseconds per part, None or absent for what the input did not print.
      steps: steps completed, 0 when unknown.
      basis: one line saying where the numbers come from.

    Returns:
      The breakdown: exact, as the accumulators measured every span, and with no wall time.
    """
    parts = {part: float(value) for part, value in totals.items() if part in PARTS and value is not None}
    return TimeBreakdown(parts=parts, wall_ns=None, steps=steps, exact=True, basis=basis)


@dataclasses.dataclass
class CostFacts:
    """The numbers the prices need, from any input.

    Attributes:
      breakdown: the run's time breakdown.
      compiles: graphs compiled.
      compiles_at_warmup: graphs compiled by the end of warm-up, None when unknown.
      compile_ns_after_warmup: compile time after warm-up, None when unknown.
      persistent_cache_hits: compiles served by the persistent cache (0 when none or unknown).
      fallback_transfer_ns: transfer time spent moving CPU fallback operands, when measured.
      fallback_ns_by_op: CPU kernel time per fallback op (``aten::op.overload``), when measured.
    """

    breakdown: TimeBreakdown
    compiles: int = 0
    compiles_at_warmup: int | None = None
    compile_ns_after_warmup: float | None = None
    persistent_cache_hits: int = 0
    fallback_transfer_ns: float = 0.0
    fallback_ns_by_op: dict = dataclasses.field(default_factory=dict)

    def part(self, name: str) -> float | None:
        return self.breakdown.parts.get(name)


def _saves(ns: float | None) -> str:
    return f"saves ~{compact_time_ns(ns)}" if ns is not None and ns > 0 else ""


def _recompilation_price(finding, facts: CostFacts) -> tuple[float | None, str]:
    compile_ns = facts.part("compile")
    if compile_ns is None or not facts.compiles:
        return None, ""
    mean = compile_ns / facts.compiles
    cost = facts.compile_ns_after_warmup
    graphs = facts.compiles_at_warmup
    steps = facts.breakdown.steps
    basis = ""
    if steps and facts.compiles >= steps:
        # A run that compiled in every step (warm-up included) recompiled all along, so everything beyond a few
        # graphs is recompilation, from any input that holds the compile count and time (a single report too).
        graphs = min(facts.compiles, SHAPE_BUCKETS)
        cost = mean * (facts.compiles - graphs)
    elif cost is None and graphs is not None:
        # The input tells which compiles came after warm-up (a debug log beside a single report), not their times.
        cost = mean * (facts.compiles - graphs)
        basis = "at the run's mean compile time; "
    burst = float(finding.numbers.get("burst_compile_ns", 0))
    if burst > (cost or 0.0):  # steps that compiled tens of graphs each (a last report cut short may hold most)
        return burst, "values kept on the device and fixed shapes in that loop: " + _saves(burst)
    repeated = int(finding.numbers.get("repeated_recompiles", 0))
    if repeated and mean * repeated > (cost or 0.0):  # recompiles inside warm-up, each for a new shape or constant
        cost = mean * repeated
        graphs = max(1, facts.compiles - repeated)
    if cost is None:
        return None, (f"not in this input: a single report cannot tell which of the {facts.compiles} compiles came "
                      "after warm-up (XLA_METRICS_FILE or a PT_XLA_DEBUG_LEVEL=2 log beside it can)")
    if "Pad or bucket" in finding.fix:
        after, how = (graphs or 1) + SHAPE_BUCKETS - 1, f"pad to {SHAPE_BUCKETS} buckets"
    else:
        after, how = graphs or 1, "static shapes"
    # The compiles avoided are the recompiles' share beyond the few graphs the fix still compiles.
    recompiles = facts.compiles - (graphs or 1)
    saved = cost * max(0, facts.compiles - after) / recompiles if recompiles > 0 else 0.0
    if saved <= 0:  # the fix would compile as many graphs (a few shapes, already within the buckets): no saving
        return cost, basis.removesuffix("; ")
    return cost, f"{basis}{how} → ~{after} compiles, " + _saves(min(saved, cost))


def _growth_price(finding, facts: CostFacts) -> tuple[float | None, str]:
    """A graph grown without a barrier costs its tracing and compile time: the whole run's when it never marked a
    step, else the steps it grew in (measured per step in an event log; unknown from other inputs)."""
    whole_run = finding.numbers.get("whole_run") or (facts.breakdown.steps == 0 and not facts.breakdown.step_times)
    if whole_run:
        spent = {part: facts.part(part) or 0.0 for part in ("tracing", "compile")}
    else:
        step = finding.numbers.get("step")
        grown = [s for s in facts.breakdown.step_times if s.step == step]
        spent = {part: sum(s.parts.get(part, 0.0) for s in grown) for part in ("tracing", "compile")}
    cost = sum(spent.values())
    if not cost:
        return None, ""
    return cost, (f"{LABELS['compile']} {compact_time_ns(spent['compile'])} + tracing "
                  f"{compact_time_ns(spent['tracing'])} for one ever-larger graph; a barrier per iteration compiles "
                  "one step's graph once and runs it from the cache: saves most of it")


def _prices(finding, facts: CostFacts) -> tuple[float | None, str]:
    rule = finding.rule
    if rule == "recompilation":
        return _recompilation_price(finding, facts)
    if rule == "graph-growing":
        return _growth_price(finding, facts)
    if rule == "host-transfers":
        cost = facts.part("from_device")
        return cost, ("reading values once per epoch (or in a step closure) " + _saves(cost)) if cost else ""
    if rule == "cpu-fallback":  # one finding per op: its own kernel time, and its share of the copies
        fallback = facts.part("fallback")
        if not fallback:
            return None, ""
        own = sum(ns for op, ns in facts.fallback_ns_by_op.items() if op.split(".")[0] == finding.subject.split(".")[0])
        if facts.fallback_ns_by_op and not own:
            return None, ""
        share = own / fallback if own else 1.0
        cost = share * (fallback + facts.fallback_transfer_ns)
        return cost, "lowered ops run inside the graph: " + _saves(cost)
    if rule in ("slow-compile", "compile-time"):
        cost = facts.part("compile")
        return cost, ("a restarted run loads its graphs from the persistent cache: " + _saves(cost)) if cost else ""
    if rule in ("slow-execute", "huge-graph"):
        return facts.part("execute"), ""
    if rule == "device-data-cache-miss":
        return facts.part("to_device"), ""
    return None, ""


def price(findings: list, facts: CostFacts) -> list:
    """Sets each finding's ``cost_ns`` and ``saving`` from `facts`.

    Args:
      findings: `xladev.analysis.Finding` objects.
      facts: the run's numbers.

    Returns:
      The same findings.
    """
    for finding in findings:
        cost, saving = _prices(finding, facts)
        if cost is not None and cost > 0:
            finding.cost_ns = float(cost)
            finding.saving = saving
            share = facts.breakdown.share_of(cost)
            finding.numbers["cost_ns"] = round(float(cost))
            if share is not None:
                finding.numbers["cost_share"] = round(share, 4)
        elif saving.startswith("not in this input"):  # say why there is no price, not nothing
            finding.saving = saving
    return findings


def ranked(findings: list, order: list[str]) -> list:
    """Findings in the order to act on them.

    Failures (a graph that failed, or ran out of memory) and a job that stopped first; then the problems (warnings and errors) by the time they cost, most first, and
    those whose cost the input does not measure by severity; then the notes the same way.

    Args:
      findings: `xladev.analysis.Finding` objects, priced by `price`.
      order: rule names in their order of importance, to break ties.

    Returns:
      A new sorted list.
    """
    def key(finding):
        failed = (finding.rule.endswith("-failure") or finding.rule in analysis.STOPPED_RULES
                  or finding.rule == analysis.OUT_OF_MEMORY)
        severity = analysis.severity_rank(finding.severity)
        cost = finding.cost_ns or 0.0
        share = finding.numbers.get("cost_share")
        # A cost the run barely felt ranks after the problems whose cost the input cannot measure.
        bucket = 1 if not cost else 2 if isinstance(share, float) and share < NEGLIGIBLE_SHARE else 0
        position = order.index(finding.rule) if finding.rule in order else len(order)
        return (not failed, severity < analysis.severity_rank(analysis.WARNING), bucket, -cost, -severity, position,
                finding.subject)
    return sorted(findings, key=key)


def compile_dominates(breakdown: TimeBreakdown, persistent_cache_hits: int = 0) -> bool:
    """True when compiling took most of the run and the persistent cache was not already serving it; False where
    the input does not hold the run's wall time (compiling's share of the parts alone says nothing of the run:
    a short run's compile always outweighs its executions)."""
    share = breakdown.share("compile")
    return share is not None and share >= COMPILE_DOMINATES and persistent_cache_hits == 0


def with_cache_advice(findings: list, facts: CostFacts) -> list:
    """When compile time dominates, the compile findings advise the persistent compilation cache.

    The advice joins the recompilation or slow-compile finding; a run with neither gets the
    ``compile-time`` finding of its own. A run whose graph grew without a barrier gets neither: its
    compile time is that finding's cost, and a barrier, not a cache, is the fix.

    Args:
      findings: the run's findings.
      facts: the run's numbers.

    Returns:
      The findings, with the advice added where it applies.
    """
    if not compile_dominates(facts.breakdown, facts.persistent_cache_hits):
        return findings
    if any(finding.rule == "graph-growing" for finding in findings):
        return findings  # the compile is that graph's: no barrier, not a missing cache
    share = facts.breakdown.share("compile") or 0.0
    advised = False
    for finding in findings:
        if finding.rule in ("recompilation", "slow-compile"):
            finding.fix = f"{finding.fix} {analysis.persistent_cache_advice(share)}"
            advised = True
    if not advised:
        findings.append(analysis.compile_time_finding(compile_ns=facts.part("compile") or 0.0, share=share,
                                                   compiles=facts.compiles))
    return findings
