"""Turns what was read into findings, by calling the rules of `xladev.rules` with its numbers.

Each rank (or the single run) is diagnosed from its primary metrics input (the one with the most
reports) and its PT_XLA_DEBUG logs; findings of several ranks are merged, and ranks that compile
graphs the others do not are flagged. Evidence carries the input line numbers it came from.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from xladev import fallback_reasons, graphdiff, rules, wall_time
from xladev.report import timing
from xladev.schema import units
from xladev.schema.counters import SCALAR_READS
from xladev.schema.sites import short_site
from xladev.report.debuglog import is_step_cause
from xladev.report.model import MetricBlock, SourceResult
from xladev.rules import Finding

_RULE_ORDER = ["compile-failure", "execute-failure", "recompilation", "host-transfers", "cpu-fallback", "early-sync", "rank-divergence", "slow-compile",
               "slow-execute", "huge-graph", "graph-growth", "device-data-cache-miss", "compile-time", "not-enough-evidence",
               "healthy"]


@dataclasses.dataclass
class RunFacts:
    """The numbers of one run (or rank) that the rules need."""

    source: SourceResult | None = None
    steps: int = 0
    compiles: int = 0
    cached_compiles: int = 0
    executions: int = 0
    transfers: int = 0
    item_calls: int = 0
    fallbacks: dict[str, int] = dataclasses.field(default_factory=dict)
    warmup_steps: int = rules.WARMUP_STEPS
    compiles_at_warmup: int | None = None
    compile_steps_after_warmup: int | None = None
    last_compile_step: int | None = None
    stable_graph_size: bool | None = None
    graph_hashes: set[str] = dataclasses.field(default_factory=set)
    time: wall_time.TimeBreakdown | None = None
    repeated: rules.RepeatedRecompiles | None = None


def _where(source: SourceResult, line: float | int | None) -> str:
    return f"{source.name}:{int(line)}" if line else source.name


def metrics_facts(report, source: SourceResult) -> RunFacts:
    """Reads the rule inputs from an input's last report and its per-step series."""
    numbers = report.final_numbers(source)
    facts = RunFacts(source=source, steps=int(numbers["steps"]), compiles=int(numbers["compiles"]),
                     cached_compiles=int(numbers["cached_compiles"]), executions=int(numbers["executions"]),
                     transfers=int(numbers["transfers_from_device"]), item_calls=int(numbers["item_calls"]),
                     fallbacks={name: value for name, value in source.final.counters.items()
                                if name in rules.fallback_ops(source.final.counters)})
    if facts.steps <= 0 and (source.step_records or source.final.step):
        # No MarkStep counter (older reports): XLA_METRICS_FILE's [MetricsData; step=N] records count the steps.
        facts.steps = max(source.step_records, source.final.step or 0)
    series = source.series
    if series is not None and len(series) > 1:
        baseline = series.at_warmup
        if baseline is None:  # the file starts after warm-up: its first report is the baseline
            baseline = series.first
            facts.warmup_steps = int(baseline["steps"])
        facts.compiles_at_warmup = int(baseline["compiles"])
        facts.compile_steps_after_warmup = series.increases_after_warmup["compiles"]
        last = series.last_increase_steps.get("compiles")
        facts.last_compile_step = None if last is None else int(last)
        facts.stable_graph_size = series.stable_graph_size()
    return facts


