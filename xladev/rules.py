"""The one place that decides what counts as a problem: thresholds, wording and advice.

Both `xladev report` and the runtime's live auto-analysis call these functions, so they are pure:
they take plain numbers (counts, steps, durations in nanoseconds, counter maps) and return text or
`Finding` objects. Nothing here reads files, the environment or the runtime.

Two families of rules live here:

* `auto_metrics_messages` mirrors PyTorch/XLA's auto-metrics analysis (the ``pt-xla-profiler:``
  lines printed with ``PT_XLA_DEBUG=1``) with its exact thresholds and wording.
* The ``*_finding`` functions are xladev's richer diagnoses. Each returns a `Finding` with a
  severity, the evidence and a concrete fix, or None when nothing is wrong.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from xladev import fallback_reasons
from xladev.schema.counters import ITEM_COUNTER  # noqa: F401  (re-exported for the report's rules)
from xladev.schema import units

INFO = "info"
WARNING = "warning"
ERROR = "error"
SEVERITIES = (INFO, WARNING, ERROR)
# A report's verdict: its worst finding's severity, "healthy" when there is none, "unknown" when the
# input cannot show whether the run is healthy (no step count). Printed as these labels.
UNKNOWN = "unknown"
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
      cost_ns: the wall time the problem cost, when the input measures it (`xladev.wall_time.price`).
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
        """``3.82 s (49% of the run); pad to 3 buckets → ~4 compiles, saves ~2.73 s``; empty when not priced."""
        if not self.cost_ns:
            return ""
        share = self.numbers.get("cost_share")
        text = units.compact_time_ns(self.cost_ns) + (f" ({share:.0%} of the run)" if isinstance(share, float) else "")
        return f"{text}; {self.saving}" if self.saving else text

    def to_dict(self) -> dict:
        """Returns the finding as a JSON-ready dict."""
        return dataclasses.asdict(self)


def _per_step(count: float, steps: int) -> float:
    return count / steps if steps > 0 else float(count)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


# ---------------------------------------------------------------- PyTorch/XLA's auto-metrics lines


def compile_too_frequent_message(compiles: int, steps: int) -> str | None:
    """PyTorch/XLA's ``CompileTime too frequent`` line: compiles/steps > 0.5 after 10 steps."""
    if steps <= WARMUP_STEPS or compiles / steps <= COMPILE_FREQUENCY_RATIO:
        return None
    return f"CompileTime too frequent: {compiles} counts during {steps} steps"


def transfer_too_frequent_message(transfers: int, steps: int, name: str = "TransferFromDeviceTime") -> str | None:
    """PyTorch/XLA's ``TransferFromDeviceTime too frequent`` line: ratio > 0.5, no warm-up."""
    if steps <= 0 or transfers / steps <= TRANSFER_FREQUENCY_RATIO:
        return None
    return f"{name} too frequent: {transfers} counts during {steps} steps"


def too_slow_message(metric: str, longest_ns: float, threshold_ns: float, formatted_longest: str) -> str | None:
    """PyTorch/XLA's ``<metric> too slow`` line when the longest sample exceeds ``threshold_ns``.

    ``formatted_longest`` is ``longest_ns`` printed as a metrics time: the caller formats it, so this
    module needs nothing from the report package.
    """
    if not longest_ns > threshold_ns:
        return None
    return (f"{metric} too slow: longest instance took {formatted_longest}. "
            "Please open a GitHub issue with the graph dump for our team to optimize.")


def fallback_ops(counters: Mapping[str, int]) -> list[str]:
    """The CPU-fallback ops in a counter map: ``aten::`` counters except ``.item()``'s, sorted."""
    return sorted(name for name, value in counters.items()
                  if "aten::" in name and name != ITEM_COUNTER and value)


def ops_not_lowered_message(op_names: Iterable[str]) -> str | None:
    """PyTorch/XLA's ``Op(s) not lowered`` line (its odd ``,  Please`` spacing included)."""
    names = sorted(set(op_names))
    if not names:
        return None
    return "Op(s) not lowered: " + "".join(f"{name}, " for name in names) + (
        " Please open a GitHub issue with the above op lowering requests.")


