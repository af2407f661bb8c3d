"""Findings and evidence from PT_XLA_DEBUG logs: the lines that force executions, the compiles by site,
the runtime's growing-graph warnings, and the findings of a run known only from its debug output."""

from __future__ import annotations

from collections import Counter

from xladev import analysis
from xladev.analysis import fallback_reasons
from xladev.dumps.debug_analysis import is_program_cause, is_step_cause
from xladev.report.model import SourceResult
from xladev.report.run_facts import RunFacts, where
from xladev.analysis import Finding
from xladev.schema import units
from xladev.schema.sites import short_site, split_site


def _value_read_sites(sources: list[SourceResult]) -> tuple[Counter, dict]:
    sites: Counter = Counter()
    first_lines: dict = {}
    for source in sources:
        if source.debug is None:
            continue
        for (site, cause, _), (count, line, _, _) in source.run.causes.by_key.items():
            if not is_step_cause(cause) and not is_program_cause(cause):
                sites[(site, cause, source.name)] += count
                first_lines.setdefault((site, cause, source.name), f"{source.name}:{line}")
        if not source.run.causes.by_key:
            # No execution analyses (PT_XLA_DEBUG_LEVEL=1, or a pasted block): each compile ran its graph, for its cause.
            for event in source.run.compiled:
                if event.cause and not is_step_cause(event.cause) and not is_program_cause(event.cause):
                    sites[(event.site, event.cause, source.name)] += 1
                    first_lines.setdefault((event.site, event.cause, source.name), f"{source.name}:{event.line}")
    return sites, first_lines


def _same_input_size(sizes: set) -> bool:
    """True when every graph of a site printed one and the same ``Graph input size``."""
    return len(sizes) == 1 and None not in sizes


def debug_evidence(findings: list[Finding], sources: list[SourceResult], steps: int,
                   reads_after_setup: int | None = None) -> list[Finding]:
    """Adds where-from evidence of the debug logs to findings, or makes debug-only findings.

    Args:
      findings: the findings so far.
      sources: the run's inputs.
      steps: the run's steps.
      reads_after_setup: device→host reads after set-up when the inputs count them: with none, a read that ran
        a graph is one-time work (DDP's constructor, the first forward), never an early sync every step.
    """
    extra: list[Finding] = []
    logs = [source for source in sources if source.has_debug]
    if not logs:
        return extra
    by_rule = {finding.rule: finding for finding in findings}
    compile_sites: dict[str, list] = {}
    for source in logs:
        for event in source.run.compiled:
            entry = compile_sites.setdefault(event.where, [0, set(), set(), source.name, event.line, set()])
            entry[0] += 1
            entry[1].add(event.graph_hash)
            entry[2].add((event.inputs, event.outputs))
            entry[5].add(event.sizes.get("input_bytes"))
    recompile = by_rule.get("recompilation")
    if recompile is not None:
        ranked = sorted(compile_sites.items(), key=lambda kv: -kv[1][0])[:3]
        for site, (count, hashes, signatures, name, line, input_sizes) in ranked:
            text = f"{site}: {_count(count, 'compile')}, {_count(len(hashes), 'different graph')}"
            if len(signatures) == 1 and len(hashes) > 1:
                inputs, outputs = next(iter(signatures))
                # Inputs of one size every time: not new shapes, a constant (`same_inputs_recompile` below).
                changed = "again" if _same_input_size(input_sizes) else "with different shapes"
                text += f", all with {inputs} inputs and {outputs} outputs: the same code traced {changed}"
            recompile.evidence.append(text)
            recompile.sources.append(f"{name}:{line}")
        # xladev's debug logs and event logs say what changed at each recompilation: the latest per site.
        latest: dict[str, list[str]] = {}
        for source in logs:
            for event in source.run.compiled:
                if event.changes:
                    latest[event.where] = list(event.changes)
        # The busiest site's graphs took the same inputs every time: a constant changed inside them, not a shape.
        site, (_, hashes, signatures, _, _, input_sizes) = ranked[0] if ranked else ("", (0, (), (), "", 0, set()))
        if len(hashes) > 1 and len(signatures) == 1 and _same_input_size(input_sizes):
            analysis.same_inputs_recompile(recompile, site=short_site(site), graphs=len(hashes),
                                        inputs=next(iter(signatures))[0], input_bytes=next(iter(input_sizes)),
                                        changes_named=site in latest)
        for site, changes in list(latest.items())[:3]:
            recompile.evidence.append(f"what changed at {site} (last recompile): " + "; ".join(changes[:2]))
    transfers = by_rule.get("host-transfers")
    spots = transfer_hot_spots(sources)
    if transfers is not None:  # the user's lines of the reads, whatever input holds them, beside a metrics report too
        for kind, site, count, line in spots[:3]:
            per_step = f", {count / steps:.2f} per step" if steps else ""
            transfers.evidence.append(f"{kind} at {short_site(site)}: {count} transfers{per_step}")
            transfers.sources.append(line)
    reads, first_lines = _value_read_sites(logs)
    target = transfers or by_rule.get("cpu-fallback")
    for key, count in reads.most_common(3):
        site, cause, _ = key
        if target is not None:
            target.evidence.append(f"{site} forced {count} executions ({cause})")
            target.sources.append(first_lines[key])
        elif reads_after_setup != 0:
            finding = analysis.early_sync_finding(site=site, executions=count, steps=steps, cause=cause)
            if finding is not None:
                finding.sources.append(first_lines[key])
                extra.append(finding)
    fallback = next((finding for finding in findings if finding.rule == "cpu-fallback"), None)
    sites = [f"{site} ×{count}" for source in logs for _, site, count in source.run.fallback_sites() if site]
    if fallback is not None and sites:
        fallback.evidence.append("CPU fallback calls by site (all ops): " + ", ".join(sites[:5]))
    # What the input already names needs no pointer to PT_XLA_DEBUG_LEVEL=2.
    changes_known = any(line.startswith("what changed at ") for f in findings for line in f.evidence)
    for finding in findings + extra:
        analysis.without_hints(finding, lines_known=bool(spots or reads), changes_known=changes_known)
    return extra


