"""Recompilation told apart from warm-up: by rate after warm-up, by repeated recompiles for one kind of
change, or by compiles per execution when the input has no step count."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from xladev.schema import units
from xladev.analysis.finding_model import (
    COMPILE_FREQUENCY_RATIO, ERROR, Finding, INFO, WARMUP_STEPS, WARNING, _per_step, _plural, op_base_name,
)
from xladev.analysis.auto_metrics import compile_too_frequent_message


# ---------------------------------------------------------------- xladev's diagnoses


def recompilation_finding(*, steps: int, compiles: int, compiles_at_warmup: int | None,
                          warmup_steps: int = WARMUP_STEPS, compile_steps_after_warmup: int | None = None,
                          last_compile_step: int | None = None, stable_graph_size: bool | None = None,
                          data_dependent_ops: Sequence[str] = (), repeated: RepeatedRecompiles | None = None,
                          compiles_after_last_step: int = 0) -> Finding | None:
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
      compiles_after_last_step: of `compiles`, those after the last barrier (a final print reading a new
        value): one-time, not recompilation.

    Returns:
      A finding, or None when compiles stop after warm-up.
    """
    finding = _recompilation_by_rate(steps=steps, compiles=compiles, compiles_at_warmup=compiles_at_warmup,
                                     warmup_steps=warmup_steps, compile_steps_after_warmup=compile_steps_after_warmup,
                                     last_compile_step=last_compile_step, stable_graph_size=stable_graph_size,
                                     data_dependent_ops=data_dependent_ops,
                                     compiles_after_last_step=compiles_after_last_step)
    if repeated is None or repeated.count < REPEATED_RECOMPILES.get(repeated.kind, 3) or data_dependent_ops:
        return finding
    fix = _repeated_fix(repeated.kind, repeated.op)
    if finding is None:
        each = "each " if repeated.count > 1 else ""
        of = f" of {repeated.op}" if repeated.op else ""
        finding = Finding(
            "recompilation", WARNING,
            f"{_plural(repeated.count, 'recompile')} at {repeated.site}, {each}for a changed {repeated.kind}{of}",
            "The same code traced a new graph each time only because an input shape or a constant baked into "
            "the graph changed. Every new value is a full XLA compile; a longer run or new data keeps compiling.",
            fix, numbers={"compiles": compiles, "steps": steps})
    elif repeated.kind in ("input shape", "constant"):
        finding.fix = fix  # what changed is known exactly: its own fix
    else:  # the rate finding already says it, with its own fix; its price counts the repeats in warm-up too
        finding.numbers.update(repeated_recompiles=repeated.count)
        return finding
    if repeated.kind in ("input shape", "constant"):  # xladev's recompilation causes say exactly what changed
        finding.evidence.append(f"{repeated.site} recompiled {repeated.count} times for a changed {repeated.kind} "
                                "and nothing else")
    if repeated.example:
        finding.evidence.append(f"e.g. {repeated.example}")
    if repeated.triggers:
        finding.evidence.append(f"the graphs compiled at {', '.join(repeated.triggers)} (where they ran); the "
                                f"constant that changed was passed to {repeated.op} at {repeated.site}")
    finding.subject = finding.subject or repeated.site
    finding.numbers.update(repeated_recompiles=repeated.count)
    return finding


# A step after set-up that compiles this many graphs is not warming up: code inside it traces new graphs again
# and again (a loop of value reads or changing shapes). A training step has a few graphs, an evaluation pass a
# few more.
COMPILE_BURST = 10


def compile_burst_finding(*, bursts: Sequence[tuple[int, int]], compiles: int, compile_ns: float = 0.0
                          ) -> Finding | None:
    """Steps after set-up that each compiled at least `COMPILE_BURST` graphs, judged even inside warm-up.

    Args:
      bursts: (step, 0-based as XLA_METRICS_FILE and the event log number them; graphs compiled in it), in order.
      compiles: graphs compiled in the whole input.
      compile_ns: the compile time of those steps (0 when unknown): the finding's cost.

    Returns:
      An error, or None without a burst.
    """
    if not bursts:
        return None
    new = sum(count for _, count in bursts)
    if len(bursts) == 1:
        step, count = bursts[0]
        title = f"{count} graphs compiled in step {step} alone"
    else:
        title = (f"Compiles keep growing: {new} new graphs in {len(bursts)} steps ("
                 + ", ".join(f"{count} in step {step}" for step, count in bursts[:4])
                 + (", ..." if len(bursts) > 4 else "") + ")")
    evidence = [f"step {step}: {count} new graphs" for step, count in bursts[:8]]
    if compile_ns:
        evidence.append(f"{units.compact_time_ns(compile_ns)} compiling in {'that step' if len(bursts) == 1 else 'those steps'}")
    evidence.append(f"{compiles} graphs compiled in all; a training step has a few, compiled once")
    return Finding(
        "recompilation", ERROR, title,
        "Tens or hundreds of new graphs in one step are not warm-up: code in that step traces a new graph again "
        "and again, typically a Python loop whose iterations read a value (.item(), print, if tensor:) or use a "
        "changing shape or slice length, each cutting the graph and compiling what came before.",
        "Find the loop in that step: PT_XLA_DEBUG_LEVEL=2 prints each compile's cause and line. Keep values on "
        "the device inside it (no reads per iteration) and its shapes fixed; pad an evaluation pass's batches to "
        "one shape.", evidence=evidence,
        numbers={"compiles": compiles, "burst_compiles": new, "burst_steps": len(bursts),
                 **({"burst_compile_ns": round(compile_ns)} if compile_ns else {})})