def auto_metrics_messages(*, steps: int, compiles: int, transfers: int, counters: Mapping[str, int],
                          longest_compile_ns: float = 0.0, longest_execute_ns: float = 0.0,
                          format_time=None) -> list[str]:
    """All lines PyTorch/XLA's auto-metrics analysis would print, without the prefix.

    Args:
      steps: the MarkStep counter.
      compiles: CompileTime's TotalSamples.
      transfers: TransferFromDeviceTime's TotalSamples.
      counters: every counter, for the unlowered-op line.
      longest_compile_ns: the longest compile in nanoseconds.
      longest_execute_ns: the longest execution in nanoseconds.
      format_time: formatter for durations (``xladev.schema.units.format_time_ns``); seconds with
        ``s`` when None.

    Returns:
      The messages in PyTorch/XLA's order; prepend PROFILER_PREFIX to print them as it does.
    """
    fmt = format_time or (lambda ns: f"{ns / 1e9:.3f}s")
    candidates = [
        compile_too_frequent_message(compiles, steps),
        transfer_too_frequent_message(transfers, steps),
        too_slow_message("CompileTime", longest_compile_ns, COMPILE_TOO_SLOW_NS, fmt(longest_compile_ns)),
        too_slow_message("ExecuteTime", longest_execute_ns, EXECUTE_TOO_SLOW_NS, fmt(longest_execute_ns)),
        ops_not_lowered_message(fallback_ops(counters)),
    ]
    return [line for line in candidates if line]


# ---------------------------------------------------------------- xladev's diagnoses


def recompilation_finding(*, steps: int, compiles: int, compiles_at_warmup: int | None,
                          warmup_steps: int = WARMUP_STEPS, compile_steps_after_warmup: int | None = None,
                          last_compile_step: int | None = None, stable_graph_size: bool | None = None,
                          data_dependent_ops: Sequence[str] = (), repeated: RepeatedRecompiles | None = None,
                          ) -> Finding | None:
    """Tells recompilation apart from a healthy warm-up.

    Args:
      steps: steps completed (MarkStep).
      compiles: graphs compiled in the whole run.
      compiles_at_warmup: graphs compiled by the end of step ``warmup_steps``; None when the input
        has a single report, so warm-up cannot be told apart.
      warmup_steps: the steps allowed to compile freely.
      compile_steps_after_warmup: how many steps after warm-up compiled at least one graph.
      last_compile_step: the last step (1-based) that compiled.
      stable_graph_size: True when every step traced a graph of the same size (IR nodes) or the
        same signature (inputs and outputs) from the same site.
      data_dependent_ops: fallback ops whose output shape depends on the data (nonzero...).
      repeated: the site that recompiled most for a changed input shape or constant alone (from
        xladev's recompilation causes), judged even inside warm-up.

    Returns:
      A finding, or None when compiles stop after warm-up.
    """
    finding = _recompilation_by_rate(steps=steps, compiles=compiles, compiles_at_warmup=compiles_at_warmup,
                                     warmup_steps=warmup_steps, compile_steps_after_warmup=compile_steps_after_warmup,
                                     last_compile_step=last_compile_step, stable_graph_size=stable_graph_size,
                                     data_dependent_ops=data_dependent_ops)
    if repeated is None or repeated.count < REPEATED_RECOMPILES.get(repeated.kind, 3) or data_dependent_ops:
        return finding
    fix = _repeated_fix(repeated.kind)
    if finding is None:
        each = "each " if repeated.count > 1 else ""
        finding = Finding(
            "recompilation", WARNING,
            f"{_plural(repeated.count, 'recompile')} at {repeated.site}, {each}for a changed {repeated.kind}",
            "The same code traced a new graph each time only because an input shape or a constant baked into "
            "the graph changed. Every new value is a full XLA compile; a longer run or new data keeps compiling.",
            fix, numbers={"compiles": compiles, "steps": steps})
    elif repeated.kind in ("input shape", "constant"):
        finding.fix = fix  # what changed is known exactly: its own fix
    else:
        return finding  # the rate finding already says it, with its own fix
    if repeated.kind in ("input shape", "constant"):  # xladev's recompilation causes say exactly what changed
        finding.evidence.append(f"{repeated.site} recompiled {repeated.count} times for a changed {repeated.kind} "
                                "and nothing else")
    if repeated.example:
        finding.evidence.append(f"e.g. {repeated.example}")
    finding.numbers.update(repeated_recompiles=repeated.count)
    return finding


# A site recompiling this often for a changed input shape or constant alone is a finding even in warm-up.
# A few shapes are normal (a last, smaller batch; an evaluation pass); a constant that changes value is
# always a graph per value, and passing it as a tensor costs nothing.
REPEATED_RECOMPILES = {"input shape": 3, "constant": 1, "input shape or constant": 3}


@dataclasses.dataclass
class RepeatedRecompiles:
    """The site that recompiled most for one kind of change alone.

    Attributes:
      site: the trigger site (``file.py:LINE``).
      count: recompilations there whose only change was of `kind`.
      kind: ``input shape`` or ``constant`` (`xladev.graphdiff`'s kinds).
      example: one change line, e.g. ``input 5 ...: shape f32[9,16] -> f32[10,16]``.
    """

    site: str
    count: int
    kind: str
    example: str = ""