def debug_facts(sources: list[SourceResult]) -> RunFacts | None:
    """Reads the rule inputs from PT_XLA_DEBUG logs alone (no metrics report)."""
    logs = [source.debug for source in sources if source.has_debug]
    if not logs:
        return None
    events = [event for log in logs for event in log.compile_events]
    steps = sum(log.step_syncs for log in logs)
    facts = RunFacts(steps=steps, compiles=sum(log.compiles for log in logs),
                     executions=sum(log.execution_count for log in logs),
                     graph_hashes={event.graph_hash for event in events})
    for log in logs:  # xladev's end-of-run summary counts exactly what the blocks only sample
        summary = log.run_summary
        if summary is not None:
            facts.steps = max(facts.steps, summary["steps"])
            facts.compiles = max(facts.compiles, summary["compiles"])
            facts.transfers += summary["transfers"]
            facts.item_calls += sum(s["count"] for s in summary["hot_spots"] if s["kind"] in SCALAR_READS)
            for entry in summary["fallbacks"]:
                facts.fallbacks[entry["op"]] = facts.fallbacks.get(entry["op"], 0) + entry["count"]
    for log in logs:  # PyTorch/XLA's auto-analysis lines count steps, compiles and transfers (a lower bound)
        for kind, numbers in log.profiler_numbers.items():
            facts.steps = max(facts.steps, int(numbers.get("steps", 0)))
            if kind == "CompileTime too frequent":
                facts.compiles = max(facts.compiles, int(numbers["count"]))
            elif kind == "TransferFromDeviceTime too frequent":
                facts.transfers = max(facts.transfers, int(numbers["count"]))
    steps = facts.steps
    if steps > facts.warmup_steps:
        facts.compiles_at_warmup = sum(1 for event in events if event.steps_before < facts.warmup_steps)
        late = [event for event in events if event.steps_before >= facts.warmup_steps]
        after = {event.steps_before for event in late}
        facts.compile_steps_after_warmup = len(after)
        facts.last_compile_step = max(after) + 1 if after else None
        if len(late) > 1 and len({(e.site, e.inputs, e.outputs) for e in late}) == 1:
            facts.stable_graph_size = len({event.graph_hash for event in late}) == len(late)
    return facts


def _block(source: SourceResult | None, *names: str) -> MetricBlock | None:
    if source is None or source.final is None:
        return None
    for name in names:
        if name in source.final.metrics:
            return source.final.metrics[name]
    return None


def _metrics_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    final = source.final
    series = source.series
    findings = []
    data_dependent = [name for name, count in facts.fallbacks.items()
                      if fallback_reasons.is_data_dependent(name)]
    compile_block = _block(source, "CompileTime", "XrtCompile")
    if facts.steps <= 0:
        percentiles = dict(compile_block.percentiles) if compile_block is not None else {}
        recompile = rules.recompilation_without_steps(compiles=facts.compiles, executions=facts.executions,
                                                      median_compile_ns=percentiles.get("50%"),
                                                      p90_compile_ns=percentiles.get("90%"))
    else:
        recompile = None
    recompile = recompile or rules.recompilation_finding(
        steps=facts.steps, compiles=facts.compiles, compiles_at_warmup=facts.compiles_at_warmup,
        warmup_steps=facts.warmup_steps, compile_steps_after_warmup=facts.compile_steps_after_warmup,
        last_compile_step=facts.last_compile_step, stable_graph_size=facts.stable_graph_size,
        data_dependent_ops=data_dependent, repeated=facts.repeated)
    if recompile is not None:
        compile_block = _block(source, "CompileTime", "XrtCompile")
        recompile.sources.append(_where(source, compile_block.line if compile_block else 0))
        if series is not None and "compiles" in series.first_increase:
            step, line = series.first_increase["compiles"]
            recompile.evidence.append(f"first compile after warm-up in step {int(step)}")
            recompile.sources.append(_where(source, line))
        findings.append(recompile)
    transfer_block = _block(source, "TransferFromDeviceTime", "TransferFromServerTime")
    transfers = rules.host_transfer_finding(steps=facts.steps, transfers=facts.transfers, item_calls=facts.item_calls,
                                            fallback_calls=sum(facts.fallbacks.values()), executions=facts.executions)
    if transfers is not None:
        if transfer_block is not None:
            transfers.sources.append(_where(source, transfer_block.line))
        if rules.ITEM_COUNTER in final.counter_lines:
            transfers.sources.append(_where(source, final.counter_lines[rules.ITEM_COUNTER]))
        findings.append(transfers)
    for finding in rules.fallback_findings(facts.fallbacks, facts.steps):
        finding.sources.append(_where(source, final.counter_lines.get(finding.subject)))
        findings.append(finding)
    findings.extend(_cost_findings(facts))
    return findings


