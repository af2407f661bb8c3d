"""Turns what was read into findings, by calling the rules of `xladev.analysis` with its numbers.

Each rank (or the single run) is diagnosed from its primary metrics input (the one with the most
reports) and its PT_XLA_DEBUG logs; findings of several ranks are merged, and ranks that compile
graphs the others do not are flagged. Evidence carries the input line numbers it came from.
"""

from __future__ import annotations

from xladev import analysis
from xladev.analysis import fallback_reasons
from xladev.analysis import wall_time
from xladev.report import across_ranks, timing
from xladev.report.debug_findings import (
    debug_evidence, debug_only_findings, dynamo_findings, growth_findings, memory_growth_findings,
)
from xladev.report.model import RunEnding, SourceResult
from xladev.report.run_facts import (RunFacts, compile_bursts, debug_facts, metric_block, metrics_facts,
                                     repeated_in_series, repeated_recompiles, where, with_debug_warmup,
                                     with_summary_counts)
from xladev.analysis import Finding
from xladev.schema import units
from xladev.schema.sites import short_site

_RULE_ORDER = ["unfinished-run", "rank-lost", "out-of-memory", "compile-failure", "execute-failure", "graph-divergence", "graph-growing",
               "recompilation", "rank-recompiles", "straggler", "host-transfers", "cpu-fallback", "early-sync",
               "rank-divergence", "slow-compile", "slow-execute", "huge-graph", "graph-growth", "graph-breaks",
               "dynamo-recompiles", "device-data-cache-miss", "compile-time", "no-complete-record", "damaged-input",
               "unreadable-input", "not-enough-evidence", "healthy"]


def _metrics_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    final = source.final
    series = source.series
    findings = []
    data_dependent = facts.data_dependent_ops()
    compile_block = metric_block(source, "CompileTime")
    if facts.steps <= 0:
        percentiles = dict(compile_block.percentiles) if compile_block is not None else {}
        recompile = analysis.recompilation_without_steps(compiles=facts.compiles, executions=facts.executions,
                                                      median_compile_ns=percentiles.get("50%"),
                                                      p90_compile_ns=percentiles.get("90%"))
    else:
        recompile = None
    recompile = recompile or analysis.recompilation_finding(
        steps=facts.steps, compiles=facts.compiles, compiles_at_warmup=facts.compiles_at_warmup,
        warmup_steps=facts.warmup_steps, compile_steps_after_warmup=facts.compile_steps_after_warmup,
        last_compile_step=facts.last_compile_step, stable_graph_size=facts.stable_graph_size,
        compiles_after_last_step=facts.compiles_after_last_step,
        data_dependent_ops=data_dependent, repeated=facts.repeated)
    bursts, burst_ns, burst_lines = compile_bursts(source)
    burst = analysis.compile_burst_finding(bursts=bursts, compile_ns=burst_ns, compiles=max(facts.compiles, int(
        (source.cut_row or {}).get("compiles", 0))))
    if burst is not None:
        if recompile is None:
            recompile = burst
        else:  # the rate finding says it already: the bursts are its evidence
            recompile.evidence += burst.evidence[:-1]
            recompile.numbers["burst_compile_ns"] = burst_ns
        recompile.sources.extend(where(source, line) for line in burst_lines[:3])
    if recompile is not None:
        compile_block = metric_block(source, "CompileTime")
        recompile.sources.append(where(source, compile_block.line if compile_block else 0))
        if series is not None and "compiles" in series.first_increase:
            step, line = series.first_increase["compiles"]
            recompile.evidence.append(f"first compile after warm-up in step {int(step)}")
            recompile.sources.append(where(source, line))
        findings.append(recompile)
    transfer_block = metric_block(source, "TransferFromDeviceTime")
    transfers = analysis.host_transfer_finding(steps=facts.steps, transfers=facts.transfers, item_calls=facts.item_calls,
                                            fallback_calls=sum(facts.fallbacks.values()), executions=facts.executions,
                                            steady=facts.steady_transfers)
    if transfers is not None:
        if transfer_block is not None:
            transfers.sources.append(where(source, transfer_block.line))
        if analysis.ITEM_COUNTER in final.counter_lines:
            transfers.sources.append(where(source, final.counter_lines[analysis.ITEM_COUNTER]))
        findings.append(transfers)
    for finding in analysis.fallback_findings(facts.fallbacks, facts.steps):
        finding.sources.append(where(source, final.counter_lines.get(finding.subject)))
        findings.append(finding)
    findings.extend(_cost_findings(facts))
    return findings