# A site recompiling this often for a changed input shape or constant alone is a finding even in warm-up.
# A few shapes are normal (a last, smaller batch; an evaluation pass); a constant that changes value is
# always a graph per value, and passing it as a tensor costs nothing.
REPEATED_RECOMPILES = {"input shape": 3, "constant": 1, "input shape or constant": 2}


@dataclasses.dataclass
class RepeatedRecompiles:
    """The site that recompiled most for one kind of change alone.

    Attributes:
      site: the trigger site (``file.py:LINE``).
      count: recompilations there whose only change was of `kind`.
      kind: ``input shape`` or ``constant`` (`xladev.graphdiff`'s kinds).
      example: one change line, e.g. ``input 5 ...: shape f32[9,16] -> f32[10,16]``.
      op: for a changed constant located by the runtime, the op it was passed to (``aten::slice``); `site` is
        then that op's line, and `triggers` the sites of the reads or barriers that compiled the graphs.
      triggers: see `op`.
    """

    site: str
    count: int
    kind: str
    example: str = ""
    op: str = ""
    triggers: tuple[str, ...] = ()


# Ops whose constants are sizes, bounds or lengths: they set the graph's shapes, so no device tensor can carry
# them; a changing one is fixed by a fixed length (padding, masking) instead.
SHAPE_SETTING_OPS = frozenset({
    "slice", "narrow", "view", "_unsafe_view", "reshape", "expand", "repeat", "tile", "split", "split_with_sizes",
    "chunk", "unfold", "constant_pad_nd", "pad", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "as_strided", "resize_", "zeros", "ones", "full", "empty", "empty_strided", "arange",
    "new_zeros", "new_ones", "new_full", "new_empty", "rand", "randn", "randint", "linspace", "upsample_nearest2d",
    "upsample_bilinear2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"})


def _repeated_fix(kind: str, op: str = "") -> str:
    if kind == "input shape or constant":
        return _recompile_fix(None, ())
    if kind == "constant" and op_base_name(op) in SHAPE_SETTING_OPS:
        return (f"Pad or bucket the changing length: the value passed to {op} is a size or bound, which sets the "
                "graph's shapes, so it cannot be a device tensor. Use a fixed length (slice or view a constant "
                "length and mask the positions past the real one) or pad to a few bucket lengths.")
    if kind == "constant":
        return ("Keep changing numbers out of the graph: pass them as device tensors (torch.tensor(value, "
                "device=device)) instead of Python numbers; 0 and 1 are always baked in as constants.")
    return ("Pad or bucket the changing shape: pad each batch to a fixed size (or a few bucket sizes) "
            "and use drop_last=True so the last batch is not smaller.")


def _recompilation_by_rate(*, steps: int, compiles: int, compiles_at_warmup: int | None, warmup_steps: int,
                           compile_steps_after_warmup: int | None, last_compile_step: int | None,
                           stable_graph_size: bool | None, data_dependent_ops: Sequence[str],
                           compiles_after_last_step: int = 0) -> Finding | None:
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
    new_compiles = compiles - compiles_at_warmup - compiles_after_last_step
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
    if compiles_after_last_step:
        evidence.append(f"{compiles_after_last_step} more after the last step (a final read): one-time")
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
    return (f"Find what changes between steps{CHANGE_HINT}, then make it static: pad shapes, pass changing Python "
            "scalars as tensors, and avoid Python control flow on tensor values.")


# Where the fix points to the tool that says what changed: dropped when the input already says it.
CHANGE_HINT = " with PT_XLA_DEBUG_LEVEL=2 (xladev names the changed input or constant)"


def same_inputs_recompile(finding: Finding, *, site: str, graphs: int, inputs: int, input_bytes: float,
                          changes_named: bool = False) -> None:
    """Tells a recompilation whose graphs all took the same inputs as one from a constant inside the graph.

    PyTorch/XLA's debug blocks give each graph's input count and input size but no diff: graphs of one site
    with the same inputs and the same input size were not fed new shapes, so what changed is a number traced
    into the graph (a slice length, a view's size, a Python int from the step counter). The dumps do not name
    the op, so the finding says so, and the input-shape fix (pad the batch, drop_last) is replaced by one for
    a constant.

    Args:
      finding: the recompilation finding, changed in place.
      site: where the graphs compiled (the sync or read that ran them), ``file:line``.
      graphs: how many different graphs compiled there.
      inputs: their input count (the same for all).
      input_bytes: their input size in bytes (the same for all).
      changes_named: the input names what changed too (xladev's recompilation records, or PyTorch/XLA's graph
        dumps read by `xladev attach --graphs`): the evidence then does not say the input cannot name it.
    """
    unnamed = ("; PyTorch/XLA's debug blocks do not name the op or the constant (xladev run on a CPU or GPU, or "
               "xladev attach --graphs, names them)")
    finding.evidence.append(
        f"the {graphs} graphs at {site} all take the same {inputs} inputs of the same size "
        f"({units.format_bytes(input_bytes)}): no input changed shape, so what changes is a constant inside the "
        f"graph, such as a slice length or a view's size taken from a Python number{'' if changes_named else unnamed}")
    finding.fix = finding.fix.replace(_recompile_fix(True, ()), _SAME_INPUTS_FIX)
    finding.numbers.update(graphs_with_same_inputs=graphs)


_SAME_INPUTS_FIX = ("Pad or bucket the changing length: find the Python number that changes every step "
                    "(the step counter, a length) where it sets a shape: a slice bound, a view or reshape size, "
                    "a pad width. Use a fixed length (slice a constant length and mask past the real one) or pad "
                    "to a few bucket lengths. A changing Python float in arithmetic does not recompile on "
                    "PyTorch/XLA (it is sent as device data), unless it takes the values 0 or 1.")