def _repeated_fix(kind: str) -> str:
    if kind == "input shape or constant":
        return _recompile_fix(None, ())
    if kind == "constant":
        return ("Keep changing numbers out of the graph: pass them as device tensors (torch.tensor(value, "
                "device=device)) instead of Python numbers; 0 and 1 are always baked in as constants.")
    return ("Pad or bucket the changing shape: pad each batch to a fixed size (or a few bucket sizes) "
            "and use drop_last=True so the last batch is not smaller.")


def _recompilation_by_rate(*, steps: int, compiles: int, compiles_at_warmup: int | None, warmup_steps: int,
                           compile_steps_after_warmup: int | None, last_compile_step: int | None,
                           stable_graph_size: bool | None, data_dependent_ops: Sequence[str]) -> Finding | None:
    if compiles_at_warmup is None:
        message = compile_too_frequent_message(compiles, steps)
        if message is None:
            return None
        return Finding(
            "recompilation", WARNING, f"{compiles} compiles in {steps} steps",
            "A single report cannot tell warm-up from recompilation, but more than one compile "
            "every two steps after the first ten is too many for a stable training loop.",
            _recompile_fix(stable_graph_size, data_dependent_ops),
            evidence=[f"{compiles} graphs compiled in {steps} steps ({_per_step(compiles, steps):.2f} per step)",
                      "PyTorch/XLA would print: " + message,
                      "Record XLA_METRICS_FILE (one report per step) to see when the compiles happen."],
            numbers={"compiles": compiles, "steps": steps})
    after_steps = steps - warmup_steps
    new_compiles = compiles - compiles_at_warmup
    if after_steps <= 0 or new_compiles <= 0:
        return None
    rate = new_compiles / after_steps
    severity = ERROR if rate > COMPILE_FREQUENCY_RATIO else WARNING if new_compiles >= 2 else INFO
    if rate >= 0.95:
        headline = f"Recompiles every step: {compiles} compiles in {steps} steps ({new_compiles} after warm-up)"
    else:
        headline = f"Still compiling after warm-up: {new_compiles} new graphs in {after_steps} steps"
    evidence = [f"{compiles_at_warmup} of {compiles} compiles happened in the first {warmup_steps} steps (warm-up)",
                f"{new_compiles} more in steps {warmup_steps + 1}-{steps}: {rate:.2f} per step"]
    if compile_steps_after_warmup is not None:
        evidence.append(f"{compile_steps_after_warmup} of {after_steps} steps after warm-up compiled a graph")
    if last_compile_step is not None:
        evidence.append(f"last compile in step {last_compile_step}")
    cause = _recompile_cause(stable_graph_size, data_dependent_ops)
    if cause:
        evidence.append(cause)
    detail = ("A healthy loop compiles its few graphs in the first steps and then runs every step from "
              "the compile cache. Every new graph here costs a full XLA compile and stalls the step.")
    if severity == INFO:
        detail = "One graph compiled late, e.g. an evaluation pass or a last, smaller batch; harmless if it stays one."
    return Finding("recompilation", severity, headline, detail,
                   _recompile_fix(stable_graph_size, data_dependent_ops), evidence=evidence,
                   numbers={"compiles": compiles, "steps": steps, "warmup_steps": warmup_steps,
                            "compiles_at_warmup": compiles_at_warmup, "compiles_after_warmup": new_compiles,
                            "compiles_per_step_after_warmup": round(rate, 4)})


def recompilation_without_steps(*, compiles: int, executions: int, median_compile_ns: float | None = None,
                                p90_compile_ns: float | None = None) -> Finding | None:
    """Recompilation judged without a step count: compiles per execution, and how alike the compiles are.

    A warmed-up loop runs cached graphs, so its compiles are a small share of its executions. When most
    executions compiled, and the compiles took about the same time (the same code traced again), the
    run recompiles, whatever its step count.

    Args:
      compiles: graphs compiled.
      executions: graphs run.
      median_compile_ns: the 50% compile-time percentile, when printed.
      p90_compile_ns: the 90% compile-time percentile, when printed.

    Returns:
      A warning, or None when the compiles are few for the executions.
    """
    if executions < 4 or compiles < 4 or compiles / executions <= COMPILE_FREQUENCY_RATIO:
        return None
    alike = bool(median_compile_ns and p90_compile_ns and p90_compile_ns <= 1.5 * median_compile_ns)
    evidence = [f"{compiles} graphs compiled for {executions} executions ({compiles / executions:.2f} per execution; "
                "a warmed-up loop is near 0)",
                "the input has no step count (no MarkStep counter, no [MetricsData; step=N] record), so the "
                "rate per step is unknown"]
    if alike:
        evidence.append(f"compile times are alike (50%: {units.compact_time_ns(median_compile_ns)}, 90%: "
                        f"{units.compact_time_ns(p90_compile_ns)}): the same code compiled again, typically for a "
                        "changing input shape")
    return Finding("recompilation", WARNING, f"{compiles} compiles for {executions} executions",
                   "Most executions compiled a new graph instead of running a cached one. Every new graph costs a "
                   "full XLA compile and stalls the run.",
                   _recompile_fix(alike or None, ()), evidence=evidence,
                   numbers={"compiles": compiles, "executions": executions,
                            "compiles_per_execution": round(compiles / executions, 4)})