def _cost_findings(facts: RunFacts) -> list[Finding]:
    source = facts.source
    series = source.series
    findings = []
    compile_block = _block(source, "CompileTime", "XrtCompile")
    if compile_block is not None and compile_block.largest_percentile() is not None:
        longest = compile_block.largest_percentile()
        finding = rules.slow_compile_finding(
            longest_ns=longest, total_ns=compile_block.accumulator or 0.0, compiles=compile_block.total_samples or 0,
            formatted_longest=units.compact_time_ns(longest),
            formatted_total=units.compact_time_ns(compile_block.accumulator or 0.0))
        if finding is not None:
            finding.sources.append(_where(source, compile_block.line))
            findings.append(finding)
    execute_block = _block(source, "ExecuteTime", "XrtExecute")
    if execute_block is not None and execute_block.largest_percentile() is not None:
        longest = execute_block.largest_percentile()
        finding = rules.slow_execute_finding(longest_ns=longest, executions=execute_block.total_samples or 0,
                                             formatted_longest=units.compact_time_ns(longest))
        if finding is not None:
            finding.sources.append(_where(source, execute_block.line))
            findings.append(finding)
    graph_block = _block(source, "TensorsGraphSize")
    if graph_block is not None and graph_block.largest_percentile() is not None:
        finding = rules.huge_graph_finding(largest_nodes=graph_block.largest_percentile(),
                                           typical_nodes=graph_block.median() or 0.0)
        if finding is not None:
            finding.sources.append(_where(source, graph_block.line))
            findings.append(finding)
    if series is not None:
        first, last = series.graph_nodes_per_sync
        if first is not None and last is not None:
            finding = rules.graph_growth_finding(nodes_at_warmup=first, nodes_at_end=last, steps=facts.steps)
            if finding is not None:
                findings.append(finding)
    misses = int(source.final.counters.get("DeviceDataCacheMiss", 0))
    after = None
    if series is not None and series.at_warmup is not None and len(series) > 1:
        after = misses - int(series.at_warmup.get("cache_misses", 0))
    finding = rules.device_data_cache_miss_finding(
        misses=misses, steps=facts.steps, misses_after_warmup=after,
        steps_after_warmup=max(0, facts.steps - facts.warmup_steps))
    if finding is not None:
        finding.sources.append(_where(source, source.final.counter_lines.get("DeviceDataCacheMiss")))
        findings.append(finding)
    return findings


def _value_read_sites(sources: list[SourceResult]) -> tuple[Counter, dict]:
    sites: Counter = Counter()
    first_lines: dict = {}
    for source in sources:
        if source.debug is None:
            continue
        for (site, cause, _), (count, line, _, _) in source.debug.executions.items():
            if not is_step_cause(cause):
                sites[(site, cause, source.name)] += count
                first_lines.setdefault((site, cause, source.name), f"{source.name}:{line}")
    return sites, first_lines


