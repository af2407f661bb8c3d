"""Findings and evidence from PT_XLA_DEBUG logs: the lines that force executions, the compiles by site,
the runtime's growing-graph warnings, and the findings of a run known only from its debug output."""

from __future__ import annotations

from collections import Counter

from xladev import fallback_reasons, rules
from xladev.report.debuglog import is_program_cause, is_step_cause, user_site
from xladev.report.model import SourceResult
from xladev.report.run_facts import RunFacts, where
from xladev.rules import Finding


def _value_read_sites(sources: list[SourceResult]) -> tuple[Counter, dict]:
    sites: Counter = Counter()
    first_lines: dict = {}
    for source in sources:
        if source.debug is None:
            continue
        for (site, cause, _), (count, line, _, _) in source.debug.executions.items():
            if not is_step_cause(cause) and not is_program_cause(cause):
                sites[(site, cause, source.name)] += count
                first_lines.setdefault((site, cause, source.name), f"{source.name}:{line}")
        if not source.debug.executions:
            # No execution analyses (PT_XLA_DEBUG_LEVEL=1, or a pasted block): each compile ran its graph, for its cause.
            for event in source.debug.compile_events:
                if event.cause and not is_step_cause(event.cause) and not is_program_cause(event.cause):
                    sites[(event.site, event.cause, source.name)] += 1
                    first_lines.setdefault((event.site, event.cause, source.name), f"{source.name}:{event.line}")
    return sites, first_lines


def debug_evidence(findings: list[Finding], sources: list[SourceResult], steps: int) -> list[Finding]:
    """Adds where-from evidence of the debug logs to findings, or makes debug-only findings."""
    extra: list[Finding] = []
    logs = [source for source in sources if source.has_debug]
    if not logs:
        return extra
    by_rule = {finding.rule: finding for finding in findings}
    compile_sites: dict[str, list] = {}
    for source in logs:
        for event in source.debug.compile_events:
            entry = compile_sites.setdefault(event.where, [0, set(), set(), source.name, event.line])
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
                    latest[event.where] = changes
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
    sites = [f"{_user_frame(entry['frames'])} ×{entry['count']}" for source in logs
             for entry in source.debug.fallback_sites if entry["frames"]]
    if fallback is not None and sites:
        fallback.evidence.append("CPU fallback calls by site (all ops): " + ", ".join(sites[:5]))
    return extra


def _user_frame(frames: list[str]) -> str:
    """The user's frame of a printed stack (``fn (file:line)``, innermost first), as printed."""
    site, function = user_site(frames)
    return f"{function} ({site})" if function else (site or frames[0])


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def debug_only_findings(sources: list[SourceResult], facts: RunFacts) -> list[Finding]:
    findings = []
    recompile = rules.recompilation_finding(
        steps=facts.steps, compiles=facts.compiles, compiles_at_warmup=facts.compiles_at_warmup,
        warmup_steps=facts.warmup_steps, compile_steps_after_warmup=facts.compile_steps_after_warmup,
        last_compile_step=facts.last_compile_step, stable_graph_size=facts.stable_graph_size,
        compiles_after_last_step=facts.compiles_after_last_step,
        repeated=facts.repeated)
    if recompile is not None:
        recompile.evidence.insert(0, f"from PT_XLA_DEBUG blocks: {facts.compiles} compiles, "
                                     f"{facts.steps} step syncs")
        findings.append(recompile)
    summaries = [(source, source.debug.run_summary) for source in sources
                 if source.has_debug and source.debug.run_summary is not None]
    transfers = rules.host_transfer_finding(steps=facts.steps, transfers=facts.transfers, item_calls=facts.item_calls,
                                            fallback_calls=sum(facts.fallbacks.values()), executions=facts.executions,
                                            steady=facts.steady_transfers)
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


def growth_findings(sources: list[SourceResult]) -> list[Finding]:
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
        finding.sources.append(where(source, seen[0]))
        findings.append(finding)
    return findings


def dynamo_findings(sources: list[SourceResult]) -> list[Finding]:
    """torch.compile's graph breaks and TorchDynamo's recompilations, from a debug log or an event log."""
    breaks: dict[tuple[str, str, str], int] = {}
    recompiles: dict[tuple[str, str], int] = {}
    first: dict[str, str] = {}
    for source in sources:
        if not source.has_debug:
            continue
        for key, times in source.debug.graph_breaks.items():
            breaks[key] = breaks.get(key, 0) + times
        for key, times in source.debug.dynamo_recompiles.items():
            recompiles[key] = recompiles.get(key, 0) + times
        for kind in (rules.GRAPH_BREAK, rules.DYNAMO_RECOMPILE):
            seen = source.debug.profiler.get(kind)
            if seen is not None and kind not in first:
                first[kind] = where(source, seen[0])
    findings = []
    ranked = sorted(((site, by, reason, times) for (site, by, reason), times in breaks.items()), key=lambda b: -b[3])
    finding = rules.graph_break_finding(breaks=ranked, steps=0)
    if finding is not None:
        finding.sources.append(first[rules.GRAPH_BREAK])
        findings.append(finding)
    ranked_guards = sorted(((f, g, n) for (f, g), n in recompiles.items()), key=lambda r: -r[2])
    finding = rules.dynamo_recompile_finding(recompiles=ranked_guards, steps=0)
    if finding is not None:
        finding.sources.append(first[rules.DYNAMO_RECOMPILE])
        findings.append(finding)
    return findings