def _cost_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    series = source.series
    findings = []
    compile_block = metric_block(source, "CompileTime")
    if compile_block is not None and compile_block.largest_percentile() is not None:
        longest = compile_block.largest_percentile()
        finding = analysis.slow_compile_finding(
            longest_ns=longest, total_ns=compile_block.accumulator or 0.0, compiles=compile_block.total_samples or 0,
            formatted_longest=units.compact_time_ns(longest),
            formatted_total=units.compact_time_ns(compile_block.accumulator or 0.0))
        if finding is not None:
            finding.sources.append(where(source, compile_block.line))
            findings.append(finding)
    execute_block = metric_block(source, "ExecuteTime")
    if execute_block is not None and execute_block.largest_percentile() is not None:
        longest = execute_block.largest_percentile()
        finding = analysis.slow_execute_finding(longest_ns=longest, executions=execute_block.total_samples or 0,
                                             formatted_longest=units.compact_time_ns(longest))
        if finding is not None:
            finding.sources.append(where(source, execute_block.line))
            findings.append(finding)
    graph_block = metric_block(source, "TensorsGraphSize")
    if graph_block is not None and graph_block.largest_percentile() is not None:
        finding = analysis.huge_graph_finding(largest_nodes=graph_block.largest_percentile(),
                                           typical_nodes=graph_block.median() or 0.0)
        if finding is not None:
            finding.sources.append(where(source, graph_block.line))
            findings.append(finding)
    if series is not None:
        first, last = series.graph_nodes_per_sync
        if first is not None and last is not None:
            finding = analysis.graph_growth_finding(nodes_at_warmup=first, nodes_at_end=last, steps=facts.steps)
            if finding is not None:
                findings.append(finding)
    misses = int(source.final.counters.get("DeviceDataCacheMiss", 0))
    after = None
    if series is not None and series.at_warmup is not None and len(series) > 1:
        after = misses - int(series.at_warmup.get("cache_misses", 0))
    finding = analysis.device_data_cache_miss_finding(
        misses=misses, steps=facts.steps, misses_after_warmup=after,
        steps_after_warmup=max(0, facts.steps - facts.warmup_steps))
    if finding is not None:
        finding.sources.append(where(source, source.final.counter_lines.get("DeviceDataCacheMiss")))
        findings.append(finding)
    return findings


def diagnose_group(report, sources: list[SourceResult]) -> tuple[list[Finding], RunFacts | None]:
    """Findings of one run or rank, and the facts they were computed from."""
    primary = report.primary_metrics(sources)
    facts = (with_summary_counts(with_debug_warmup(metrics_facts(report, primary), sources), sources)
             if primary is not None else debug_facts(sources))
    if facts is not None:
        facts.repeated = repeated_recompiles(sources, facts.steps) or repeated_in_series(primary, facts.warmup_steps)
    if primary is not None:
        findings = _metrics_findings(facts)
    else:
        findings = debug_only_findings(sources, facts) if facts is not None else []
    if facts is not None:
        debug_hashes = {event.graph_hash for source in sources if source.has_debug
                        for event in source.run.compiled}
        facts.graph_hashes |= debug_hashes
    findings.extend(debug_evidence(findings, sources, facts.steps if facts else 0,
                                   reads_after_setup=facts.steady_transfers[0] if facts and facts.steady_transfers
                                   and facts.steady_transfers[1] > 0 else None))
    growth = growth_findings(sources, facts)
    if growth and facts is not None and facts.steps == 0:
        # A run that never marked a step ran its one graph where a value was read: that read is the missing
        # barrier's evidence, not a habit of its steps.
        findings[:] = [f for f in findings if f.rule != "early-sync"]
    findings.extend(growth)
    findings.extend(memory_growth_findings(sources))
    findings.extend(dynamo_findings(sources))
    findings.extend(_failure_findings(primary, sources))
    breakdown = timing.group_breakdown(sources, primary)
    if breakdown is not None:
        if facts is not None:
            facts.time = breakdown
        costs = timing.cost_facts(facts, sources, breakdown)
        wall_time.with_cache_advice(findings, costs)
        wall_time.price(findings, costs)
    return findings, facts