def transfer_hot_spots(sources: list[SourceResult]) -> list[tuple[str, str, int, str]]:
    """The user's device→host reads, most frequent first: ``(kind, site, count, file:line)`` from xladev's
    PT_XLA_DEBUG summary and an event log's transfer records (the same reads counted once, by the input that
    saw more of them)."""
    spots: dict[tuple[str, str], tuple[int, str]] = {}
    for source in sources:
        found = [(kind, site, count, line) for (kind, site), (count, line) in source.hot_spots.items()]
        summary = source.debug.run_summary if source.debug is not None else None
        found += [(spot["kind"], spot["site"], spot["count"], spot["line"])
                  for spot in (summary or {}).get("hot_spots", ())]
        for kind, site, count, line in found:
            key = (kind, short_site(site))
            if count > spots.get(key, (0, ""))[0]:
                spots[key] = (count, where(source, line))
    return sorted(((kind, site, count, line) for (kind, site), (count, line) in spots.items()),
                  key=lambda spot: -spot[2])


def _count(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def debug_only_findings(sources: list[SourceResult], facts: RunFacts) -> list[Finding]:
    findings = []
    # The ops on the CPU whose output shape follows the data: counted (xladev's summary), or only named
    # (PyTorch/XLA's "Op(s) not lowered" line).
    named = {op for source in sources if source.has_debug for op in source.debug.not_lowered_ops}
    data_dependent = sorted(set(facts.data_dependent_ops())
                            | {op for op in named if fallback_reasons.is_data_dependent(op)})
    recompile = analysis.recompilation_finding(
        steps=facts.steps, compiles=facts.compiles, compiles_at_warmup=facts.compiles_at_warmup,
        warmup_steps=facts.warmup_steps, compile_steps_after_warmup=facts.compile_steps_after_warmup,
        last_compile_step=facts.last_compile_step, stable_graph_size=facts.stable_graph_size,
        compiles_after_last_step=facts.compiles_after_last_step,
        data_dependent_ops=data_dependent, repeated=facts.repeated)
    if recompile is not None:
        recompile.evidence.insert(0, f"from PT_XLA_DEBUG blocks: {facts.compiles} compiles, "
                                     f"{facts.steps} step syncs")
        findings.append(recompile)
    summaries = [(source, source.debug.run_summary) for source in sources
                 if source.has_debug and source.debug.run_summary is not None]
    transfers = analysis.host_transfer_finding(steps=facts.steps, transfers=facts.transfers, item_calls=facts.item_calls,
                                            fallback_calls=sum(facts.fallbacks.values()), executions=facts.executions,
                                            steady=facts.steady_transfers)
    if transfers is not None:  # the user's lines of the reads: `debug_evidence`, for every input
        findings.append(transfers)
    counted = analysis.fallback_findings(facts.fallbacks, facts.steps)
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
        findings.append(Finding("cpu-fallback", analysis.WARNING, f"{op} runs on the CPU",
                                "PyTorch/XLA reported this op as not lowered: it runs on the CPU fallback"
                                + (f" ({fallback_reasons.explanation(op)})." if fallback_reasons.cpu_op(op) else "."),
                                analysis.fallback_remedy(op), evidence=["pt-xla-profiler: Op(s) not lowered"],
                                subject=op))
    return findings


def growth_findings(sources: list[SourceResult], facts: RunFacts | None = None) -> list[Finding]:
    """The missing barrier: the runtime's "graph growing without a barrier" warnings (a debug log or an event
    log), and a run that never marked a step while its graphs ran at value reads (any input, PyTorch/XLA's too).

    Args:
      sources: the run's inputs.
      facts: the run's numbers (its step count), None when unknown.

    Returns:
      At most one finding per warned site; the one of a run that never marked a step says so and is priced
      by the run's whole tracing and compile time.
    """
    findings = _runtime_growth_findings(sources)
    read = _never_marked(sources, facts)
    if read is not None:
        site, cause, inputs, line = read
        finding = analysis.never_marked_finding(findings[0] if findings else None, graphs=facts.compiles,
                                             executions=facts.executions, read_site=site, cause=cause, inputs=inputs)
        if line:
            finding.sources.append(line)
        if not findings:
            findings.append(finding)
    return findings


def _never_marked(sources: list[SourceResult], facts: RunFacts | None) -> tuple | None:
    """``(read site, its cause, graph inputs, file:line)`` when the run never marked a step and its graphs ran
    where values were read; None when it marked one, ran a torch.compile program, or ran nothing.

    A metrics report alone tells it by its counters (no MarkStep, executions and a device→host read); a debug
    log by its causes, which also name the read's line.
    """
    # Executions are the evidence that the graphs ran at the reads: a pasted compilation block alone (no execution
    # block) may come from any run, and its read is told as such (`early-sync`).
    if facts is None or facts.steps > 0 or not facts.executions:
        return None
    first = None
    for source in sources:
        if source.final is not None and any(name.startswith("Dynamo") for name in source.final.counters):
            return None  # torch.compile runs its programs without marking steps
        if not source.has_debug:
            continue
        causes = [event.cause for event in source.run.compiled]
        causes += [cause for (_, cause, _) in source.run.causes.by_key]
        if any(is_step_cause(cause) or is_program_cause(cause) for cause in causes):
            return None
        for event in source.run.compiled:
            if first is None and event.cause:
                first = (short_site(event.site) if event.site else None, event.cause, event.inputs,
                         f"{source.name}:{event.line}")
        for (site, cause, _), (count, line, inputs, _) in source.run.causes.by_key.items():
            if first is None and count:
                first = (short_site(site) if site else None, cause, inputs, f"{source.name}:{line}")
    if first is not None:
        return first
    if facts.executions and (facts.item_calls or facts.transfers):
        return None, "", None, ""
    return None


def _runtime_growth_findings(sources: list[SourceResult]) -> list[Finding]:
    findings = []
    for source in sources:
        warned = source.run.warnings.graph_growing if source.has_debug else None
        if warned is None:
            continue
        # The loop's line is the first warning's (the one the user saw): later ones fall on whichever op of the
        # loop crossed the doubled threshold; the ops are the latest count.
        latest = warned.latest
        finding = analysis.graph_growing_finding(ops=latest.ops, step=latest.step,
                                                 site=short_site(split_site(warned.first.site)[0] or "?"),
                                                 warnings=warned.times)
        finding.sources.append(where(source, warned.latest_line))
        findings.append(finding)
    return findings


def memory_growth_findings(sources: list[SourceResult]) -> list[Finding]:
    """Live device memory, or host memory, that rose at every sampled step: the runtime's warnings, from a debug log
    or an event log.

    Returns:
      At most one finding per memory: the latest warning's (its figures cover the longest growth).
    """
    findings = []
    for space in analysis.MEMORY_SPACES:
        for source in sources:
            warned = source.run.warnings.memory_growing.get(space) if source.has_debug else None
            if warned is not None:
                grew = warned.latest
                finding = analysis.memory_growing_finding(
                    from_step=grew.from_step, from_bytes=grew.from_bytes, to_step=grew.step, to_bytes=grew.to_bytes,
                    per_step_bytes=grew.per_step_bytes, holders=grew.holders, space=space,
                    format_bytes=units.format_bytes)
                finding.sources.append(where(source, warned.latest_line))
                findings.append(finding)
                break
    return findings


def dynamo_findings(sources: list[SourceResult]) -> list[Finding]:
    """torch.compile's graph breaks and TorchDynamo's recompilations, from a debug log or an event log."""
    breaks: dict[tuple[str, str, str], int] = {}
    recompiles: dict[tuple[str, str], int] = {}
    quoted: dict[str, str] = {}  # the first input's latest line of each kind: the finding's source
    for source in sources:
        if not source.has_debug:
            continue
        warnings = source.run.warnings
        for (site, by, reason), warned in warnings.graph_breaks.items():
            key = (short_site(site), by, reason)
            breaks[key] = breaks.get(key, 0) + warned.times
        for key, warned in warnings.dynamo_recompiles.items():
            recompiles[key] = recompiles.get(key, 0) + warned.times
        for kind, table in (("breaks", warnings.graph_breaks), ("recompiles", warnings.dynamo_recompiles)):
            if table and kind not in quoted:
                quoted[kind] = where(source, max(warned.latest_line for warned in table.values()))
    findings = []
    ranked = sorted(((site, by, reason, times) for (site, by, reason), times in breaks.items()), key=lambda b: -b[3])
    finding = analysis.graph_break_finding(breaks=ranked, steps=0)
    if finding is not None:
        finding.sources.append(quoted["breaks"])
        findings.append(finding)
    ranked_guards = sorted(((f, g, n) for (f, g), n in recompiles.items()), key=lambda r: -r[2])
    finding = analysis.dynamo_recompile_finding(recompiles=ranked_guards, steps=0)
    if finding is not None:
        finding.sources.append(quoted["recompiles"])
        findings.append(finding)
    return findings
