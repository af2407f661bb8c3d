"""Findings and the numbers every rule shares: severities, verdict labels, thresholds."""

from __future__ import annotations

import dataclasses

from xladev.analysis import fallback_reasons
from xladev.schema import units
from xladev.schema.counters import ITEM_COUNTER  # noqa: F401  (the report's rules use it)

INFO = "info"
WARNING = "warning"
ERROR = "error"
SEVERITIES = (INFO, WARNING, ERROR)
# A report's verdict: its worst finding's severity, "healthy" when there is none, "unknown" when the
# input cannot show whether the run is healthy (no complete record, no step count). Printed as these labels.
UNKNOWN = "unknown"
# The findings that say why a verdict is unknown, the first found giving the headline.
UNKNOWN_RULES = ("no-complete-record", "not-enough-evidence")
VERDICT_LABELS = {"healthy": "HEALTHY", INFO: "HEALTHY (notes)", UNKNOWN: "UNKNOWN", WARNING: "WARNING",
                  ERROR: "ERROR"}

# PyTorch/XLA's auto-metrics thresholds (torch_xla/csrc/runtime/metrics_analysis.cc).
WARMUP_STEPS = 10
COMPILE_FREQUENCY_RATIO = 0.5
TRANSFER_FREQUENCY_RATIO = 0.5
COMPILE_TOO_SLOW_NS = 300e9
EXECUTE_TOO_SLOW_NS = 30e9
PROFILER_PREFIX = "pt-xla-profiler: "

# xladev's own thresholds.
# The first steps do one-time work, set-up rather than a habit of the loop: DDP's constructor broadcasts and
# reads, its second forward rebuilds its buckets, the optimizer's first step creates its state. Reads and
# recompiles there (and reads after the last barrier: final prints) are not judged per step.
SETUP_STEPS = 2
HUGE_GRAPH_NODES = 100_000
GRAPH_GROWTH_RATIO = 1.5
CACHE_MISS_PER_STEP = 1.0
FALLBACK_PER_STEP_WARNING = 0.5
# Ops recorded with no barrier before the runtime warns that the pending graph keeps growing (the
# default of XLADEV_GRAPH_GROWTH_WARNING), or this many times the largest step seen so far, whichever
# is larger: a legitimately big step must not trip it, a loop without a barrier always will.
PENDING_OPS_WARNING = 50_000
PENDING_OPS_STEP_FACTOR = 4
GRAPH_GROWING = "Graph growing without a barrier"

# The fallback table lives in fallback_reasons; these two names stay for the report and the tests.
op_base_name = fallback_reasons.op_base_name
fallback_remedy = fallback_reasons.remedy


def severity_rank(severity: str) -> int:
    """0, 1 or 2 for info, warning or error (raises ValueError for anything else)."""
    return SEVERITIES.index(severity)


@dataclasses.dataclass
class Finding:
    """One diagnosed problem (or the statement that the run is healthy).

    Attributes:
      rule: a stable identifier, e.g. ``recompilation`` or ``cpu-fallback``.
      severity: ``info``, ``warning`` or ``error``.
      title: one line saying what is wrong, with the key number.
      detail: why it matters and what the numbers mean.
      fix: the concrete change to make.
      evidence: facts behind the finding, one short line each.
      numbers: the same facts as machine-readable numbers.
      sources: where the evidence was read, as ``file:line``.
      subject: what the finding is about when a rule fires several times (an op, a site, a rank).
      cost_ns: the wall time the problem cost, when the input measures it (`xladev.analysis.wall_time.price`).
      saving: what the fix would save, e.g. ``pad to 3 buckets → ~3 compiles, saves ~229 s``.
    """

    rule: str
    severity: str
    title: str
    detail: str
    fix: str
    evidence: list[str] = dataclasses.field(default_factory=list)
    numbers: dict[str, float | int | str] = dataclasses.field(default_factory=dict)
    sources: list[str] = dataclasses.field(default_factory=list)
    subject: str = ""
    cost_ns: float | None = None
    saving: str = ""

    def cost_text(self) -> str:
        """``3.82 s (49% of the run); pad to 3 buckets → ~4 compiles, saves ~2.73 s``; why there is no price when
        the input lacks it (``not in this input: …``); else empty."""
        if not self.cost_ns:
            return self.saving if self.saving.startswith("not in this input") else ""
        share = self.numbers.get("cost_share")
        text = units.compact_time_ns(self.cost_ns) + (f" ({share:.0%} of the run)" if isinstance(share, float) else "")
        return f"{text}; {self.saving}" if self.saving else text

    def to_dict(self) -> dict:
        """Returns the finding as a JSON-ready dict."""
        return dataclasses.asdict(self)


def headline(verdict: str, findings: list[Finding]) -> str:
    """The one sentence a report (and the TUI) leads with: the verdict's reason or the most important problem."""
    problems = [f for f in findings if f.rule != "healthy"]
    if verdict == UNKNOWN:
        reason = next((f for rule in UNKNOWN_RULES for f in problems if f.rule == rule), None)
        if reason is not None:
            return reason.title
    if verdict == "healthy":
        healthy = next((f for f in findings if f.rule == "healthy"), None)
        return healthy.title if healthy else "No problem found."
    serious = [f for f in problems if f.severity != INFO]
    if not serious:
        return "No problem found; notes below."
    return f"{len(serious)} problem{'s' if len(serious) > 1 else ''} found. Most important: {serious[0].title}."


def _per_step(count: float, steps: int) -> float:
    return count / steps if steps > 0 else float(count)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")