def _failure_findings(primary: SourceResult | None, sources: list[SourceResult]) -> list[Finding]:
    """Compile and execution failures, from the counters (metrics) and each failure's details (logs)."""
    counters = primary.final.counters if primary is not None and primary.final is not None else {}
    runs = [(source, source.run.failures) for source in sources if source.has_debug]
    found = []
    memory = analysis.out_of_memory_finding([e for _, run in runs for e in run.out_of_memory], units.format_bytes)
    if memory is not None:
        memory.sources.extend(f"{source.name}:{e['line']}" for source, run in runs for e in run.out_of_memory)
        found.append(memory)
    for kind, counter in (("compile", "CompileFailed"), ("execute", "ExecuteFailed")):
        # A graph that ran out of memory is the out-of-memory finding's, not a failure to report twice.
        failures, oom = [], 0
        for source, run in runs:
            failed, ran_out = run.of_kind(kind)
            failures += [(source, failure) for failure in failed]
            oom += ran_out
        finding = analysis.failure_finding(kind=kind, count=int(counters.get(counter, 0)) - oom,
                                           failures=[failure.facts() for _, failure in failures])
        if finding is not None:
            finding.sources.extend(f"{source.name}:{failure.line}" for source, failure in failures)
            if counter in counters and primary is not None:
                finding.sources.append(where(primary, primary.final.counter_lines.get(counter)))
            found.append(finding)
    return found


def _merge_ranks(per_rank: dict) -> list[Finding]:
    merged: dict[tuple[str, str], Finding] = {}
    ranks_of: dict[tuple[str, str], list] = {}
    for rank, (findings, _) in per_rank.items():
        for finding in findings:
            key = (finding.rule, finding.subject)
            ranks_of.setdefault(key, []).append(rank)
            kept = merged.get(key)
            if kept is None or analysis.severity_rank(finding.severity) > analysis.severity_rank(kept.severity):
                merged[key] = finding
    for key, finding in merged.items():
        named = [str(rank) for rank in ranks_of[key] if rank is not None]
        if named and len(per_rank) > 1:
            finding.evidence.append(f"on rank{'s' if len(named) > 1 else ''} {', '.join(named)}")
    return list(merged.values())


def _rank_findings(per_rank: dict) -> list[Finding]:
    ranked = {rank: facts for rank, (_, facts) in per_rank.items() if rank is not None and facts is not None}
    findings = []
    for rank, facts in ranked.items():
        others = [other for other_rank, other in ranked.items() if other_rank != rank]
        if not others:
            continue
        shared = set.intersection(*(other.graph_hashes for other in others)) if all(
            other.graph_hashes for other in others) else set()
        extra = len(facts.graph_hashes - shared - {""}) if shared else 0
        finding = analysis.rank_divergence_finding(rank=rank, compiles=facts.compiles,
                                                others_compiles=[other.compiles for other in others],
                                                extra_graphs=extra)
        if finding is not None:
            if facts.source is not None:
                finding.sources.append(facts.source.name)
            findings.append(finding)
    return findings


# Counters only xladev's runtime keeps (PyTorch/XLA counts executions as ExecuteComputation): a metrics report
# holding one was written by xladev.
_XLADEV_COUNTERS = frozenset({"ExecuteGraph", "ValueAccessSync", "FallbackSync", "ExecuteFailed", "CompileFailed"})