def _debug_evidence(findings: list[Finding], sources: list[SourceResult], steps: int) -> list[Finding]:
    """Adds where-from evidence of the debug logs to findings, or makes debug-only findings."""
    extra: list[Finding] = []
    logs = [source for source in sources if source.has_debug]
    if not logs:
        return extra
    by_rule = {finding.rule: finding for finding in findings}
    compile_sites: dict[str, list] = {}
    for source in logs:
        for event in source.debug.compile_events:
            entry = compile_sites.setdefault(event.site or "?", [0, set(), set(), source.name, event.line])
            entry[0] += 1
            entry[1].add(event.graph_hash)
            entry[2].add((event.inputs, event.outputs))
    recompile = by_rule.get("recompilation")
    if recompile is not None:
        for site, (count, hashes, signatures, name, line) in sorted(compile_sites.items(), key=lambda kv: -kv[1][0])[:3]:
            text = f"{site}: {_count(count, 'compile')}, {_count(len(hashes), 'different graph')}"
            if len(signatures) == 1 and len(hashes) > 1:
                inputs, outputs = next(iter(signatures))
                text += (f", all with {inputs} inputs and {outputs} outputs: the same code traced with "
                         "different shapes")
            recompile.evidence.append(text)
            recompile.sources.append(f"{name}:{line}")
        # xladev's debug logs say what changed at each recompilation: quote the latest per site.
        latest: dict[str, list[str]] = {}
        for source in logs:
            for event in source.debug.compile_events:
                changes = [line[2:] for line in event.recompilation if line.startswith("- ")]
                if changes:
                    latest[event.site or "?"] = changes
        for site, changes in list(latest.items())[:3]:
            recompile.evidence.append(f"what changed at {site} (last recompile): " + "; ".join(changes[:2]))
    reads, first_lines = _value_read_sites(logs)
    target = by_rule.get("host-transfers") or by_rule.get("cpu-fallback")
    for key, count in reads.most_common(3):
        site, cause, _ = key
        if target is not None:
            target.evidence.append(f"{site} forced {count} executions ({cause})")
            target.sources.append(first_lines[key])
        else:
            finding = rules.early_sync_finding(site=site, executions=count, steps=steps, cause=cause)
            if finding is not None:
                finding.sources.append(first_lines[key])
                extra.append(finding)
    fallback = next((finding for finding in findings if finding.rule == "cpu-fallback"), None)
    sites = [f"{entry['frames'][0]} ×{entry['count']}" for source in logs for entry in source.debug.fallback_sites
             if entry["frames"]]
    if fallback is not None and sites:
        fallback.evidence.append("CPU fallback calls by site (all ops): " + ", ".join(sites[:5]))
    return extra


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _debug_only_findings(sources: list[SourceResult], facts: RunFacts) -> list[Finding]:
    findings = []
    recompile = rules.recompilation_finding(
        steps=facts.steps, compiles=facts.compiles, compiles_at_warmup=facts.compiles_at_warmup,
        warmup_steps=facts.warmup_steps, compile_steps_after_warmup=facts.compile_steps_after_warmup,
        last_compile_step=facts.last_compile_step, stable_graph_size=facts.stable_graph_size,
        repeated=facts.repeated)
    if recompile is not None:
        recompile.evidence.insert(0, f"from PT_XLA_DEBUG blocks: {facts.compiles} compiles, "
                                     f"{facts.steps} step syncs")
        findings.append(recompile)
    summaries = [(source, source.debug.run_summary) for source in sources
                 if source.has_debug and source.debug.run_summary is not None]
    transfers = rules.host_transfer_finding(steps=facts.steps, transfers=facts.transfers, item_calls=facts.item_calls,
                                            fallback_calls=sum(facts.fallbacks.values()), executions=facts.executions)
    if transfers is not None:
        for source, summary in summaries:  # the user's lines, from the summary's hot spots
            for spot in summary["hot_spots"][:3]:
                transfers.evidence.append(f"{spot['kind']} at {spot['site']}: {spot['count']} transfers, "
                                          f"{spot['per_step']:.2f} per step")
                transfers.sources.append(f"{source.name}:{spot['line']}")
        findings.append(transfers)
    counted = rules.fallback_findings(facts.fallbacks, facts.steps)
    for finding in counted:
        for source, summary in summaries:
            for entry in summary["fallbacks"]:
                if entry["op"] == finding.subject:
                    finding.evidence.append(f"{entry['op']} at {entry['site']}: {entry['count']} calls")
                    finding.sources.append(f"{source.name}:{entry['line']}")
        findings.append(finding)
    ops = sorted({op for source in sources if source.has_debug for op in source.debug.not_lowered_ops}
                 - {finding.subject for finding in counted})
    for op in ops:
        findings.append(Finding("cpu-fallback", rules.WARNING, f"{op} runs on the CPU",
                                "PyTorch/XLA reported this op as not lowered: it runs on the CPU fallback"
                                + (f" ({fallback_reasons.explanation(op)})." if fallback_reasons.cpu_op(op) else "."),
                                rules.fallback_remedy(op), evidence=["pt-xla-profiler: Op(s) not lowered"],
                                subject=op))
    return findings


