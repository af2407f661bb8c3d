"""xladev's other diagnoses: host transfers, CPU fallbacks, slow or huge graphs, growing graphs, failures,
and the statements that a run is healthy or cannot be judged."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from xladev.analysis import fallback_reasons
from xladev.schema import units
from xladev.schema.counters import ITEM_COUNTER
from xladev.schema.debug_text import FAILURE_VERBS
from xladev.analysis.finding_model import (
    CACHE_MISS_PER_STEP, COMPILE_TOO_SLOW_NS, ERROR, EXECUTE_TOO_SLOW_NS, FALLBACK_PER_STEP_WARNING, Finding,
    GRAPH_GROWING, GRAPH_GROWTH_RATIO, HUGE_GRAPH_NODES, INFO, PENDING_OPS_STEP_FACTOR, SETUP_STEPS,
    TRANSFER_FREQUENCY_RATIO, WARNING, _per_step, _plural, fallback_remedy,
)
from xladev.analysis.auto_metrics import fallback_ops
from xladev.analysis.recompile_rules import CHANGE_HINT


# Where a fix points to the tool that names the line: dropped when the input already names it (`without_hints`).
LINE_HINT = " (PT_XLA_DEBUG_LEVEL=2 names the line)"


def host_transfer_finding(*, steps: int, transfers: int, item_calls: int = 0, fallback_calls: int = 0,
                          executions: int = 0, steady: tuple[int, int] | None = None) -> Finding | None:
    """Device-to-host transfers per step, with ``.item()`` and fallbacks told apart.

    Args:
      steps: steps completed.
      transfers: device-to-host transfers (TransferFromDeviceTime samples).
      item_calls: ``aten::_local_scalar_dense`` count (``.item()``, ``bool()``, ``int()`` on a tensor).
      fallback_calls: total count of the other ``aten::`` fallback counters.
      executions: graph executions, to show how many pieces each step was cut into.
      steady: (transfers, steps) after set-up (`SETUP_STEPS`) up to the last barrier, when the input tells
        them apart; the rate is judged on these, so one-time reads (DDP's constructor, a final print) are not
        a per-step habit.

    Returns:
      A warning when more than one transfer every two steps, else None.
    """
    transfers = max(transfers, item_calls)
    counted, span = steady if steady is not None and steady[1] > 0 else (transfers, steps)
    # One read in a run of one step is the final loss, not a habit: a rate needs two of either.
    if span <= 0 or counted / span <= TRANSFER_FREQUENCY_RATIO or counted < 2:
        return None
    per_step = counted / span
    if (counted, span) == (transfers, steps):
        evidence = [f"{transfers} device→host transfers in {steps} steps ({per_step:.2f} per step)"]
    else:
        evidence = [f"{counted} device→host transfers in the {span} steps after set-up ({per_step:.2f} per step)",
                    f"{transfers - counted} more in set-up (the first {SETUP_STEPS} steps) or after the last step: "
                    "one-time"]
    if item_calls:
        evidence.append(f"{ITEM_COUNTER} (.item(), bool(), int()): {item_calls} ({item_calls / steps:.2f} per step)")
    if fallback_calls:
        evidence.append(f"CPU fallback ops: {fallback_calls} calls, each copies its inputs to the host")
    if executions >= 1.5 * steps:
        evidence.append(f"each step runs as {executions / steps:.1f} graphs ({executions} executions in {steps} "
                        "steps): every read cuts the step's graph")
    if item_calls and item_calls * 2 >= transfers:
        # The counter counts every Python read of a scalar: .item(), and bool()/int() of a tensor (`if loss > x:`).
        title = f"A device→host transfer {_every(per_step)}, from .item() or bool()"
        fix = ("Keep the value on the device: accumulate the loss in a tensor and read it every N steps, "
               "or log it in xm.add_step_closure(...) so the read happens after the step; avoid "
               "if tensor: and bool(tensor) in the step.")
    elif fallback_calls:
        title = f"Device→host transfers {_every(per_step)}, forced by CPU fallbacks"
        fix = "Remove the CPU fallbacks (the aten:: findings); each one copies tensors to the host and back."
    else:
        title = f"Device→host transfers {_every(per_step)}"
        fix = ("Find the print(tensor), .cpu(), .tolist() or bool(tensor) inside the step"
               f"{LINE_HINT} and move it out, or do it every N steps.")
    numbers = {"transfers": transfers, "steps": steps, "transfers_per_step": round(per_step, 4),
               "item_calls": item_calls, "fallback_calls": fallback_calls}
    if (counted, span) != (transfers, steps):
        numbers.update(transfers_after_setup=counted, steps_after_setup=span)
    return Finding("host-transfers", WARNING, title,
                   "Each read of a device value waits for the device and cuts the lazy graph in two, "
                   "so the step runs as two executions instead of one.", fix, evidence=evidence, numbers=numbers)


STEADY_TRANSFERS = "Device->host transfers after set-up: "
_STEADY_TRANSFERS_RE = re.compile(re.escape(STEADY_TRANSFERS) + r"(\d+) in (\d+) steps")


def steady_transfers_line(*, transfers: int, steps: int, one_time: int) -> str:
    """xladev's end-of-run summary line with the transfers `host_transfer_finding` judges (its `steady`).

    Args:
      transfers: device-to-host transfers after set-up (`SETUP_STEPS`) up to the last barrier.
      steps: the steps in that span.
      one_time: the other transfers (in set-up, or after the last barrier).
    """
    return (f"{STEADY_TRANSFERS}{transfers} in {steps} steps ({one_time} more in set-up, the first {SETUP_STEPS} "
            "steps, or after the last step)")


def parse_steady_transfers_line(text: str) -> tuple[int, int] | None:
    """(transfers, steps) of a `steady_transfers_line` in `text` (the summary's line, or the end of xladev's
    ``TransferFromDeviceTime too frequent`` line), or None for another line."""
    match = _STEADY_TRANSFERS_RE.search(text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def without_hints(finding: Finding, *, lines_known: bool, changes_known: bool) -> Finding:
    """The finding's fix without pointing to PT_XLA_DEBUG_LEVEL=2 for what the input already holds: the lines of
    the reads (an event log, a level-2 log, xladev's summary) or what changed at each recompile (xladev's causes)."""
    if lines_known:
        finding.fix = finding.fix.replace(LINE_HINT, "")
    if changes_known:
        finding.fix = finding.fix.replace(CHANGE_HINT, "")
    return finding


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


_GROWING_RE = re.compile(re.escape(GRAPH_GROWING) + r": ([\d,]+) ops recorded since step (\d+) began, "
                         r"the latest at (.*?)\. A loop")


def parse_graph_growing(message: str) -> dict | None:
    """The numbers of a `graph_growing_message` (ops, step, site), or None for another line."""
    match = _GROWING_RE.search(message)
    if match is None:
        return None
    return {"ops": int(match.group(1).replace(",", "")), "step": int(match.group(2)), "site": match.group(3)}


def graph_growing_finding(*, ops: int, step: int, site: str, warnings: int) -> Finding:
    """The report's finding for a run whose pending graph grew past the threshold without a barrier."""
    return Finding("graph-growing", WARNING, f"{GRAPH_GROWING} in the loop at {site}: {ops:,} ops pending",
                   "Ops were recorded for a long stretch with no mark_step(), so one graph kept growing: "
                   "tracing, compiling and holding it costs more with every op, and nothing ran meanwhile.",
                   "Call xladev.mark_step() (torch_xla.sync()) once per iteration of the loop at this line, "
                   "or iterate a DeviceLoader (MpDeviceLoader), which marks each step.",
                   evidence=[f"{ops:,} ops recorded since step {step} began, the latest at {site}",
                             f"the runtime warned {_plural(warnings, 'time')}"],
                   numbers={"ops": ops, "step": step, "warnings": warnings}, subject=site)


def never_marked_finding(growing: Finding | None, *, graphs: int, executions: int, read_site: str | None,
                         cause: str, inputs: int | None = None) -> Finding:
    """A run that never marked a step: its graphs ran only where a value was read, so each held every op
    recorded before it (in a training loop, every step so far).

    Args:
      growing: the runtime's `graph_growing_finding` for the run, if it warned: extended with this evidence
        (it names the loop's line); else a new finding is made.
      graphs: graphs compiled in the run.
      executions: graphs run (0 when the input does not say).
      read_site: ``file.py:LINE`` of the value read that ran the first graph, None when the input does not say.
      cause: the printed cause of those executions (``.item()``, PyTorch/XLA's "most likely user code ...").
      inputs: the graph's number of inputs, when printed (a loop's graph takes every step's batch).

    Returns:
      The finding, marked ``whole_run`` in its numbers: its price is the run's whole tracing and compile time.
    """
    at = f" at {read_site}" if read_site else ""
    ran = _plural(executions, "execution") if executions else "every execution"
    evidence = [f"no step barrier in the run (mark_step(), torch_xla.sync(), a DeviceLoader): "
                f"{_plural(graphs, 'graph')} compiled and {ran} ran only when a value was read{at}"
                + (f" ({cause})" if cause else "")]
    if inputs:
        evidence.append(f"that graph takes {inputs} inputs")
    if growing is None:
        growing = Finding("graph-growing", WARNING,
                          f"{GRAPH_GROWING}: no step was ever marked, the run ran as {_plural(graphs, 'graph')}{at}",
                          "Nothing marked a step, so every op the run recorded waited in one graph until a value was "
                          "read: in a training loop that graph holds every step so far, and tracing, compiling and "
                          "holding it grows with each one while nothing runs.",
                          "Call xladev.mark_step() (torch_xla.sync()) at the end of every iteration of the training "
                          "loop, or iterate a DeviceLoader (MpDeviceLoader), which marks each step; read values "
                          "after it.", subject=read_site or "")
        evidence.append("the loop's line: not in this input (the graph ran at the read)")
    growing.evidence.extend(evidence)
    growing.numbers.update(whole_run=1, graphs=graphs, executions=executions)
    return growing


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
    """Executions forced by user code reading a tensor value, per Python site (debug logs).

    Without a step count (a pasted block, a log without step syncs) the title says how often the read ran in
    the input, never "every step". In a run that never marked a step, the read is where its only graph ran:
    the report then leads with `never_marked_finding` and leaves this one out (`diagnose_group`).
    """
    if executions <= 0 or (steps > 0 and executions / steps <= TRANSFER_FREQUENCY_RATIO):
        return None
    if steps > 0:
        title = f"{site} forces an execution {_every(_per_step(executions, steps))}"
    else:  # no step count (a pasted block, a log without step syncs): how often is unknown, what it does is not
        title = (f"{site} reads a tensor value before the barrier, forcing an execution "
                 f"({_plural(executions, 'time')} in this input)")
    return Finding("early-sync", WARNING, title,
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
    what = FAILURE_VERBS[kind]
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
                    warmup_known: bool, steady_transfers: int | None = None,
                    steps_ran_a_graph: bool = False) -> Finding:
    """The statement that nothing is wrong, with the numbers that show it.

    Args:
      steps: steps completed.
      compiles: graphs compiled.
      cached_compiles: syncs that ran a cached graph.
      transfers: device-to-host transfers.
      warmup_known: True when every compile is known to be in warm-up (or after the last step).
      steady_transfers: the transfers after set-up up to the last barrier, when the input tells them apart.
      steps_ran_a_graph: True when `steps` counts only the barriers that ran a graph (the input cannot see the
        others): the number is then ``graph_steps``, not ``steps``, so that it never contradicts a step count.
    """
    counted = "steps that ran a graph" if steps_ran_a_graph else "steps"
    evidence = [f"{_plural(compiles, 'compile')} in {steps} {counted}"
                + (", all during warm-up" if warmup_known else "")
                + (" (a barrier with nothing to run leaves no trace in this input)" if steps_ran_a_graph else "")]
    if cached_compiles:
        evidence.append(f"{cached_compiles} later syncs ran a cached graph")
    if not transfers:
        evidence.append("no device→host transfers")
    elif steady_transfers is not None and steady_transfers < transfers:
        which = "all" if steady_transfers == 0 else f"{transfers - steady_transfers} of them"
        evidence.append(f"{transfers} device→host transfers, {which} one-time (in set-up, the first {SETUP_STEPS} "
                        "steps, or after the last step)")
    else:
        evidence.append(f"{transfers} device→host transfers ({_per_step(transfers, steps):.2f} per step)")
    evidence.append("no CPU fallbacks")
    return Finding("healthy", INFO, "Healthy: graphs compile once, then every step runs from the cache",
                   "No recompilation after warm-up, no per-step transfers to the host, no ops on the CPU.",
                   "Nothing to fix.", evidence=evidence,
                   numbers={"graph_steps" if steps_ran_a_graph else "steps": steps, "compiles": compiles,
                            "cached_compiles": cached_compiles, "transfers": transfers})


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


# The advice for an input that shows too little of the run (also `input_rules`).
MORE_OF_THE_RUN = ("Give the report more of the run: XLA_METRICS_FILE (one record per step), the whole "
                    "PT_XLA_DEBUG_LEVEL=1 output with its end-of-run summary, or an event log (XLADEV_EVENT_LOG).")


def undetermined_finding(*, compiles: int, executions: int) -> Finding:
    """Instead of "healthy" when the input cannot show it: no step count to judge compiles and transfers by,
    or nothing ran at all (no step, compile or execution)."""
    numbers = {"compiles": compiles, "executions": executions}
    if not (compiles or executions):
        return Finding("not-enough-evidence", INFO,
                       "Cannot tell whether the run is healthy: the input shows no step, compile or execution",
                       "Nothing had run when this input was written (a report printed before the first step?), so "
                       "there is nothing to judge.", MORE_OF_THE_RUN,
                       evidence=["0 steps, 0 compiles, 0 executions"], numbers=numbers)
    evidence = [f"{_plural(compiles, 'compile')} and {_plural(executions, 'execution')}, over an unknown number of steps"]
    if executions:
        evidence.append(f"compiles per execution: {compiles / executions:.2f} (a warmed-up loop is near 0)")
    return Finding("not-enough-evidence", INFO, "Cannot tell whether the run is healthy: the input has no step count",
                   "Recompilation and host transfers are judged per step, and nothing in this input says how many "
                   "steps ran (no MarkStep counter, no [MetricsData; step=N] record, no end-of-run summary).",
                   MORE_OF_THE_RUN, evidence=evidence, numbers=numbers)