def run_stack(sources: list[SourceResult]) -> str:
    """Whose API names the advice should use: the script's.

    ``torch_xla`` for PyTorch/XLA's own outputs and for a script run through xladev's torch_xla alias (`xladev run`:
    an event log's header or xladev's summary says so, and its metrics count `analysis.ALIAS_COUNTER` as
    PyTorch/XLA's do); ``xladev`` for the other outputs xladev wrote (an event log, its end-of-run summary, its
    counters, its recompilation causes).
    """
    xladev_wrote = False
    for source in sources:
        summary = source.debug.run_summary if source.debug is not None else None
        said = source.api or (summary or {}).get("api")
        if said:
            return said
        counters = source.final.counters if source.final is not None else {}
        if _XLADEV_COUNTERS & set(counters):
            if analysis.ALIAS_COUNTER in counters:
                return analysis.TORCH_XLA_API
            xladev_wrote = True
        debug = source.debug
        if source.input_kind == "event-log" or (debug is not None and (
                debug.run_summary is not None or debug.run.failures.graphs
                or any(event.changes for event in debug.run.compiled))):
            xladev_wrote = True
    return analysis.XLADEV_API if xladev_wrote else analysis.TORCH_XLA_API


def diagnose(report) -> list[Finding]:
    """All findings of a report, most severe first; a ``healthy`` finding when nothing is wrong.

    Args:
      report: a `xladev.report.Report`.

    Returns:
      The findings.
    """
    if not report.has_record:
        return [analysis.no_complete_record_finding([(source.name, source.problem or "no complete record",
                                                   bool(source.damage)) for source in report.sources])]
    per_rank = {rank: diagnose_group(report, sources) for rank, sources in report.ranks().items()}
    findings = _merge_ranks(per_rank) if len(per_rank) > 1 else next(iter(per_rank.values()))[0]
    findings.extend(_rank_findings(per_rank))
    findings.extend(across_ranks.findings(report.ranks()))
    findings = _with_unfinished(findings, report.sources)
    findings.extend(_input_findings(report.sources))
    if not any(analysis.severity_rank(f.severity) >= analysis.severity_rank(analysis.WARNING) for f in findings):
        facts = next((facts for _, facts in per_rank.values() if facts is not None), None)
        if facts is not None and facts.steps <= 0:
            findings.append(analysis.undetermined_finding(compiles=facts.compiles, executions=facts.executions))
        elif facts is not None:
            findings.append(analysis.healthy_finding(
                steps=facts.steps, compiles=facts.compiles, cached_compiles=facts.cached_compiles,
                transfers=facts.transfers, warmup_known=facts.compiles_at_warmup is not None
                and facts.compiles_at_warmup + facts.compiles_after_last_step == facts.compiles,
                steady_transfers=facts.steady_transfers[0] if facts.steady_transfers else None,
                steps_ran_a_graph=facts.steps_ran_a_graph))
    stack = run_stack(report.sources)
    for finding in findings:
        finding.sources = list(dict.fromkeys(finding.sources))
        analysis.in_names_of(finding, stack)
    return wall_time.ranked(findings, _RULE_ORDER)


def _with_unfinished(findings: list[Finding], sources: list[SourceResult]) -> list[Finding]:
    """The findings, with one saying the job did not finish when a log shows it stopped (`SourceResult.ending`).

    It names the rank that stopped first: one killed (no end record) before those a signal ended (torchrun's
    SIGTERM to the others after one failed), the earliest of those. The other ranks that stopped, and what the
    ranks saw of each other (`rank-lost`), become its evidence.
    """
    logged = {source.rank for source in sources if source.input_kind == "event-log"}
    # An xladev debug log says how its run stopped when no event log of that rank does (read afresh each time: a
    # live log may yet get its summary).
    endings = [(source, source.ending or (_debug_ending(source) if source.rank not in logged else None))
               for source in sources]
    # A damaged file (a gzip cut short) lost its end with the damage: its own finding says so.
    stopped = [(source, ending) for source, ending in endings if ending is not None and not source.damage]
    if not stopped:
        return findings
    stopped.sort(key=lambda pair: (not pair[1].killed, pair[1].ended_unix if pair[1].ended_unix is not None
                                   else float("inf"), pair[0].rank if pair[0].rank is not None else -1))
    first, ending = stopped[0]
    others = [f"rank {source.rank}: {other.how}" + (f" in step {other.steps}" if other.steps is not None else "")
              + ", later" for source, other in stopped[1:]]
    kept = []
    for finding in findings:
        if finding.rule == "rank-lost":  # what the others saw of it: evidence of the same stop
            others.extend(finding.evidence)
            continue
        kept.append(finding)
    finding = analysis.unfinished_run_finding(rank=first.rank, how=ending.how, killed=ending.killed, steps=ending.steps,
                                           graph=ending.graph, site=short_site(ending.site) if ending.site else "",
                                           doing=ending.doing, others=others)
    finding.sources.extend(f"{source.name}:{stop.line}" for source, stop in stopped)
    return [finding] + kept