def _repeated_in_series(source: SourceResult | None, warmup_steps: int) -> rules.RepeatedRecompiles | None:
    """Warm-up steps that compiled a graph of the same size as the step before: the same code, new shapes.

    From a per-step metrics file alone (no recompilation causes): the first two steps are skipped (the
    optimizer's state makes the second step's graph differ), then every later warm-up step whose
    graph compiled while its IR-node count per sync stayed the same counts.
    """
    series = source.series if source is not None else None
    if series is None or len(series) < 4:
        return None
    columns = series.columns()
    steps, compiles = columns.get("steps", []), columns.get("compiles", [])
    nodes, syncs = columns.get("graph_nodes", []), columns.get("graph_syncs", [])
    if not (steps and compiles and nodes and syncs):
        return None
    count, previous_size = 0, None
    for i in range(1, len(steps)):
        if steps[i] > warmup_steps or steps[i] - steps[i - 1] != 1:
            break  # only consecutive per-step reports inside warm-up
        new_syncs = syncs[i] - syncs[i - 1]
        size = (nodes[i] - nodes[i - 1]) / new_syncs if new_syncs > 0 else None
        if steps[i] > 2 and compiles[i] > compiles[i - 1] and size is not None and size == previous_size:
            count += int(compiles[i] - compiles[i - 1])
        previous_size = size
    if not count:
        return None
    return rules.RepeatedRecompiles(site="one training step", count=count, kind="input shape or constant",
                                    example="warm-up steps compiled new graphs of the same size as the step before")


def repeated_recompiles(sources: list[SourceResult]) -> rules.RepeatedRecompiles | None:
    """The site that recompiled most for a changed input shape or constant alone (xladev's causes)."""
    counts: Counter = Counter()
    examples: dict = {}
    signatures: dict = {}
    for source in sources:
        if not source.has_debug:
            continue
        for event in source.debug.compile_events:
            if not event.recompilation:  # PyTorch/XLA's blocks: new graphs of one site and signature
                signatures.setdefault((event.site or "?", event.inputs, event.outputs), set()).add(event.graph_hash)
            changes = [line[2:] for line in event.recompilation if line.startswith("- ")]
            kind = graphdiff.recompile_kind(changes) if changes else graphdiff.STRUCTURE
            if kind != graphdiff.STRUCTURE:
                key = (event.site or "?", kind)
                counts[key] += 1
                examples.setdefault(key, changes[0])
    for (site, inputs, outputs), hashes in signatures.items() if not counts else ():
        # (xladev's causes, when present, say exactly what changed)
        if len(hashes) < 2:
            continue
        key = (site, "input shape or constant")
        if len(hashes) - 1 > counts.get(key, 0):
            counts[key] = len(hashes) - 1
            examples[key] = (f"{len(hashes)} different graphs at {short_site(site)}, all with {inputs} inputs and "
                             f"{outputs} outputs")
    if not counts:
        return None
    (site, kind), count = counts.most_common(1)[0]
    return rules.RepeatedRecompiles(site=short_site(site), count=count, kind=kind, example=examples[(site, kind)])


def diagnose_group(report, sources: list[SourceResult]) -> tuple[list[Finding], RunFacts | None]:
    """Findings of one run or rank, and the facts they were computed from."""
    primary = report.primary_metrics(sources)
    facts = metrics_facts(report, primary) if primary is not None else debug_facts(sources)
    if facts is not None:
        facts.repeated = repeated_recompiles(sources) or _repeated_in_series(primary, facts.warmup_steps)
    if primary is not None:
        findings = _metrics_findings(facts)
    else:
        findings = _debug_only_findings(sources, facts) if facts is not None else []
    if facts is not None:
        debug_hashes = {event.graph_hash for source in sources if source.has_debug
                        for event in source.debug.compile_events}
        facts.graph_hashes |= debug_hashes
    findings.extend(_debug_evidence(findings, sources, facts.steps if facts else 0))
    findings.extend(_growth_findings(sources))
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
    found = []
    for kind, counter in (("compile", "CompileFailed"), ("execute", "ExecuteFailed")):
        failures = [f for source in sources if source.has_debug for f in source.debug.failures if f["kind"] == kind]
        finding = rules.failure_finding(kind=kind, count=int(counters.get(counter, 0)), failures=failures)
        if finding is not None:
            finding.sources.extend(f"{source.name}:{f['line']}" for source in sources if source.has_debug
                                   for f in source.debug.failures if f["kind"] == kind)
            if counter in counters and primary is not None:
                finding.sources.append(_where(primary, primary.final.counter_lines.get(counter)))
            found.append(finding)
    return found