def _recompile_cause(stable_graph_size: bool | None, data_dependent_ops: Sequence[str]) -> str:
    if data_dependent_ops:
        verb = "gives" if len(data_dependent_ops) == 1 else "give"
        return (f"{', '.join(data_dependent_ops)} {verb} data-dependent output shapes: each new count of "
                "selected elements is a new graph")
    if stable_graph_size:
        return ("every step traces a graph of the same size and signature, so the code is the same and what "
                "changes is an input shape (or a constant baked into the graph)")
    return ""


def _recompile_fix(stable_graph_size: bool | None, data_dependent_ops: Sequence[str]) -> str:
    if data_dependent_ops:
        return ("Keep shapes static: replace boolean-mask indexing and nonzero with masked arithmetic "
                "(torch.where(mask, x, 0), (x * mask).sum() / mask.sum()).")
    if stable_graph_size:
        return ("Pad or bucket the changing shape: pad each batch to a fixed size (or a few bucket sizes) "
                "and use drop_last=True so the last batch is not smaller.")
    return ("Find what changes between steps with PT_XLA_DEBUG_LEVEL=2 (xladev names the changed input "
            "or constant), then make it static: pad shapes, pass changing Python scalars as tensors, "
            "and avoid Python control flow on tensor values.")


def host_transfer_finding(*, steps: int, transfers: int, item_calls: int = 0, fallback_calls: int = 0,
                          executions: int = 0) -> Finding | None:
    """Device-to-host transfers per step, with ``.item()`` and fallbacks told apart.

    Args:
      steps: steps completed.
      transfers: device-to-host transfers (TransferFromDeviceTime samples).
      item_calls: ``aten::_local_scalar_dense`` count (``.item()``, ``bool()``, ``int()`` on a tensor).
      fallback_calls: total count of the other ``aten::`` fallback counters.
      executions: graph executions, to show how many pieces each step was cut into.

    Returns:
      A warning when more than one transfer every two steps, else None.
    """
    transfers = max(transfers, item_calls)
    # One read in a run of one step is the final loss, not a habit: a rate needs two of either.
    if steps <= 0 or transfers / steps <= TRANSFER_FREQUENCY_RATIO or transfers < 2:
        return None
    per_step = transfers / steps
    evidence = [f"{transfers} device→host transfers in {steps} steps ({per_step:.2f} per step)"]
    if item_calls:
        evidence.append(f"{ITEM_COUNTER} (.item()): {item_calls} ({item_calls / steps:.2f} per step)")
    if fallback_calls:
        evidence.append(f"CPU fallback ops: {fallback_calls} calls, each copies its inputs to the host")
    if executions >= 1.5 * steps:
        evidence.append(f"each step runs as {executions / steps:.1f} graphs ({executions} executions in {steps} "
                        "steps): every read cuts the step's graph")
    if item_calls and item_calls * 2 >= transfers:
        title = f"A device→host transfer {_every(per_step)}, from .item()"
        fix = ("Keep the value on the device: accumulate the loss in a tensor and read it every N steps, "
               "or log it in xm.add_step_closure(...) so the read happens after the step; avoid "
               "if tensor: and bool(tensor) in the step.")
    elif fallback_calls:
        title = f"Device→host transfers {_every(per_step)}, forced by CPU fallbacks"
        fix = "Remove the CPU fallbacks (the aten:: findings); each one copies tensors to the host and back."
    else:
        title = f"Device→host transfers {_every(per_step)}"
        fix = ("Find the print(tensor), .cpu(), .tolist() or bool(tensor) inside the step "
               "(PT_XLA_DEBUG_LEVEL=2 names the line) and move it out, or do it every N steps.")
    return Finding("host-transfers", WARNING, title,
                   "Each read of a device value waits for the device and cuts the lazy graph in two, "
                   "so the step runs as two executions instead of one.", fix, evidence=evidence,
                   numbers={"transfers": transfers, "steps": steps, "transfers_per_step": round(per_step, 4),
                            "item_calls": item_calls, "fallback_calls": fallback_calls})