def _debug_ending(source: SourceResult) -> RunEnding | None:
    """How the run of an xladev PT_XLA_DEBUG log stopped, when it did not end on its own: its summary names the
    signal that ended it, or the log has no summary at all, which xladev writes at every exit it lives to see
    (killed, or still running). PyTorch/XLA's own logs never have one: xladev's are told by the user's frame it
    marks (``> ``)."""
    debug = source.debug
    if debug is None or source.input_kind == "event-log":
        return None
    summary = debug.run_summary
    if summary is not None:
        return (RunEnding(how=summary["ended"], killed=False, steps=summary["steps"], line=summary["line"])
                if summary.get("ended") else None)
    events = debug.run.compiled
    if not debug.written_by_xladev or not events:
        return None
    last = events[-1]
    # Without execution analyses (PT_XLA_DEBUG_LEVEL=1 prints compiles only) the log counts no step: none is claimed.
    steps = debug.step_syncs if debug.run.executions else None
    return RunEnding(how="no end record", killed=True, steps=steps, graph=last.graph_hash,
                     site=last.site, doing="the last graph its log compiled", line=source.lines)


def _input_findings(sources: list[SourceResult]) -> list[Finding]:
    """A warning per damaged input (judged on the records before the damage) and per unreadable one."""
    findings = []
    for source in sources:
        if source.damage:
            findings.append(analysis.damaged_input_finding(source.name, source.damage, _records_read(source),
                                                        source.lines))
        elif source.unreadable and source.problem:
            findings.append(analysis.unreadable_input_finding(source.name, source.problem))
    return findings


def _records_read(source: SourceResult) -> str:
    """What an input gave, in the words of its kind: ``12 complete metrics reports``, ``30 steps`` ..."""
    if not source.has_record:
        return "no complete record"
    parts = []
    if source.input_kind == "event-log":
        steps = int(source.final.counters.get("MarkStep", 0)) if source.final else 0
        parts.append(f"{steps} steps of an xladev event log")
    elif source.snapshots:
        parts.append(f"{source.snapshots} complete metrics report{'s' if source.snapshots != 1 else ''}")
    if source.has_debug and source.input_kind != "event-log":
        parts.append(f"{source.debug.compiles} compile and {source.run.executions} execution analyses")
    return ", ".join(parts)


def auto_metrics_lines(report) -> list[str]:
    """What PyTorch/XLA's own auto-metrics analysis would print for the primary input."""
    source = report.primary_metrics(report.sources)
    if source is None:
        return []
    numbers = report.final_numbers(source)
    compile_block = metric_block(source, "CompileTime")
    execute_block = metric_block(source, "ExecuteTime")
    return analysis.auto_metrics_messages(
        steps=int(numbers["steps"]), compiles=int(numbers["compiles"]), transfers=int(numbers["transfers_from_device"]),
        counters=source.final.counters,
        longest_compile_ns=(compile_block.largest_percentile() or 0.0) if compile_block else 0.0,
        longest_execute_ns=(execute_block.largest_percentile() or 0.0) if execute_block else 0.0,
        format_time=units.format_time_ns)