def _growth_findings(sources: list[SourceResult]) -> list[Finding]:
    """The runtime's "graph growing without a barrier" warnings, from a debug log or an event log."""
    findings = []
    for source in sources:
        if not source.has_debug:
            continue
        seen = source.debug.profiler.get(rules.GRAPH_GROWING)
        numbers = rules.parse_graph_growing(seen[1]) if seen else None
        if numbers is None:
            continue
        finding = rules.graph_growing_finding(warnings=seen[2], **numbers)
        finding.sources.append(_where(source, seen[0]))
        findings.append(finding)
    return findings


def _merge_ranks(per_rank: dict) -> list[Finding]:
    merged: dict[tuple[str, str], Finding] = {}
    ranks_of: dict[tuple[str, str], list] = {}
    for rank, (findings, _) in per_rank.items():
        for finding in findings:
            key = (finding.rule, finding.subject)
            ranks_of.setdefault(key, []).append(rank)
            kept = merged.get(key)
            if kept is None or rules.severity_rank(finding.severity) > rules.severity_rank(kept.severity):
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
        finding = rules.rank_divergence_finding(rank=rank, compiles=facts.compiles,
                                                others_compiles=[other.compiles for other in others],
                                                extra_graphs=extra)
        if finding is not None:
            if facts.source is not None:
                finding.sources.append(facts.source.name)
            findings.append(finding)
    return findings


# Counters only xladev's runtime keeps: a metrics report holding one was written by xladev.
_XLADEV_COUNTERS = frozenset({"ValueAccessSync", "FallbackSync", "ExecuteFailed", "CompileFailed"})


def run_stack(sources: list[SourceResult]) -> str:
    """``xladev`` when any input shows xladev wrote it (an event log, its end-of-run summary, its counters,
    its recompilation causes), else ``torch_xla``: whose API names the advice should use."""
    for source in sources:
        if source.input_kind == "event-log":
            return "xladev"
        if source.final is not None and _XLADEV_COUNTERS & set(source.final.counters):
            return "xladev"
        debug = source.debug
        if debug is not None and (debug.run_summary is not None or debug.failures
                                  or any(event.recompilation for event in debug.compile_events)):
            return "xladev"
    return "torch_xla"


def diagnose(report) -> list[Finding]:
    """All findings of a report, most severe first; a ``healthy`` finding when nothing is wrong.

    Args:
      report: a `xladev.report.Report`.

    Returns:
      The findings.
    """
    per_rank = {rank: diagnose_group(report, sources) for rank, sources in report.ranks().items()}
    findings = _merge_ranks(per_rank) if len(per_rank) > 1 else next(iter(per_rank.values()))[0]
    findings.extend(_rank_findings(per_rank))
    if not any(rules.severity_rank(f.severity) >= rules.severity_rank(rules.WARNING) for f in findings):
        facts = next((facts for _, facts in per_rank.values() if facts is not None), None)
        if facts is not None and facts.steps <= 0 and (facts.compiles or facts.executions):
            findings.append(rules.undetermined_finding(compiles=facts.compiles, executions=facts.executions))
        elif facts is not None:
            findings.append(rules.healthy_finding(
                steps=facts.steps, compiles=facts.compiles, cached_compiles=facts.cached_compiles,
                transfers=facts.transfers, warmup_known=facts.compiles_at_warmup is not None
                and facts.compiles_at_warmup == facts.compiles))
    stack = run_stack(report.sources)
    for finding in findings:
        finding.sources = list(dict.fromkeys(finding.sources))
        rules.in_names_of(finding, stack)
    return wall_time.ranked(findings, _RULE_ORDER)


def auto_metrics_lines(report) -> list[str]:
    """What PyTorch/XLA's own auto-metrics analysis would print for the primary input."""
    source = report.primary_metrics(report.sources)
    if source is None:
        return []
    numbers = report.final_numbers(source)
    compile_block = _block(source, "CompileTime")
    execute_block = _block(source, "ExecuteTime")
    return rules.auto_metrics_messages(
        steps=int(numbers["steps"]), compiles=int(numbers["compiles"]), transfers=int(numbers["transfers_from_device"]),
        counters=source.final.counters,
        longest_compile_ns=(compile_block.largest_percentile() or 0.0) if compile_block else 0.0,
        longest_execute_ns=(execute_block.largest_percentile() or 0.0) if execute_block else 0.0,
        format_time=units.format_time_ns)