def _every(per_step: float) -> str:
    if 0.95 <= per_step < 1.05:
        return "every step"
    return f"{per_step:.1f} per step" if per_step >= 1.05 else f"in {per_step:.0%} of steps"


def fallback_findings(counters: Mapping[str, int], steps: int) -> list[Finding]:
    """One finding per op that ran on the CPU fallback.

    Args:
      counters: counter name to value; ``aten::`` counters other than ``.item()``'s are fallbacks.
      steps: steps completed (0 when unknown).

    Returns:
      Findings, most frequent op first; a warning when an op runs at least every other step.
    """
    findings = []
    for name in sorted(fallback_ops(counters), key=lambda n: (-counters[n], n)):
        count = int(counters[name])
        per_step = _per_step(count, steps)
        severity = WARNING if steps <= 0 or per_step >= FALLBACK_PER_STEP_WARNING else INFO
        when = f"{count} times in {steps} steps ({per_step:.2f} per step)" if steps else f"{count} times"
        detail = (f"Runs on the CPU: {fallback_reasons.explanation(name)}. Each call copies its inputs to the host, "
                  "runs on the CPU, copies the result back and splits the graph around it.")
        if fallback_reasons.is_data_dependent(name):
            detail += " Each new output shape also recompiles the graphs after it."
        findings.append(Finding("cpu-fallback", severity, f"{name} runs on the CPU ({_plural(count, 'call')})",
                                detail, fallback_remedy(name), evidence=[f"counter {name} = {when}"],
                                numbers={"count": count, "steps": steps, "per_step": round(per_step, 4)},
                                subject=name))
    return findings


def slow_compile_finding(*, longest_ns: float, total_ns: float, compiles: int, formatted_longest: str,
                         formatted_total: str) -> Finding | None:
    """A compile that took longer than PyTorch/XLA's 300 s limit."""
    if not longest_ns > COMPILE_TOO_SLOW_NS:
        return None
    return Finding("slow-compile", WARNING, f"A compile took {formatted_longest}",
                   "Compiles this long usually mean a huge graph, often a loop unrolled into it.",
                   "Cut the graph: call torch_xla.sync() inside long Python loops, or wrap the repeated "
                   "block in a scan-like construct; enable the persistent compile cache to pay this once.",
                   evidence=[f"longest compile at least {formatted_longest}",
                             f"{compiles} compiles took {formatted_total} in total"],
                   numbers={"longest_ns": longest_ns, "total_ns": total_ns, "compiles": compiles})


def slow_execute_finding(*, longest_ns: float, executions: int, formatted_longest: str) -> Finding | None:
    """An execution that took longer than PyTorch/XLA's 30 s limit."""
    if not longest_ns > EXECUTE_TOO_SLOW_NS:
        return None
    return Finding("slow-execute", WARNING, f"An execution took {formatted_longest}",
                   "One graph ran for more than 30 s: usually several steps traced into one graph.",
                   "Sync every step (torch_xla.sync() or a parallel loader) so each graph holds one step.",
                   evidence=[f"longest execution at least {formatted_longest} of {executions} executions"],
                   numbers={"longest_ns": longest_ns, "executions": executions})


def huge_graph_finding(*, largest_nodes: float, typical_nodes: float) -> Finding | None:
    """A graph with more IR nodes than HUGE_GRAPH_NODES (TensorsGraphSize)."""
    if not largest_nodes > HUGE_GRAPH_NODES:
        return None
    return Finding("huge-graph", WARNING, f"Huge graph: {largest_nodes:,.0f} IR nodes",
                   "Graphs this size compile slowly and may exhaust device memory.",
                   "Sync more often (one step per graph), and check for Python loops that unroll into the graph.",
                   evidence=[f"largest synced graph: {largest_nodes:,.0f} nodes; median {typical_nodes:,.0f}"],
                   numbers={"largest_nodes": largest_nodes, "typical_nodes": typical_nodes})


