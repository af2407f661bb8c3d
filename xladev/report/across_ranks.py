"""Diagnoses across the ranks of one job, from their event logs (`xladev report run.rank*.events.jsonl`).

Each rank's log says which graphs it ran at each user line in each step (`RankTrace`). Lined up by step:
- the ranks should run the same graphs at the same lines; where they do not, the finding names the line,
  the step, each rank's graphs and what changed between them (the logs' IR texts, xladev.graphdiff);
- a rank that compiles at a line after warm-up where the others do not stalls them all;
- the rank that does the most work (its step time less its wait for the others in collectives) in many
  steps, while the others wait for it, is a straggler;
- a rank that saw another go says which and why.
"""

from __future__ import annotations

from xladev import analysis
from xladev.dumps.ir_parser import parse_ir
from xladev.graphdiff import differences
from xladev.report.model import RankTrace, SourceResult
from xladev.analysis import Finding
from xladev.schema.sites import short_site

# Steps before these are set-up (the optimizer's state appears in step 1): compiles there are expected.
WARMUP_STEPS = analysis.SETUP_STEPS
# At most this many lines with diverging graphs are reported (the first ones are the causes).
MAX_DIVERGING_SITES = 3


def findings(per_rank: dict[int | None, list[SourceResult]]) -> list[Finding]:
    """The cross-rank findings of a report's inputs grouped by rank (none with fewer than two traced ranks)."""
    traces: dict[int, tuple[RankTrace, SourceResult]] = {}
    for rank, sources in per_rank.items():
        for source in sources:
            if rank is not None and source.trace is not None and rank not in traces:
                traces[rank] = (source.trace, source)
    found: list[Finding] = []
    for rank, (trace, source) in traces.items():
        for lost, reason, step in trace.lost[:1]:
            finding = analysis.rank_lost_finding(rank=rank, lost=lost, reason=reason, step=step)
            finding.sources.append(source.name)
            found.append(finding)
    if len(traces) < 2:
        return found
    found += _divergences({rank: trace for rank, (trace, _) in traces.items()})
    found += _lone_recompiles({rank: trace for rank, (trace, _) in traces.items()})
    straggler = _straggler({rank: source for rank, (_, source) in traces.items()})
    if straggler is not None:
        found.append(straggler)
    return found


def _by_site(runs) -> dict[str, dict[int, list[str]]]:
    """site -> step -> the graph hashes run there in that step, in order."""
    out: dict[str, dict[int, list[str]]] = {}
    for step, graph_hash, site in runs:
        out.setdefault(short_site(site), {}).setdefault(step, []).append(graph_hash)
    return out


def _divergences(traces: dict[int, RankTrace]) -> list[Finding]:
    per_rank = {rank: _by_site(trace.runs) for rank, trace in traces.items()}
    # Steps every rank reached (a rank that stopped early does not diverge in the steps it never ran).
    last_common = min(max((run[0] for run in trace.runs), default=-1) for trace in traces.values())
    sites = sorted({site for runs in per_rank.values() for site in runs})
    diverging = []
    for site in sites:
        steps = sorted({step for runs in per_rank.values() for step in runs.get(site, {}) if step <= last_common})
        bad = [step for step in steps if len({tuple(runs.get(site, {}).get(step, [])) for runs in per_rank.values()}) > 1]
        if bad:
            diverging.append((bad[0], site, bad))
    out = []
    for first, site, bad in sorted(diverging)[:MAX_DIVERGING_SITES]:
        graphs = {rank: runs.get(site, {}).get(first, []) for rank, runs in per_rank.items()}
        compared, changes = _compare(graphs, traces)
        out.append(analysis.graph_divergence_finding(site=site, step=first, graphs=graphs, changes=changes,
                                                  steps_diverging=len(bad), compared=compared))
    return out


def _compare(graphs: dict[int, list[str]], traces: dict[int, RankTrace]) -> tuple[tuple[int, int] | None, list[str]]:
    """What changed between the first two ranks whose graphs at a line differ (from the majority's to the odd one)."""
    counts: dict[tuple, int] = {}
    for hashes in graphs.values():
        counts[tuple(hashes)] = counts.get(tuple(hashes), 0) + 1
    common = max(counts, key=counts.get)
    base = next(rank for rank, hashes in graphs.items() if tuple(hashes) == common)
    odd = next((rank for rank, hashes in graphs.items() if tuple(hashes) != common), None)
    if odd is None:
        return None, []
    mine, theirs = graphs[base], graphs[odd]
    if not mine or not theirs:
        return (base, odd), [f"rank {odd if not theirs else base} ran no graph there in that step"]
    texts = (traces[base].graph_ir.get(mine[0]), traces[odd].graph_ir.get(theirs[0]))
    if None in texts:
        return (base, odd), ["(a graph's IR text is not in its log)"]
    return (base, odd), differences(parse_ir(texts[0], mine[0]), parse_ir(texts[1], theirs[0]))


def _lone_recompiles(traces: dict[int, RankTrace]) -> list[Finding]:
    late: dict[int, dict[str, list[int]]] = {}
    for rank, trace in traces.items():
        for step, _, site in trace.compiles:
            if step >= WARMUP_STEPS:
                late.setdefault(rank, {}).setdefault(short_site(site), []).append(step)
    out = []
    for rank, sites in sorted(late.items()):
        for site, steps in sites.items():
            others = {other: len(late.get(other, {}).get(site, [])) for other in traces if other != rank}
            if others and max(others.values()) == 0:
                out.append(analysis.rank_recompile_finding(rank=rank, site=site, steps=steps, others=others))
    return out


def _straggler(sources: dict[int, SourceResult]) -> Finding | None:
    busy: dict[int, dict[int, float]] = {}
    waits: dict[int, dict[int, float]] = {}
    for rank, source in sources.items():
        times = [t for t in (source.time.step_times if source.time is not None else []) if t.step >= WARMUP_STEPS]
        # A step's collectives run at its barrier: the wait recorded under step N is in step N's time.
        recorded = source.trace.wait_ns_by_step
        waits[rank] = {t.step: float(recorded.get(t.step, 0)) for t in times}
        busy[rank] = {t.step: t.wall_ns - waits[rank][t.step] for t in times}
    common = sorted(set.intersection(*(set(b) for b in busy.values()))) if busy else []
    return analysis.straggler_finding(busy_ns={r: [busy[r][s] for s in common] for r in busy},
                                   wait_ns={r: [waits[r][s] for s in common] for r in waits})