def graph_growth_finding(*, nodes_at_warmup: float, nodes_at_end: float, steps: int) -> Finding | None:
    """Graphs that keep growing step after step (a missing sync)."""
    if nodes_at_warmup <= 0 or nodes_at_end < GRAPH_GROWTH_RATIO * nodes_at_warmup:
        return None
    return Finding("graph-growth", WARNING,
                   f"Graphs keep growing: {nodes_at_warmup:,.0f} → {nodes_at_end:,.0f} IR nodes per sync",
                   "Each step adds to a graph that is never cut, so every sync compiles a bigger graph.",
                   "Call torch_xla.sync() (xm.mark_step()) at the end of every step, or use the parallel loader.",
                   evidence=[f"mean graph size {nodes_at_warmup:,.0f} nodes after warm-up, "
                             f"{nodes_at_end:,.0f} at step {steps}"],
                   numbers={"nodes_at_warmup": nodes_at_warmup, "nodes_at_end": nodes_at_end})


def pending_ops_threshold(*, floor: int, largest_step_ops: int) -> int:
    """How many ops may be recorded without a barrier before the growth warning (0 floor: never)."""
    if floor <= 0:
        return 1 << 62
    return max(floor, PENDING_OPS_STEP_FACTOR * largest_step_ops)


def graph_growing_message(*, ops: int, step: int, site: str) -> str:
    """The runtime's warning (and PT_XLA_DEBUG line) when the pending graph passes the threshold."""
    return (f"{GRAPH_GROWING}: {ops:,} ops recorded since step {step} began, the latest at {site}. "
            "A loop with no mark_step() records one ever-larger graph: it is traced, compiled and held in memory "
            "as a whole. Call xladev.mark_step() (torch_xla.sync()) once per iteration, or iterate a DeviceLoader.")


_GROWING_RE = None


def parse_graph_growing(message: str) -> dict | None:
    """The numbers of a `graph_growing_message` (ops, step, site), or None for another line."""
    global _GROWING_RE
    if _GROWING_RE is None:
        import re

        _GROWING_RE = re.compile(re.escape(GRAPH_GROWING) + r": ([\d,]+) ops recorded since step (\d+) began, "
                                 r"the latest at (.*?)\. A loop")
    match = _GROWING_RE.search(message)
    if match is None:
        return None
    return {"ops": int(match.group(1).replace(",", "")), "step": int(match.group(2)), "site": match.group(3)}


def graph_growing_finding(*, ops: int, step: int, site: str, warnings: int) -> Finding:
    """The report's finding for a run whose pending graph grew past the threshold without a barrier."""
    return Finding("graph-growing", WARNING, f"{GRAPH_GROWING}: {ops:,} ops pending at {site}",
                   "Ops were recorded for a long stretch with no mark_step(), so one graph kept growing: "
                   "tracing, compiling and holding it costs more with every op, and nothing ran meanwhile.",
                   "Call xladev.mark_step() (torch_xla.sync()) once per iteration of the loop at this line, "
                   "or iterate a DeviceLoader (MpDeviceLoader), which marks each step.",
                   evidence=[f"{ops:,} ops recorded since step {step} began, the latest at {site}",
                             f"the runtime warned {_plural(warnings, 'time')}"],
                   numbers={"ops": ops, "step": step, "warnings": warnings}, subject=site)


def device_data_cache_miss_finding(*, misses: int, steps: int, misses_after_warmup: int | None = None,
                                   steps_after_warmup: int = 0) -> Finding | None:
    """Scalar constants uploaded again and again (DeviceDataCacheMiss)."""
    if misses_after_warmup is not None and steps_after_warmup > 0:
        count, span = misses_after_warmup, steps_after_warmup
    else:
        count, span = misses, steps
    if span <= 0 or count / span < CACHE_MISS_PER_STEP:
        return None
    return Finding("device-data-cache-miss", INFO,
                   f"A new scalar constant is uploaded {_every(count / span)}",
                   "Python numbers used with device tensors are uploaded as device data; a value that "
                   "changes every step (a scheduled learning rate, a step counter) misses the cache each time.",
                   "Keep such values in a device tensor and update it in place (t.fill_(v)), instead of "
                   "passing a new Python float each step.",
                   evidence=[f"DeviceDataCacheMiss = {misses} in {steps} steps",
                             f"{count} misses in the last {span} steps"],
                   numbers={"misses": misses, "steps": steps})


def early_sync_finding(*, site: str, executions: int, steps: int, cause: str) -> Finding | None:
    """Executions forced by user code reading a tensor value, per Python site (debug logs)."""
    if executions <= 0 or (steps > 0 and executions / steps <= TRANSFER_FREQUENCY_RATIO):
        return None
    return Finding("early-sync", WARNING, f"{site} forces an execution {_every(_per_step(executions, steps))}",
                   "Reading a tensor's value (print, .item(), bool(), a CPU fallback) runs the pending graph early.",
                   "Move the read out of the step, do it every N steps, or keep the value as a tensor.",
                   evidence=[f"{executions} executions caused by: {cause}",
                             f"{steps} step syncs in the same log" if steps else "step count unknown"],
                   numbers={"executions": executions, "steps": steps}, subject=site)


def rank_divergence_finding(*, rank: int, compiles: int, others_compiles: Sequence[int],
                            extra_graphs: int = 0) -> Finding | None:
    """A rank that compiles graphs the other ranks do not."""
    if not others_compiles:
        return None
    if compiles <= max(others_compiles) and extra_graphs == 0:
        return None
    evidence = [f"rank {rank}: {compiles} compiles; other ranks: {min(others_compiles)}-{max(others_compiles)}"]
    if extra_graphs:
        evidence.append(f"{extra_graphs} graph hashes compiled only on rank {rank}")
    return Finding("rank-divergence", WARNING, f"Rank {rank} compiles graphs the other ranks do not",
                   "All ranks should run the same graphs; one that compiles more stalls the collective "
                   "ops of every other rank while it compiles.",
                   "Look for rank-dependent code (if rank == 0: logging or evaluation with tensor reads, "
                   "uneven last batches) and make every rank trace the same graph.",
                   evidence=evidence, numbers={"rank": rank, "compiles": compiles}, subject=f"rank {rank}")


def failure_finding(*, kind: str, count: int, failures: Sequence[Mapping]) -> Finding | None:
    """Graphs that failed to compile (`kind` ``compile``) or while running (``execute``): always an error.

    Args:
      kind: ``compile`` or ``execute``.
      count: how many failed (a counter), at least the number of `failures`.
      failures: what is known of each: ``hash``, ``message``, ``hlo_path``, ``site``.
    """
    count = max(count, len(failures))
    if count <= 0:
        return None
    compile_kind = kind == "compile"
    what = "failed to compile" if compile_kind else "failed while running"
    evidence = [f"graph {f.get('hash', '?')[:16]}: {f.get('message') or 'no message'}"
                + (f" (at {f['site']})" if f.get("site") else "") + (f"; HLO: {f['hlo_path']}" if f.get("hlo_path") else "")
                for f in failures[:5]]
    paths = [f["hlo_path"] for f in failures if f.get("hlo_path")]
    if compile_kind:
        detail = ("XLA rejected the graph, so the step that needed it raised XlaCompileError and computed nothing. "
                  "The error names the op XLA could not handle.")
        fix = ("Open the saved HLO and find the op the error names; run that op on the CPU (`.cpu()` around it) "
               "until its lowering is fixed, and report the HLO.")
    else:
        detail = ("The graph compiled but failed on the device (often out of memory), so its step raised "
                  "XlaExecutionError and its outputs are missing.")
        fix = ("If the error says out of memory, lower the batch size or call mark_step() more often so graphs "
               "stay small; otherwise report the saved HLO.")
    return Finding(f"{kind}-failure", ERROR, f"{_plural(count, 'graph')} {what}", detail, fix,
                   evidence=evidence or [f"{kind.capitalize()}Failed counter: {count}"],
                   numbers={"failures": count, **({"hlo_path": paths[0]} if paths else {})})


def healthy_finding(*, steps: int, compiles: int, cached_compiles: int, transfers: int,
                    warmup_known: bool) -> Finding:
    """The statement that nothing is wrong, with the numbers that show it."""
    evidence = [f"{_plural(compiles, 'compile')} in {steps} steps"
                + (", all during warm-up" if warmup_known else "")]
    if cached_compiles:
        evidence.append(f"{cached_compiles} later syncs ran a cached graph")
    evidence.append(f"{transfers} device→host transfers ({_per_step(transfers, steps):.2f} per step)"
                    if transfers else "no device→host transfers")
    evidence.append("no CPU fallbacks")
    return Finding("healthy", INFO, "Healthy: graphs compile once, then every step runs from the cache",
                   "No recompilation after warm-up, no per-step transfers to the host, no ops on the CPU.",
                   "Nothing to fix.", evidence=evidence,
                   numbers={"steps": steps, "compiles": compiles, "cached_compiles": cached_compiles,
                            "transfers": transfers})


# Notes that advise a speed-up without saying anything is wrong: they leave a healthy verdict healthy.
ADVICE_RULES = frozenset({"compile-time"})


def persistent_cache_advice(share: float) -> str:
    """The persistent-cache sentence added to a fix when compiling took `share` of the run."""
    return (f"Compiling took {share:.0%} of the run: turn on the persistent compilation cache "
            "(xladev.initialize_cache(dir) (torch_xla.runtime.initialize_cache(dir))) so a restarted run loads "
            "its compiled graphs from disk instead of compiling them again.")


def compile_time_finding(*, compile_ns: float, share: float, compiles: int) -> Finding:
    """Compiling took most of the run, without recompilation: a short run, or a restart that compiles again."""
    return Finding("compile-time", INFO, f"Compiling took {share:.0%} of the run's wall time",
                   f"{_plural(compiles, 'graph')} compiled once each; the time is spent again by every run that "
                   "starts from scratch.",
                   persistent_cache_advice(share),
                   evidence=[f"{_plural(compiles, 'compile')}, {units.compact_time_ns(compile_ns)} compiling"],
                   numbers={"compiles": compiles, "compile_ns": round(compile_ns), "compile_share": round(share, 4)})


def undetermined_finding(*, compiles: int, executions: int) -> Finding:
    """Instead of "healthy" when the input cannot show it: no step count to judge compiles and transfers by."""
    evidence = [f"{_plural(compiles, 'compile')} and {_plural(executions, 'execution')}, over an unknown number of steps"]
    if executions:
        evidence.append(f"compiles per execution: {compiles / executions:.2f} (a warmed-up loop is near 0)")
    return Finding("not-enough-evidence", INFO, "Cannot tell whether the run is healthy: the input has no step count",
                   "Recompilation and host transfers are judged per step, and nothing in this input says how many "
                   "steps ran (no MarkStep counter, no [MetricsData; step=N] record, no end-of-run summary).",
                   "Give the report more of the run: XLA_METRICS_FILE (one record per step), the whole "
                   "PT_XLA_DEBUG_LEVEL=1 output with its end-of-run summary, or an event log (XLADEV_EVENT_LOG).",
                   evidence=evidence, numbers={"compiles": compiles, "executions": executions})


# ---------------------------------------------------------------- advice in the run's own names

# The fixes above are written with both stacks' names where they differ. A run's own stack decides
# which one a finding shows: PyTorch/XLA's for its reports, xladev's for xladev's runs.
_NAMES_FOR = {
    "xladev": (("xladev.mark_step() (torch_xla.sync())", "xladev.mark_step()"),
               ("xladev.initialize_cache(dir) (torch_xla.runtime.initialize_cache(dir))",
                "xladev.initialize_cache(dir) or XLADEV_COMPILATION_CACHE=dir"),
               ("torch_xla.sync() (xm.mark_step())", "xladev.mark_step()"),
               ("torch_xla.sync()", "xladev.mark_step()"),
               ("xm.add_step_closure(", "xladev.add_step_closure("),
               ("a DeviceLoader (MpDeviceLoader)", "an xladev.DeviceLoader"),
               ("the parallel loader", "xladev.DeviceLoader"),
               ("a parallel loader", "an xladev.DeviceLoader")),
    "torch_xla": (("xladev.mark_step() (torch_xla.sync())", "torch_xla.sync()"),
                  ("xladev.initialize_cache(dir) (torch_xla.runtime.initialize_cache(dir))",
                   "torch_xla.runtime.initialize_cache(dir)"),
                  ("torch_xla.sync() (xm.mark_step())", "torch_xla.sync() (xm.mark_step())"),
                  ("a DeviceLoader (MpDeviceLoader)", "pl.MpDeviceLoader"),
                  ("a DeviceLoader", "pl.MpDeviceLoader"),
                  ("xladev.mark_step()", "torch_xla.sync()")),
}


def in_names_of(finding: Finding, stack: str) -> Finding:
    """The finding with its fix and detail in `stack`'s API names (``xladev`` or ``torch_xla``)."""
    for old, new in _NAMES_FOR.get(stack, ()):
        finding.fix = finding.fix.replace(old, new)
        finding.detail = finding.detail.replace(old, new)
    return finding


# ---------------------------------------------------------------- comparisons

# Metrics and counters where less is better; everything else is compared without a verdict.
LOWER_IS_BETTER = frozenset({
    "CompileTime", "ExecuteTime", "TransferFromDeviceTime", "TransferToDeviceTime", "TransferFromServerTime",
    "TransferToServerTime", "UncachedCompile", "CreateCompileHandles", "DeviceDataCacheMiss",
    "TensorsGraphSize", "InboundData", "LazyTracing", "DeviceLockWait", "PersistentCacheMiss",
})


def metric_preference(name: str) -> str:
    """``lower`` when a smaller value is better (times, compiles, fallbacks), else ``neutral``."""
    if name in LOWER_IS_BETTER or name.startswith("aten::"):
        return "lower"
    return "neutral"
